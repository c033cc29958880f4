// Gemma 4's assistant drafter on the GPU (docs/speculative.md "On the GPU"):
// the twin of src/model/gemma4_assistant.cc for a target whose states keep
// their KV cache in device memory (the GPU model, CudaDecoder). Its layers
// attend to the target state's device cache through GroupQueryAttention's
// read-only static scatter form on the device (no K/V copy), its projections
// run through cuBLAS (weights uploaded once, bf16 or fp32 as the target's
// CudaModelOptions), its activations live in device memory. Per draft step
// one row goes up ([token embedding ; hidden], 2 E_b floats, as the CPU
// builds it) and the logits [n_vocab] and h' [E_b] come back to the host,
// where the drafter takes the argmax. Internal to src/cuda_model.
#pragma once

#include <memory>

#include "kvshare/cuda_model/model_cuda.h"
#include "kvshare/model/gemma4_assistant.h"

namespace kvshare::detail {

// The GPU twin of `cpu` (an AssistantModel::Load assistant, borrowed: it must
// outlive the twin). config(), gguf() and Sources() are cpu's; Step takes a
// target state on device cuda and otherwise has cpu's checks and errors.
// Throws kvshare::Error for no usable device, an assistant not loaded by
// AssistantModel::Load, or device memory that runs out.
std::unique_ptr<AssistantModel> MakeCudaAssistant(const AssistantModel& cpu, const CudaModelOptions& options);

}  // namespace kvshare::detail
