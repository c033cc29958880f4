// CUDA runtime calls that fail raise kvshare::Error (never abort), and device
// scratch memory owned for the length of one call. Internal header.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kvshare/common/error.h"

namespace kvshare::detail {

// Throws kvshare::Error("<what>: <CUDA error name>: <description>") unless e is
// cudaSuccess (the sticky error state is cleared first when it is not).
inline void CudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw Error(std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

// Throws kvshare::Error("<what>: no CUDA device is usable (...)") unless the
// runtime finds a device (a machine without an NVIDIA driver reports why).
inline void RequireCudaDevice(const std::string& what) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e == cudaSuccess && devices > 0) return;
  cudaGetLastError();
  throw Error(
      what + ": device cuda requested, but no CUDA device is usable (" +
      (e != cudaSuccess ? std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) : std::string("no devices")) +
      "); run on a machine with an NVIDIA GPU and driver, or use device cpu");
}

// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
// smem) once per device: `done` (one per kernel instance, bit d for device d)
// remembers where it was set, so that later launches, including those
// captured into a CUDA graph (docs/gpu.md), make no call besides the launch.
// smem must be the same at every call with the same `done`. Throws
// kvshare::Error naming `what` when a call fails.
inline void SetMaxDynamicSharedMemoryOnce(const void* kernel, int smem, std::atomic<std::uint64_t>& done,
                                          const char* what) {
  int device = 0;
  CudaCheck(cudaGetDevice(&device), what);
  const std::uint64_t bit = device >= 0 && device < 64 ? std::uint64_t{1} << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return;
  CudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), what);
  done.fetch_or(bit, std::memory_order_release);
}

// Device memory from the stream-ordered allocator, freed on the same stream
// when the owner goes out of scope.
class DeviceScratch {
 public:
  DeviceScratch(std::size_t bytes, cudaStream_t stream, const char* what) : stream_(stream) {
    if (bytes > 0) CudaCheck(cudaMallocAsync(&ptr_, bytes, stream), what);
  }
  ~DeviceScratch() {
    if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  template <typename T>
  T* As() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace kvshare::detail
