// Test helper: a tiny random gemma4-architecture GGUF written by the test, with
// the knobs of the family (per-layer head sizes and KV heads, per-layer FFN
// widths, KV-shared trailing layers, per-layer embeddings, k_eq_v, MoE, layer
// scalars, proportional RoPE, final softcap). Key and tensor names and shapes
// follow docs/architecture.md §5 (what llama.cpp's converter writes).
// Numerics against HF transformers come from the converted fixtures in
// tests/fixtures/gemma4/; this file serves the structural tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gguf_writer.h"
#include "model_tiny_gemma.h"

namespace kvshare::testing {

struct TinyGemma4Spec {
  // true = sliding; the last layer must be full.
  std::vector<bool> sliding = {true, true, false, true, false, true, true, false};
  int n_embd = 64;
  int n_head = 4;
  int hd_swa = 16;   // key_length_swa
  int hd_full = 32;  // key_length
  int kv_swa = 2;    // KV heads of sliding layers
  int kv_full = 2;   // of full layers (!= kv_swa: an array key, as k_eq_v models write)
  int n_ff = 48;
  bool double_wide = true;  // shared layers get 2 * n_ff (an array key)
  int window = 5;
  int shared = 3;               // gemma4.attention.shared_kv_layers
  bool shared_have_kv = false;  // K/V tensors on shared layers too (Google's bf16 releases)
  int ple = 8;                  // embedding_length_per_layer_input (0: none)
  bool k_eq_v = false;          // no attn_v on full layers
  int experts = 0;              // > 0: every layer is MoE (+ dense MLP) with this many experts
  int experts_used = 2;
  int expert_ff = 16;
  bool layer_scale = true;
  int rope_pairs_full = 4;  // proportional RoPE: pairs that turn on full layers (rope_freqs)
  float softcap = 30.0f;
  int n_vocab = 60;
  std::uint64_t seed = 3;
  // Applied to the file description before it is written (error tests).
  std::function<void(GgufSpec&)> edit;
};

inline GgufKv BoolArrayKv(const std::string& k, const std::vector<bool>& v) {
  ByteWriter w;
  w.Put<std::uint32_t>(7);
  w.Put<std::uint64_t>(v.size());
  for (bool b : v) w.Put<std::uint8_t>(b ? 1 : 0);
  return {k, 9, w.bytes};
}

inline void WriteTinyGemma4(const std::string& path, const TinyGemma4Spec& m) {
  std::mt19937_64 rng(m.seed);
  const int L = static_cast<int>(m.sliding.size()), E = m.n_embd;
  const std::string a = "gemma4.";
  std::vector<std::int32_t> kv(L), ff(L);
  for (int i = 0; i < L; ++i) {
    kv[i] = m.sliding[i] ? m.kv_swa : m.kv_full;
    ff[i] = m.double_wide && i >= L - m.shared ? 2 * m.n_ff : m.n_ff;
  }
  GgufSpec g;
  g.kvs.push_back(GgufKv::Str("general.architecture", "gemma4"));
  g.kvs.push_back(GgufKv::U32(a + "block_count", static_cast<std::uint32_t>(L)));
  g.kvs.push_back(GgufKv::U32(a + "context_length", 4096));
  g.kvs.push_back(GgufKv::U32(a + "embedding_length", static_cast<std::uint32_t>(E)));
  g.kvs.push_back(m.double_wide ? GgufKv::I32Array(a + "feed_forward_length", ff)
                                : GgufKv::U32(a + "feed_forward_length", static_cast<std::uint32_t>(m.n_ff)));
  g.kvs.push_back(GgufKv::U32(a + "attention.head_count", static_cast<std::uint32_t>(m.n_head)));
  g.kvs.push_back(m.kv_swa != m.kv_full
                      ? GgufKv::I32Array(a + "attention.head_count_kv", kv)
                      : GgufKv::U32(a + "attention.head_count_kv", static_cast<std::uint32_t>(m.kv_swa)));
  for (const char* k : {"attention.key_length", "attention.value_length", "rope.dimension_count"}) {
    g.kvs.push_back(GgufKv::U32(a + k, static_cast<std::uint32_t>(m.hd_full)));
  }
  for (const char* k : {"attention.key_length_swa", "attention.value_length_swa", "rope.dimension_count_swa"}) {
    g.kvs.push_back(GgufKv::U32(a + k, static_cast<std::uint32_t>(m.hd_swa)));
  }
  g.kvs.push_back(GgufKv::F32(a + "rope.freq_base", 1e6f));
  g.kvs.push_back(GgufKv::F32(a + "rope.freq_base_swa", 1e4f));
  g.kvs.push_back(GgufKv::F32(a + "attention.layer_norm_rms_epsilon", 1e-6f));
  g.kvs.push_back(GgufKv::U32(a + "attention.sliding_window", static_cast<std::uint32_t>(m.window)));
  g.kvs.push_back(BoolArrayKv(a + "attention.sliding_window_pattern", m.sliding));
  g.kvs.push_back(GgufKv::U32(a + "attention.shared_kv_layers", static_cast<std::uint32_t>(m.shared)));
  g.kvs.push_back(GgufKv::U32(a + "embedding_length_per_layer_input", static_cast<std::uint32_t>(m.ple)));
  if (m.softcap > 0) g.kvs.push_back(GgufKv::F32(a + "final_logit_softcapping", m.softcap));
  if (m.experts > 0) {
    g.kvs.push_back(GgufKv::U32(a + "expert_count", static_cast<std::uint32_t>(m.experts)));
    g.kvs.push_back(GgufKv::U32(a + "expert_used_count", static_cast<std::uint32_t>(m.experts_used)));
    g.kvs.push_back(GgufKv::U32(a + "expert_feed_forward_length", static_cast<std::uint32_t>(m.expert_ff)));
  }

  auto f32 = [&](const std::string& name, std::vector<std::uint64_t> ne, const std::vector<float>& v) {
    std::vector<std::uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    g.tensors.push_back(GgufTensorSpec{name, std::move(ne), 0, std::move(bytes), std::nullopt});
  };
  auto random = [&](std::size_t n, float mean, float sd) {
    std::normal_distribution<float> d(mean, sd);
    std::vector<float> v(n);
    for (float& e : v) e = d(rng);
    return v;
  };
  auto matrix = [&](const std::string& name, int rows, int cols, float sd) {
    f32(name, {static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(rows)},
        random(static_cast<std::size_t>(rows) * cols, 0.f, sd));
  };
  auto norm = [&](const std::string& name, int n) {  // Gemma 4 norms are stored as is (around 1)
    f32(name, {static_cast<std::uint64_t>(n)}, random(static_cast<std::size_t>(n), 1.f, 0.3f));
  };
  const float in_s = 1.0f / std::sqrt(static_cast<float>(E));
  matrix("token_embd.weight", m.n_vocab, E, 0.5f);
  norm("output_norm.weight", E);
  std::vector<float> freqs(static_cast<std::size_t>(m.hd_full / 2), 1e30f);
  for (int i = 0; i < m.rope_pairs_full; ++i) freqs[static_cast<std::size_t>(i)] = 1.0f;
  f32("rope_freqs.weight", {static_cast<std::uint64_t>(m.hd_full / 2)}, freqs);
  if (m.ple > 0) {
    matrix("per_layer_token_embd.weight", m.n_vocab, m.ple * L, 0.5f);
    matrix("per_layer_model_proj.weight", m.ple * L, E, in_s);
    norm("per_layer_proj_norm.weight", m.ple);
  }
  for (int i = 0; i < L; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const int hd = m.sliding[i] ? m.hd_swa : m.hd_full, qd = m.n_head * hd, kvd = kv[i] * hd;
    const bool has_kv = i < L - m.shared || m.shared_have_kv;
    norm(p + "attn_norm.weight", E);
    matrix(p + "attn_q.weight", qd, E, in_s);
    norm(p + "attn_q_norm.weight", hd);
    if (has_kv) {
      matrix(p + "attn_k.weight", kvd, E, in_s);
      norm(p + "attn_k_norm.weight", hd);
      if (!(m.k_eq_v && !m.sliding[i])) matrix(p + "attn_v.weight", kvd, E, in_s);
    }
    matrix(p + "attn_output.weight", E, qd, 1.0f / std::sqrt(static_cast<float>(qd)));
    norm(p + "post_attention_norm.weight", E);
    norm(p + "ffn_norm.weight", E);
    matrix(p + "ffn_gate.weight", ff[i], E, in_s);
    matrix(p + "ffn_up.weight", ff[i], E, in_s);
    matrix(p + "ffn_down.weight", E, ff[i], 1.0f / std::sqrt(static_cast<float>(ff[i])));
    norm(p + "post_ffw_norm.weight", E);
    if (m.experts > 0) {
      const auto ne = static_cast<std::uint64_t>(m.experts), ef = static_cast<std::uint64_t>(m.expert_ff);
      matrix(p + "ffn_gate_inp.weight", m.experts, E, 1.0f);
      f32(p + "ffn_gate_inp.scale", {static_cast<std::uint64_t>(E)}, random(static_cast<std::size_t>(E), 1.f, 0.3f));
      f32(p + "ffn_gate_up_exps.weight", {static_cast<std::uint64_t>(E), 2 * ef, ne},
          random(static_cast<std::size_t>(E) * 2 * ef * ne, 0.f, in_s));
      f32(p + "ffn_down_exps.weight", {ef, static_cast<std::uint64_t>(E), ne},
          random(static_cast<std::size_t>(E) * ef * ne, 0.f, 1.0f / std::sqrt(static_cast<float>(ef))));
      f32(p + "ffn_down_exps.scale", {ne}, random(ne, 1.f, 0.3f));
      norm(p + "pre_ffw_norm_2.weight", E);
      norm(p + "post_ffw_norm_1.weight", E);
      norm(p + "post_ffw_norm_2.weight", E);
    }
    if (m.ple > 0) {
      matrix(p + "inp_gate.weight", m.ple, E, in_s);
      matrix(p + "proj.weight", E, m.ple, 1.0f / std::sqrt(static_cast<float>(m.ple)));
      norm(p + "post_norm.weight", E);
    }
    if (m.layer_scale) f32(p + "layer_output_scale.weight", {1}, random(1, 1.f, 0.3f));
  }
  if (m.edit) m.edit(g);
  WriteFile(path, g.Build());
}

inline TempGguf TempGemma4(const TinyGemma4Spec& spec, const std::string& tag) {
  return TempGguf("gemma4_" + tag, [&](const std::string& p) { WriteTinyGemma4(p, spec); });
}

}  // namespace kvshare::testing
