// The CUDA backend's entry points (src/cuda/), called by GroupQueryAttention
// (gqa.cc) for GqaRunOptions::device == kCuda and by DeviceBytes (device
// memory of KV caches) in KVSHARE_CUDA builds. Internal header.
#pragma once

#include <cstddef>

#include "attention/gqa_plan.h"
#include "kvshare/attention.h"

namespace kvshare::detail {

// Throws kvshare::Error unless a CUDA device is usable and every tensor of
// in / out is where attention.h (GqaRunOptions::device) says: float tensors in
// device memory, index inputs in host memory. Reads no tensor data.
void CheckCudaCall(const GqaInputs& in, const GqaOutputs& out);

// Runs the op on the GPU for plan p = PlanGqa(attrs, in, out): RoPE on Q, the
// new K/V rows into present / the cache, attention; returns when the stream is
// done. Throws kvshare::Error on a CUDA failure.
void GroupQueryAttentionCuda(const GqaAttributes& attrs, const GqaInputs& in, const GqaOutputs& out,
                             const GqaPlan& p, const GqaRunOptions& options);

// bytes of zeroed device memory (cudaMalloc + cudaMemset); throws
// kvshare::Error naming `what` the memory is for without a usable GPU or when
// the allocation fails.
void* CudaAllocZeroed(std::size_t bytes, const char* what);
// Frees what CudaAllocZeroed returned (errors ignored: used by destructors).
void CudaFree(void* ptr) noexcept;

}  // namespace kvshare::detail
