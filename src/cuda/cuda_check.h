// CUDA runtime calls that fail raise kvshare::Error (never abort), and device
// scratch memory owned for the length of one call. Internal header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
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
