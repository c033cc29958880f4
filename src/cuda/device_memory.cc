// Device memory for KV caches and the GPU model (cache/device_bytes.h).
#include "cuda/device_memory.h"

#include <cuda_runtime.h>

#include <string>

#include "cuda/cuda_check.h"

namespace kvshare::detail {

void* CudaAllocZeroed(std::size_t bytes, const char* what) {
  RequireCudaDevice(what);
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  const std::string where = std::string(what) + " of " + std::to_string(bytes) + " bytes on the GPU";
  CudaCheck(cudaMalloc(&ptr, bytes), where.c_str());
  const cudaError_t e = cudaMemset(ptr, 0, bytes);
  if (e != cudaSuccess) {
    cudaFree(ptr);
    CudaCheck(e, where.c_str());
  }
  return ptr;
}

void CudaFree(void* ptr) noexcept {
  if (ptr != nullptr) cudaFree(ptr);
}

}  // namespace kvshare::detail
