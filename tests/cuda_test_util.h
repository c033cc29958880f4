// Helpers of the CUDA tests (tests/cuda_*.cc): whether a GPU is usable, the
// message of a kvshare::Error, and device mirrors of host tensors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/common/tensor.h"

#if KVSHARE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace kvshare::testing {

// The message of the kvshare::Error that f throws ("" when it throws none).
template <class F>
inline std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool GpuUsable(std::string* why) {
#if KVSHARE_HAVE_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device";
    return false;
  }
  return true;
#else
  *why = "built without CUDA (KVSHARE_CUDA=OFF)";
  return false;
#endif
}

// KVSHARE_CUDA_PLAIN=1 in the environment: every case runs the fp32 kernels.
inline bool PlainKernelsOnly() {
  const char* e = std::getenv("KVSHARE_CUDA_PLAIN");
  return e != nullptr && e[0] == '1';
}

// The tolerance of attention outputs over K/V of dtype kv where the
// tensor-core kernel may take the call: it rounds Q and the probabilities to
// the K/V dtype (attend_mma_cuda.h), so fp16 K/V get 3e-3 and bf16 1e-2 (the
// 16-bit table value) unless `fp32` (the fp32 kernels' tolerance) is larger;
// other dtypes and KVSHARE_CUDA_PLAIN=1 runs keep `fp32`.
inline double TensorCoreTolerance(DType kv, double fp32) {
  if (PlainKernelsOnly() || (kv != DType::kFloat16 && kv != DType::kBFloat16)) return fp32;
  return std::max(fp32, kv == DType::kFloat16 ? 3e-3 : 1e-2);
}

#if KVSHARE_HAVE_CUDA

// Device copies of host tensors, one per host buffer (aliases stay aliases);
// Out() buffers come back with CopyBack(). Index inputs are not mirrored:
// they stay on the host, as attention.h requires.
class DeviceMirror {
 public:
  ~DeviceMirror() {
    for (auto& [host, dev] : dev_) cudaFree(dev);
  }
  ConstTensorView In(ConstTensorView v) {
    v.data = Map(v.data, v.NumBytes());
    return v;
  }
  TensorView Out(TensorView v) {
    void* host = v.data;
    v.data = Map(host, v.NumBytes());
    if (v.data != nullptr) back_.push_back({v.data, host, v.NumBytes()});
    return v;
  }
  void CopyBack() {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (const Back& b : back_) ASSERT_EQ(cudaMemcpy(b.host, b.dev, b.bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }

 private:
  struct Back {
    void* dev;
    void* host;
    std::size_t bytes;
  };
  void* Map(const void* host, std::size_t bytes) {
    if (bytes == 0) return nullptr;
    if (auto it = dev_.find(host); it != dev_.end()) return it->second;
    void* dev = nullptr;
    EXPECT_EQ(cudaMalloc(&dev, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    dev_[host] = dev;
    return dev;
  }
  std::map<const void*, void*> dev_;
  std::vector<Back> back_;
};

#endif  // KVSHARE_HAVE_CUDA

}  // namespace kvshare::testing
