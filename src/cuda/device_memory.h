// Zeroed CUDA device memory, for DeviceBytes (cache/device_bytes.h: the KV
// cache's buffers and the GPU model's). Internal header of the CUDA backend,
// its own so that the cache layer allocates without the attention op's
// entry points (attention/gqa_device.h). KVSHARE_CUDA builds only.
#pragma once

#include <cstddef>

namespace kvshare::detail {

// bytes of zeroed device memory (cudaMalloc + cudaMemset); nullptr for 0
// bytes. Throws kvshare::Error naming `what` the memory is for without a
// usable GPU or when the allocation fails.
void* CudaAllocZeroed(std::size_t bytes, const char* what);
// Frees what CudaAllocZeroed returned (errors ignored: used by destructors).
void CudaFree(void* ptr) noexcept;

}  // namespace kvshare::detail
