// Pinned staging memory for asynchronous uploads (pinned_staging.h).
#include "cuda/pinned_staging.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "cuda/cuda_check.h"

namespace kvshare::detail {

bool StreamCapturing(cudaStream_t stream, const char* what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CudaCheck(cudaStreamIsCapturing(stream, &status), what);
  return status != cudaStreamCaptureStatusNone;
}

void RequireNotCapturing(cudaStream_t stream, const char* what) {
  if (StreamCapturing(stream, what)) {
    throw Error(std::string(what) +
                ": would allocate while the stream is being captured into a CUDA graph (grow the buffers with an "
                "eager step first)");
  }
}

PinnedStaging::~PinnedStaging() {
  for (const Block& b : blocks_) cudaFreeHost(b.data);
}

void* PinnedStaging::Take(std::size_t bytes, cudaStream_t stream, const char* what) {
  constexpr std::size_t kAlign = 256, kFirstBlock = std::size_t{1} << 16;
  bytes = std::max<std::size_t>((bytes + kAlign - 1) / kAlign * kAlign, kAlign);
  while (block_ < blocks_.size() && used_ + bytes > blocks_[block_].size) {
    ++block_;
    used_ = 0;
  }
  if (block_ == blocks_.size()) {
    RequireNotCapturing(stream, what);
    const std::size_t last = blocks_.empty() ? kFirstBlock / 2 : blocks_.back().size;
    Block b;
    b.size = std::max(bytes, 2 * last);
    CudaCheck(cudaHostAlloc(reinterpret_cast<void**>(&b.data), b.size, cudaHostAllocDefault),
              (std::string(what) + ": pinned staging allocation of " + std::to_string(b.size) + " bytes").c_str());
    blocks_.push_back(b);
    used_ = 0;
  }
  void* at = blocks_[block_].data + used_;
  used_ += bytes;
  return at;
}

void* PinnedStaging::Put(const void* host, std::size_t bytes, cudaStream_t stream, const char* what) {
  void* at = Take(bytes, stream, what);
  if (bytes > 0) std::memcpy(at, host, bytes);
  return at;
}

void PinnedStaging::Reset() {
  block_ = 0;
  used_ = 0;
}

}  // namespace kvshare::detail
