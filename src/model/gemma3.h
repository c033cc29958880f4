// Gemma 3 family (general.architecture = "gemma3"), any size; see
// docs/architecture.md §5 for the graph. Hyperparameters come from metadata.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvshare/model/model.h"
#include "quant/quant.h"

namespace kvshare {

// Builds a Gemma 3 model over an opened file: arch "gemma3", or
// "gemma-embedding" (EmbeddingGemma, an encoder: ModelConfig::causal false).
// Throws kvshare::Error naming the missing key or tensor.
std::unique_ptr<Model> LoadGemma3(GgufFile file, const std::string& arch = "gemma3", PackOptions pack = {});

namespace detail {

// The weights of one Gemma 3 layer as a loader keeps them: M per matrix, V
// per norm vector (the CPU model: WeightMatrix and const float*; the GPU
// model, src/cuda_model/: bf16 and fp32 device buffers).
template <typename M, typename V>
struct Gemma3Layer {
  M q, k, v, o, gate, up, down;
  V attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffw_norm;
};

// Layer i's tensors (blk.i.*, GGUF names) at config c's shapes, each through
// mat(name, rows, cols) or vec(name, n), matrices first, in that order.
template <typename M, typename V, typename Mat, typename Vec>
Gemma3Layer<M, V> LoadGemma3Layer(const ModelConfig& c, int i, const Mat& mat, const Vec& vec) {
  const std::string p = "blk." + std::to_string(i) + ".";
  const std::int64_t E = c.n_embd, qd = static_cast<std::int64_t>(c.n_head) * c.head_dim,
                     kvd = static_cast<std::int64_t>(c.n_head_kv) * c.head_dim;
  Gemma3Layer<M, V> L;
  L.q = mat(p + "attn_q.weight", qd, E);
  L.k = mat(p + "attn_k.weight", kvd, E);
  L.v = mat(p + "attn_v.weight", kvd, E);
  L.o = mat(p + "attn_output.weight", E, qd);
  L.gate = mat(p + "ffn_gate.weight", c.n_ff, E);
  L.up = mat(p + "ffn_up.weight", c.n_ff, E);
  L.down = mat(p + "ffn_down.weight", E, c.n_ff);
  L.attn_norm = vec(p + "attn_norm.weight", E);
  L.q_norm = vec(p + "attn_q_norm.weight", c.head_dim);
  L.k_norm = vec(p + "attn_k_norm.weight", c.head_dim);
  L.post_attn_norm = vec(p + "post_attention_norm.weight", E);
  L.ffn_norm = vec(p + "ffn_norm.weight", E);
  L.post_ffw_norm = vec(p + "post_ffw_norm.weight", E);
  return L;
}

}  // namespace detail
}  // namespace kvshare
