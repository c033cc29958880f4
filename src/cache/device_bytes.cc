#include "cache/device_bytes.h"

#include <string>
#include <utility>

#include "kvshare/common/error.h"

#if KVSHARE_HAVE_CUDA
#include "cuda/device_memory.h"
#endif

namespace kvshare::detail {

DeviceBytes::DeviceBytes(Device device, std::size_t bytes, const char* what) : device_(device), bytes_(bytes) {
  if (device == Device::kCpu) {
    host_.assign(bytes, 0);
    return;
  }
#if KVSHARE_HAVE_CUDA
  device_ptr_ = static_cast<unsigned char*>(CudaAllocZeroed(bytes, what));
#else
  (void)what;
  throw Error("device cuda requested for " + std::to_string(bytes) +
              " bytes, but this kvshare was built without CUDA (configure with -DKVSHARE_CUDA=ON and nvcc on PATH)");
#endif
}

DeviceBytes::~DeviceBytes() { Release(); }

DeviceBytes::DeviceBytes(DeviceBytes&& other) noexcept
    : device_(other.device_), bytes_(other.bytes_), host_(std::move(other.host_)), device_ptr_(other.device_ptr_) {
  other.device_ptr_ = nullptr;
  other.bytes_ = 0;
}

DeviceBytes& DeviceBytes::operator=(DeviceBytes&& other) noexcept {
  if (this != &other) {
    Release();
    device_ = other.device_;
    bytes_ = other.bytes_;
    host_ = std::move(other.host_);
    device_ptr_ = other.device_ptr_;
    other.device_ptr_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBytes::Release() noexcept {
#if KVSHARE_HAVE_CUDA
  if (device_ptr_ != nullptr) CudaFree(device_ptr_);
#endif
  device_ptr_ = nullptr;
}

}  // namespace kvshare::detail
