// Gemma 3n family (general.architecture = "gemma3n"), text decoder: AltUp
// streams, Laurel, per-layer embeddings, activation sparsity, KV-shared
// trailing layers. Every hyperparameter comes from metadata and from the
// tensors (docs/gemma3n.md).
#pragma once

#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "kvshare/model/model.h"
#include "model/gemma_blocks.h"
#include "quant/quant.h"

namespace kvshare {

// Builds a Gemma 3n model over an opened file. Throws kvshare::Error naming
// the missing or ill-shaped key or tensor (an AltUp count that does not match
// the projections, a sparsity array of the wrong length).
std::unique_ptr<Model> LoadGemma3n(GgufFile file, PackOptions pack = {});

namespace detail {

// One Gemma 3n layer's weights as the CPU model loaded them.
struct Gemma3nLayer {
  const float* attn_norm = nullptr;
  GemmaAttentionWeights attn;
  const float* ffn_norm = nullptr;
  WeightMatrix gate, up, down;
  const float* post_ffw_norm = nullptr;
  float sparsity = -INFINITY;       // Phi^-1(activation sparsity); -inf: none
  WeightMatrix laurel_l, laurel_r;  // [rank, E], [E, rank]
  const float* laurel_norm = nullptr;
  // AltUp (n = streams): coefficients as float rows.
  std::vector<float> router;  // [n, E]
  const float* router_norm = nullptr;
  std::vector<float> predict_coef;       // [n * n, n]
  std::vector<float> correct_coef;       // [n, n]
  const float* correct_scale = nullptr;  // [E]
  PerLayerGateWeights ple_gate;
};

// A loaded Gemma 3n model's weights beyond DecoderModel's (its LM head and
// RoPE), for a copy on another device (src/cuda_model/); nullopt when `model`
// is not a LoadGemma3n model. Valid while the model lives.
struct Gemma3nWeights {
  int n_altup = 0;                                          // AltUp streams
  int active = 0;                                           // the active stream
  const std::vector<WeightMatrix>* altup_proj = nullptr;    // n - 1 of [E, E]
  const std::vector<WeightMatrix>* altup_unembd = nullptr;  // n - 1 of [E, E]
  const PerLayerEmbeddings* ple = nullptr;
  const std::vector<Gemma3nLayer>* layers = nullptr;
};
std::optional<Gemma3nWeights> Gemma3nWeightsOf(const Model& model);

}  // namespace detail

}  // namespace kvshare
