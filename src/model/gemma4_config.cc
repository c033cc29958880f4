#include "model/gemma4_config.h"

#include <algorithm>
#include <tuple>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "model/hyperparameters.h"

namespace kvshare::detail {

Gemma4Geometry ReadGemma4Geometry(const GgufFile& f, const std::string& a) {
  Gemma4Geometry g;
  ModelConfig& c = g.config;
  c.n_layer = static_cast<int>(f.GetU32(a + "block_count"));
  CheckLayerCount(f, c.n_layer, a);
  const std::size_t L = static_cast<std::size_t>(c.n_layer);
  c.n_embd = static_cast<int>(f.GetU32(a + "embedding_length"));
  c.n_head = static_cast<int>(f.GetU32(a + "attention.head_count"));
  c.context_length = static_cast<int>(f.GetU32Or(a + "context_length", 131072));
  c.rms_eps = f.GetF32(a + "attention.layer_norm_rms_epsilon");
  if (f.GetBoolOr(a + "attention.causal", true) == false) {
    throw Error(Str(a, "attention.causal is false (bidirectional attention): not supported for text generation"));
  }
  // Layer pattern: a bool per layer, true = sliding window.
  c.is_sliding = f.GetBoolArray(a + "attention.sliding_window_pattern");
  if (c.is_sliding.size() != L) {
    throw Error(Str("metadata key '", a, "attention.sliding_window_pattern' has ", c.is_sliding.size(),
                    " entries, expected block_count = ", L));
  }
  const bool any_sliding = std::find(c.is_sliding.begin(), c.is_sliding.end(), true) != c.is_sliding.end();
  c.sliding_window = any_sliding ? static_cast<int>(f.GetU32(a + "attention.sliding_window")) : 0;
  // Head sizes: key_length is the full (global) layers', key_length_swa the sliding layers'.
  const int hd_full = static_cast<int>(f.GetU32(a + "attention.key_length"));
  const int hd_swa = static_cast<int>(f.GetU32Or(a + "attention.key_length_swa", static_cast<std::uint32_t>(hd_full)));
  for (const auto& [k_key, v_key, want] :
       {std::tuple{"attention.key_length", "attention.value_length", hd_full},
        std::tuple{"attention.key_length_swa", "attention.value_length_swa", hd_swa}}) {
    CheckValueLength(f, a, k_key, v_key, want);
  }
  c.layer_n_head_kv = f.GetI32OrArray(a + "attention.head_count_kv", L);
  c.layer_n_ff = f.GetI32OrArray(a + "feed_forward_length", L);
  c.layer_head_dim.resize(L);
  for (std::size_t i = 0; i < L; ++i) {
    c.layer_head_dim[i] = c.is_sliding[i] ? hd_swa : hd_full;
    CheckKvHeadCount(a, Str("attention.head_count_kv[", i, "]"), c.layer_n_head_kv[i], c.n_head);
    if (c.layer_n_ff[i] < 0) throw Error(Str(a, "feed_forward_length[", i, "] = ", c.layer_n_ff[i], " is negative"));
  }
  c.head_dim = c.layer_head_dim[0];
  c.n_head_kv = c.layer_n_head_kv[0];
  c.n_ff = c.layer_n_ff[0];
  c.rope_base_full = f.GetF32Or(a + "rope.freq_base", 1e6f);
  c.rope_base_sliding = f.GetF32Or(a + "rope.freq_base_swa", 1e4f);
  CheckScalarHyperparameters(c, a);
  c.attn_scale = 1.0f;  // Gemma 4: q_norm / k_norm instead of a query scale (not stored in GGUF)
  c.num_kv_shared_layers = static_cast<int>(f.GetU32Or(a + "attention.shared_kv_layers", 0));

  // RoPE: NeoX over rope.dimension_count(_swa) dims; full layers turn by rope_freqs
  // (proportional RoPE: a factor >= 1e29 marks a pair that does not turn).
  const int rot_full = static_cast<int>(f.GetU32Or(a + "rope.dimension_count", static_cast<std::uint32_t>(hd_full)));
  const int rot_swa = static_cast<int>(f.GetU32Or(a + "rope.dimension_count_swa", static_cast<std::uint32_t>(hd_swa)));
  for (const auto& [key, rot, hd] : {std::tuple{"rope.dimension_count", rot_full, hd_full},
                                     std::tuple{"rope.dimension_count_swa", rot_swa, hd_swa}}) {
    if (rot < 16 || rot > hd || rot % 16 != 0) {
      throw Error(Str(a, key, " = ", rot, " is not supported: the rotated dims must be a multiple of 16 in [16, ", hd,
                      "] (the head size)"));
    }
  }
  detail::RopeFamily full{.base = c.rope_base_full, .rotary_dim = rot_full};
  if (const GgufTensor* rf = f.FindTensor("rope_freqs.weight")) {
    if (rf->type != GgmlType::kF32 || rf->NumElements() < rot_full / 2) {
      throw Error(Str("tensor 'rope_freqs.weight' must be F32 with at least rope.dimension_count / 2 = ", rot_full / 2,
                      " elements, got ", GgmlTypeName(rf->type), " ", rf->DimsString()));
    }
    const float* p = reinterpret_cast<const float*>(rf->data);
    full.factors.assign(p, p + rot_full / 2);
  }
  g.rope_families = {full, {.base = c.rope_base_sliding, .rotary_dim = rot_swa}};
  for (std::size_t i = 0; i < L; ++i) g.layer_rope.push_back(c.is_sliding[i] ? 1 : 0);
  return g;
}

}  // namespace kvshare::detail
