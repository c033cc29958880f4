// A model's forward pass on an NVIDIA GPU (src/cuda_model/; built when the
// CUDA backend is, KVSHARE_CUDA). docs/gpu.md says what runs there and what
// has run on a GPU so far.
#pragma once

#include <cstdint>
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
  // Decode steps (every row of the step has one token) as CUDA graphs: the
  // step's device work (layers and LM head) is captured on the model's
  // stream and launched as one graph, the executable graph of each row count
  // reused (updated to the step's arguments); the first step of each row
  // count runs eagerly (its buffers grow). Steps of a family with a mid-step
  // host round trip (Gemma 4's MoE routing), prompt chunks and probed steps
  // run eagerly, as does a step whose capture fails (printed once per
  // process on stderr). Logits are bitwise those of eager steps (the same
  // kernels in the same order). false, or KVSHARE_CUDA_GRAPHS=0 in the
  // environment at MoveModelToCuda: every step eager. docs/gpu.md.
  bool cuda_graphs = true;
};

// How a GPU model state's steps ran so far (CUDA graphs, CudaModelOptions::
// cuda_graphs); all zero for a state of any other model.
struct CudaGraphStats {
  std::int64_t graph_steps = 0;       // steps launched as a graph
  std::int64_t captured = 0;          // captures that succeeded
  std::int64_t updated = 0;           // ... whose exec was updated (cudaGraphExecUpdate)
  std::int64_t instantiated = 0;      // ... whose exec was instantiated anew
  std::int64_t capture_failures = 0;  // decode steps rerun eagerly after a failed capture
  std::int64_t eager_steps = 0;       // steps run eagerly (prompt chunks, uncapturable, failures)
};
CudaGraphStats CudaGraphStatsOf(const ModelState& state);
// Test hook: the next n captures of the state's decode steps fail as a CUDA
// error inside a capture would (the fallback's tests). A no-op for states of
// other models.
void FailCudaGraphCaptures(ModelState& state, int n);

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
// CPU model's options. Embedding inputs (images, audio) and hard-token rows
// are uploaded over the step's token rows; Embed runs the layers on the GPU
// and the pooling and dense head on the host as the CPU does (gemma-embedding,
// EmbeddingGemma, goes to the Gemma 3 family: its layers bidirectional);
// CopyRow returns false. Gemma 4's assistant drafter runs next to it on the
// GPU (Model::AssistantOnDevice: its layers read the state's device cache).
// Throws kvshare::Error for a build without CUDA, no usable GPU, an
// architecture without a GPU forward pass (the message names what runs
// where), or device memory that runs out.
std::unique_ptr<Model> MoveModelToCuda(std::unique_ptr<Model> model, const CudaModelOptions& options = {});

}  // namespace kvshare
