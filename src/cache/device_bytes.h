// An owning, zero-filled byte buffer in host memory or in CUDA device memory
// (the KV cache's storage, KvCacheOptions::device; the GPU model's weights and
// activations, src/cuda_model/). Internal header of the cache layer, the
// lowest layer that owns memory on a device; it reaches the device runtime
// only through src/cuda/device_memory.h (docs/architecture.md §1).
#pragma once

#include <cstddef>
#include <vector>

#include "kvshare/common/tensor.h"

namespace kvshare::detail {

class DeviceBytes {
 public:
  DeviceBytes() = default;
  // bytes zeroed bytes on `device`. Throws kvshare::Error for Device::kCuda
  // in a build without CUDA, without a usable GPU, or when the allocation
  // fails (the message names `what`, says how many bytes and why).
  DeviceBytes(Device device, std::size_t bytes, const char* what = "KV cache allocation");
  ~DeviceBytes();
  DeviceBytes(DeviceBytes&& other) noexcept;
  DeviceBytes& operator=(DeviceBytes&& other) noexcept;
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  unsigned char* data() { return device_ == Device::kCpu ? host_.data() : device_ptr_; }
  const unsigned char* data() const { return device_ == Device::kCpu ? host_.data() : device_ptr_; }
  std::size_t size() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void Release() noexcept;

  Device device_ = Device::kCpu;
  std::size_t bytes_ = 0;
  std::vector<unsigned char> host_;
  unsigned char* device_ptr_ = nullptr;
};

}  // namespace kvshare::detail
