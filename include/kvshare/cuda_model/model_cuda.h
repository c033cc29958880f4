// A model's forward pass on an NVIDIA GPU (src/cuda_model/; built when the
// CUDA backend is, KVSHARE_CUDA). docs/gpu.md says what runs there and what
// has run on a GPU so far.
#pragma once

#include <memory>

#include "kvshare/common/tensor.h"
#include "kvshare/model/model.h"

namespace kvshare {

struct CudaModelOptions {
  // The weight matrices' dtype on the device: kBFloat16 (about 2 bytes per
  // parameter; activations rounded to bf16 at each projection's input) or
  // kFloat32 (4 bytes, fp32 products: the CPU model's numbers within fp32
  // rounding, for checks).
  DType weights = DType::kBFloat16;
};

// Moves a loaded model to the GPU and returns it as a Model whose states keep
// their KV cache in device memory (KvCacheOptions::device = kCuda, the same
// layer plan, window rings and KV sharing: a KV-shared layer reads its source
// layer's device buffers, no copy) and whose Forward / ForwardBatch run every
// layer there. Architectures: gemma3, gemma4 (every Gemma 4 layer kind:
// per-layer head size and KV heads, proportional RoPE, k_eq_v, KV-shared
// layers, per-layer embeddings, MoE layers, the final logit softcap) and
// gemma3n (AltUp streams, Laurel, activation sparsity).
//  - weights dequantized at load (the CPU's dequantizer) to options.weights;
//    norm weights, the MoE router and scales float32;
//  - projections through cuBLAS (fp32 accumulation and output);
//  - norms, GeGLU, residuals, softcap in fp32; attention through
//    GroupQueryAttention on the device cache (its tensor-core kernel for fp16
//    / bf16 caches); MoE routing (softmax, top-k) on the host over the
//    router's device logits, the experts as cuBLAS products over their rows;
//  - ForwardBatch takes several entries (decode rows and prompt chunks mixed,
//    any rows), run in lock-step chunks of max_step as the CPU model does;
//  - logits [sum num_logits, n_vocab] fp32 and ModelState::hidden(), copied
//    back to the host.
// The logits follow the CPU model's within bf16 rounding (tests/
// cuda_model_test.cc compares them on random tiny models). NewState takes the
// CPU model's options. Not on the GPU: embedding inputs (images, audio),
// hard-token rows, Embed, CopyRow (they throw or return false, saying so).
// Gemma 4's assistant drafter runs next to it on the GPU
// (Model::AssistantOnDevice: its layers read the state's device cache).
// Throws kvshare::Error for a build without CUDA, no usable GPU, an
// architecture without a GPU forward pass (gemma-embedding, the Gemma 4
// assistant drafter, ...: the message names what runs where), or device
// memory that runs out.
std::unique_ptr<Model> MoveModelToCuda(std::unique_ptr<Model> model, const CudaModelOptions& options = {});

}  // namespace kvshare
