// Gemma 4 family (general.architecture = "gemma4"), text decoder: E2B / E4B
// (per-layer embeddings, KV-shared trailing layers, double-wide MLP), 31B
// (k_eq_v, per-layer KV heads), 26B-A4B (MoE layers). Every hyperparameter comes
// from metadata and from which tensors exist (docs/architecture.md §5).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "kvshare/model/model.h"
#include "model/gemma4_moe.h"
#include "model/gemma_blocks.h"
#include "quant/quant.h"

namespace kvshare {

// Builds a Gemma 4 model over an opened file. Throws kvshare::Error naming the
// missing or ill-shaped key or tensor, or the unsupported variant.
std::unique_ptr<Model> LoadGemma4(GgufFile file, PackOptions pack = {});

namespace detail {

// One Gemma 4 layer's weights as the CPU model loaded them.
struct Gemma4Layer {
  bool sliding = false;
  const float* attn_norm = nullptr;
  GemmaAttentionWeights attn;
  const float* ffn_norm = nullptr;
  const float* post_ffw_norm = nullptr;
  std::optional<WeightMatrix> gate, up, down;  // dense MLP (n_ff > 0)
  std::optional<Gemma4Moe> moe;
  PerLayerGateWeights ple_gate;  // per-layer embeddings (PLE width > 0)
  float out_scale = 1.0f;        // layer_output_scale
  bool has_out_scale = false;
};

// A loaded Gemma 4 model's layers and per-layer embeddings (its LM head and
// RoPE: DecoderModel's accessors), for a copy on another device
// (src/cuda_model/); null when `model` is not a LoadGemma4 model. Valid while
// the model lives.
struct Gemma4Weights {
  const std::vector<Gemma4Layer>* layers = nullptr;
  const PerLayerEmbeddings* ple = nullptr;  // width 0: none
};
std::optional<Gemma4Weights> Gemma4WeightsOf(const Model& model);

}  // namespace detail

}  // namespace kvshare
