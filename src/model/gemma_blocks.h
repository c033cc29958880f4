// The blocks the Gemma 4 and Gemma 3n forward passes share: the attention
// block (Q / K / V projections, q / k norms, the scale-free V norm, the GQA op
// on the state's cache, O, the post-attention norm), per-layer embeddings
// (PLE: the per-layer inputs of every token) and the per-layer gate that
// adds them to a layer's output. Internal to src/model.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "quant/quant.h"

namespace kvshare::detail {

// One layer's attention weights.
struct GemmaAttentionWeights {
  int hd = 0;    // head size H
  int n_kv = 0;  // KV heads
  WeightMatrix q, o;
  std::optional<WeightMatrix> k, v;  // k: absent on layers whose KV is shared; v: absent => V = raw K (k_eq_v)
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* post_norm = nullptr;  // post_attention_norm
};

// Reads `<p>attn_q`, attn_q_norm, attn_output and post_attention_norm, and
// attn_k / attn_k_norm / attn_v: K required where the layer computes its own
// K/V (`owns`), loaded when present on KV-shared layers (a state with less
// sharing may use them); V always optional (k_eq_v). Matrices are prepared
// for MatMul (K / V of shared layers are not: the default plan never uses
// them). kvshare::Error names a missing or ill-shaped tensor.
GemmaAttentionWeights LoadGemmaAttention(const TensorLookup& t, const std::string& p, int n_head, int hd, int n_kv,
                                         std::int64_t n_embd, bool owns);

struct GemmaAttentionScratch {
  std::vector<float> q, k, v, attn;
};

// What the attention block needs of the model and the step.
struct GemmaAttentionCall {
  int layer = 0;
  bool owns = true;  // the layer computes and writes its K/V (false: it reads its source's)
  int n_head = 0;
  float scale = 1.0f;
  float eps = 1e-6f;
  const RopeTable* rope = nullptr;
  std::span<const QuerySpan> spans;  // the rows of h, per cache row
};

// out[S, E] = post_norm(W_o · attention): Q (and on owning layers K, V) of the
// normed input h [S, E], per-head RMSNorm of Q and K, scale-free RMSNorm of V
// (V = the raw K projection when the layer has no V), attention through
// Attend on st's cache. S = the rows the spans cover; out may not alias h.
void GemmaAttentionBlock(DecoderState& st, const GemmaAttentionWeights& w, const GemmaAttentionCall& call,
                         const float* h, float* out, GemmaAttentionScratch& s, ThreadPool* pool);

// Per-layer embeddings (PLE; HF get_per_layer_inputs + project_per_layer_inputs).
struct PerLayerEmbeddings {
  int width = 0;  // embedding_length_per_layer_input (0: none)
  int n_layer = 0;
  WeightMatrix table;                // per_layer_token_embd [vocab_ple, n_layer * width]: rows looked up
  WeightMatrix proj;                 // per_layer_model_proj [n_layer * width, E], prepared for MatMul
  const float* proj_norm = nullptr;  // per_layer_proj_norm [width]

  // Reads the three tensors (kvshare::Error naming a missing or ill-shaped
  // one). The table has between min_rows and n_vocab rows: Gemma 3n's may be
  // shorter than the vocabulary (HF vocab_size_per_layer_input; ids past it
  // use row 0, as HF does), Gemma 4's has one row per token.
  void Load(const TensorLookup& t, int n_layer, int width, std::int64_t n_embd, std::int64_t n_vocab,
            std::int64_t min_rows);

  // out[s, l * width + i] = (RMSNorm(proj x_s / sqrt(E), proj_norm)[l, i] +
  // table[token_s][l * width + i] * sqrt(width)) / sqrt(2), x: [S, E] the
  // scaled token embeddings; `row` is scratch.
  void Compute(const float* x, std::span<const std::int32_t> tokens, std::int64_t n_embd, float eps,
               std::vector<float>& out, std::vector<float>& row, ThreadPool* pool) const;
};

// A layer's gate of its per-layer inputs.
struct PerLayerGateWeights {
  WeightMatrix inp_gate;  // [width, E]
  WeightMatrix proj;      // [E, width]
  const float* post_norm = nullptr;
};

// Reads `<p>inp_gate`, proj and post_norm (matrices prepared for MatMul).
PerLayerGateWeights LoadPerLayerGate(const TensorLookup& t, const std::string& p, int width, std::int64_t n_embd);

// out[s] = RMSNorm(proj · (gelu_tanh(inp_gate · in_s) * ple[src_s, layer]), post_norm)
// for s < S, in: [S, E]; ple: PerLayerEmbeddings::Compute's rows (row src_s
// for input row s); g, u: scratch.
void PerLayerGate(const PerLayerGateWeights& w, const float* in, std::int64_t S, const std::vector<float>& ple,
                  std::span<const std::int64_t> src, int layer, int width, int n_layer, std::int64_t n_embd, float eps,
                  std::vector<float>& g, std::vector<float>& u, float* out, ThreadPool* pool);

}  // namespace kvshare::detail
