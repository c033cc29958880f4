// The attention op's reusable scratch (gqa_workspace.h).
#include "cuda/gqa_workspace.h"

#include <string>

#include "cuda/cuda_check.h"

namespace kvshare::detail {

GqaCudaWorkspace::~GqaCudaWorkspace() {
  for (const Mem& m : slots_) {
    if (m.data != nullptr) cudaFree(m.data);
  }
}

void* GqaCudaWorkspace::Device(Slot s, std::size_t bytes, cudaStream_t stream, const char* what) {
  if (bytes == 0) return nullptr;
  Mem& m = slots_[static_cast<std::size_t>(s)];
  if (m.size >= bytes) return m.data;
  RequireNotCapturing(stream, what);
  if (m.data != nullptr) {
    cudaFree(m.data);
    m = Mem{};
  }
  CudaCheck(cudaMalloc(&m.data, bytes), (std::string(what) + " of " + std::to_string(bytes) + " bytes").c_str());
  m.size = bytes;
  return m.data;
}

}  // namespace kvshare::detail
