// Pinned (page-locked) host memory for one step's uploads: each Put copies
// host data into memory that stays unchanged until Reset, so an asynchronous
// copy from it (cudaMemcpyAsync, or the memcpy node of a captured CUDA graph,
// which reads it at launch) sees the data of its own call. Internal header of
// the CUDA backend (KVSHARE_CUDA builds).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace kvshare::detail {

// Whether `stream` is being captured into a CUDA graph (an invalidated
// capture counts: it has not ended). Throws kvshare::Error naming `what` when
// the query fails (e.g. the legacy stream while a blocking stream captures).
bool StreamCapturing(cudaStream_t stream, const char* what);
// Throws kvshare::Error("<what>: ... would allocate while the stream is being
// captured into a CUDA graph ...") when `stream` is capturing: memory must be
// grown by an eager step first (nothing may allocate inside a capture).
void RequireNotCapturing(cudaStream_t stream, const char* what);

class PinnedStaging {
 public:
  PinnedStaging() = default;
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // A pinned copy of host[0, bytes), 256-byte aligned, valid and unchanged
  // until Reset. Grows (cudaHostAlloc, a new block; earlier pointers stay
  // valid) when full; throws kvshare::Error naming `what` when that fails or
  // `stream` is being captured (RequireNotCapturing).
  void* Put(const void* host, std::size_t bytes, cudaStream_t stream, const char* what);
  // The same, uninitialized (a download target).
  void* Take(std::size_t bytes, cudaStream_t stream, const char* what);
  // Every block reusable again: call when the work that reads the memory
  // (the stream's copies) is complete.
  void Reset();

 private:
  struct Block {
    unsigned char* data = nullptr;
    std::size_t size = 0;
  };
  std::vector<Block> blocks_;
  std::size_t block_ = 0, used_ = 0;  // the block being filled, bytes used in it
};

}  // namespace kvshare::detail
