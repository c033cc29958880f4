// Test helper: a tiny random gemma3n-architecture GGUF written by the test,
// with the family's knobs (AltUp streams, Laurel rank, activation sparsity
// per layer, per-layer embeddings, KV-shared trailing layers, sliding
// window). Key and tensor names and shapes are those llama.cpp's converter
// writes (tests/fixtures/gemma3n, docs/gemma3n.md). Numerics against HF
// transformers come from the converted fixtures; this file serves the
// structural tests and the bad-file tests (`edit`).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gguf_writer.h"
#include "model_tiny_gemma.h"
#include "model_tiny_gemma4.h"

namespace kvshare::testing {

struct TinyGemma3nSpec {
  std::vector<bool> sliding = {true, true, true, false, true, false};  // the last layer full
  int n_embd = 64;
  int n_head = 2;
  int n_head_kv = 1;
  int head_dim = 32;
  int n_ff = 96;
  int window = 5;
  int shared = 2;
  int altup = 4;
  int laurel_rank = 8;
  int ple = 8;
  int ple_vocab = 0;  // rows of per_layer_token_embd; 0: n_vocab
  std::vector<float> sparsity = {1.6448536f, 1.6448536f, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  float softcap = 30.0f;
  int n_vocab = 60;
  std::uint64_t seed = 11;
  std::function<void(GgufSpec&)> edit;  // applied before writing (error tests)
};

inline void WriteTinyGemma3n(const std::string& path, const TinyGemma3nSpec& m) {
  std::mt19937_64 rng(m.seed);
  const int L = static_cast<int>(m.sliding.size()), E = m.n_embd, n = m.altup;
  const std::string a = "gemma3n.";
  GgufSpec g;
  const auto u32 = [&](const std::string& k, int v) {
    g.kvs.push_back(GgufKv::U32(a + k, static_cast<std::uint32_t>(v)));
  };
  g.kvs.push_back(GgufKv::Str("general.architecture", "gemma3n"));
  u32("block_count", L);
  u32("context_length", 4096);
  u32("embedding_length", E);
  g.kvs.push_back(
      GgufKv::I32Array(a + "feed_forward_length", std::vector<std::int32_t>(static_cast<std::size_t>(L), m.n_ff)));
  u32("attention.head_count", m.n_head);
  u32("attention.head_count_kv", m.n_head_kv);
  u32("attention.key_length", m.head_dim);
  u32("attention.value_length", m.head_dim);
  g.kvs.push_back(GgufKv::F32(a + "rope.freq_base", 1e6f));
  g.kvs.push_back(GgufKv::F32(a + "rope.freq_base_swa", 1e4f));
  g.kvs.push_back(GgufKv::F32(a + "attention.layer_norm_rms_epsilon", 1e-6f));
  u32("attention.sliding_window", m.window);
  g.kvs.push_back(BoolArrayKv(a + "attention.sliding_window_pattern", m.sliding));
  u32("attention.shared_kv_layers", m.shared);
  u32("altup.active_idx", 0);
  u32("altup.num_inputs", n);
  u32("embedding_length_per_layer_input", m.ple);
  g.kvs.push_back(GgufKv::F32Array(a + "activation_sparsity_scale", m.sparsity));
  if (m.softcap > 0) g.kvs.push_back(GgufKv::F32(a + "final_logit_softcapping", m.softcap));

  auto f32 = [&](const std::string& name, std::vector<std::uint64_t> ne, const std::vector<float>& v) {
    std::vector<std::uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    g.tensors.push_back(GgufTensorSpec{name, std::move(ne), 0, std::move(bytes), std::nullopt});
  };
  auto random = [&](std::size_t count, float mean, float sd) {
    std::normal_distribution<float> d(mean, sd);
    std::vector<float> v(count);
    for (float& e : v) e = d(rng);
    return v;
  };
  auto matrix = [&](const std::string& name, int rows, int cols, float sd) {
    f32(name, {static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(rows)},
        random(static_cast<std::size_t>(rows) * cols, 0.f, sd));
  };
  auto norm = [&](const std::string& name, int count) {  // stored as is (around 1)
    f32(name, {static_cast<std::uint64_t>(count)}, random(static_cast<std::size_t>(count), 1.f, 0.3f));
  };
  const float in_s = 1.0f / std::sqrt(static_cast<float>(E));
  const auto ue = static_cast<std::uint64_t>(E);
  matrix("token_embd.weight", m.n_vocab, E, 0.5f);
  norm("output_norm.weight", E);
  for (const char* name : {"altup_proj.weight", "altup_unembd_proj.weight"}) {
    f32(name, {ue, ue, static_cast<std::uint64_t>(n - 1)},
        random(static_cast<std::size_t>(E * E * (n - 1)), 0.f, in_s));
  }
  matrix("per_layer_token_embd.weight", m.ple_vocab > 0 ? m.ple_vocab : m.n_vocab, m.ple * L, 0.5f);
  matrix("per_layer_model_proj.weight", m.ple * L, E, in_s);
  norm("per_layer_proj_norm.weight", m.ple);
  for (int i = 0; i < L; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const int qd = m.n_head * m.head_dim, kvd = m.n_head_kv * m.head_dim;
    norm(p + "attn_norm.weight", E);
    matrix(p + "attn_q.weight", qd, E, in_s);
    norm(p + "attn_q_norm.weight", m.head_dim);
    if (i < L - m.shared) {
      matrix(p + "attn_k.weight", kvd, E, in_s);
      norm(p + "attn_k_norm.weight", m.head_dim);
      matrix(p + "attn_v.weight", kvd, E, in_s);
    }
    matrix(p + "attn_output.weight", E, qd, 1.0f / std::sqrt(static_cast<float>(qd)));
    norm(p + "post_attention_norm.weight", E);
    norm(p + "ffn_norm.weight", E);
    matrix(p + "ffn_gate.weight", m.n_ff, E, in_s);
    matrix(p + "ffn_up.weight", m.n_ff, E, in_s);
    matrix(p + "ffn_down.weight", E, m.n_ff, 1.0f / std::sqrt(static_cast<float>(m.n_ff)));
    norm(p + "post_ffw_norm.weight", E);
    matrix(p + "laurel_l.weight", m.laurel_rank, E, in_s);
    matrix(p + "laurel_r.weight", E, m.laurel_rank, 1.0f / std::sqrt(static_cast<float>(m.laurel_rank)));
    norm(p + "laurel_post_norm.weight", E);
    matrix(p + "altup_router.weight", n, E, 1.0f);
    norm(p + "altup_router_norm.weight", E);
    matrix(p + "altup_predict_coef.weight", n * n, n, 0.3f);
    matrix(p + "altup_correct_coef.weight", n, n, 0.3f);
    norm(p + "altup_correct_scale.weight", E);
    matrix(p + "inp_gate.weight", m.ple, E, in_s);
    matrix(p + "proj.weight", E, m.ple, 1.0f / std::sqrt(static_cast<float>(m.ple)));
    norm(p + "post_norm.weight", E);
  }
  if (m.edit) m.edit(g);
  WriteFile(path, g.Build());
}

inline TempGguf TempGemma3n(const TinyGemma3nSpec& spec, const std::string& tag) {
  return TempGguf("gemma3n_" + tag, [&](const std::string& p) { WriteTinyGemma3n(p, spec); });
}

}  // namespace kvshare::testing
