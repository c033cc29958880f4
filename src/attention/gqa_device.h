// The CUDA backend's entry points (src/cuda/), called by GroupQueryAttention
// (gqa.cc) for GqaRunOptions::device == kCuda in KVSHARE_CUDA builds. Internal
// header: the attention layer declares what it needs and src/cuda/ defines it,
// so attention/ never includes cuda/ (docs/architecture.md §1).
#pragma once

#include "attention/gqa_plan.h"
#include "kvshare/attention/gqa.h"

namespace kvshare::detail {

// Throws kvshare::Error unless a CUDA device is usable and every tensor of
// in / out is where attention.h (GqaRunOptions::device) says: float tensors in
// device memory, index inputs in host memory. Reads no tensor data. A call
// with options.cuda_workspace on a stream being captured into a CUDA graph
// (the GPU model's decode steps) skips the pointer kinds: its caller ran the
// same buffers through an eager call first, and a capture should make no
// call it does not need (docs/gpu.md "CUDA graphs of decode steps").
void CheckCudaCall(const GqaInputs& in, const GqaOutputs& out, const GqaRunOptions& options);

// Runs the op on the GPU for plan p = PlanGqa(attrs, in, out): RoPE on Q, the
// new K/V rows into present / the cache, attention; returns when the stream is
// done. Throws kvshare::Error on a CUDA failure.
void GroupQueryAttentionCuda(const GqaAttributes& attrs, const GqaInputs& in, const GqaOutputs& out, const GqaPlan& p,
                             const GqaRunOptions& options);

}  // namespace kvshare::detail
