// Gemma 4 on tiny random GGUF files written by the test (model_tiny_gemma4.h):
// configuration and layer plan from metadata (per-layer head sizes, KV heads
// and FFN widths; HF's sharing rule, and a warning where llama.cpp's differs),
// cached decode equal to a full recomputation, the KV-shared prefill short-cut
// exact, thread-count independence, and bad files refused with an error that
// names the key or tensor. Logits against HF transformers and llama.cpp:
// tests/python/test_gemma4_fixtures.py on the converted fixtures.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common_test_util.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/model.h"
#include "model_test_util.h"
#include "model_tiny_gemma4.h"

namespace kvshare {
namespace {

using testing::Drop;
using testing::ErrorOf;
using testing::Logits;
using testing::MaxRelDiff;
using testing::Replace;
using testing::TempGemma4;
using testing::TinyGemma4Spec;

// fp32 weights and cache: a decode step and a recomputation differ only in the
// kernels' summation order over ~100-term dot products through 8 layers.
constexpr double kFp32Tol = 1e-5;

using testing::Tokens;

TEST(Gemma4, ConfigAndPlanFromMetadata) {
  TinyGemma4Spec spec;
  spec.kv_full = 1;  // per-layer KV heads: an array key
  auto file = TempGemma4(spec, "meta");
  auto m = Model::Load(file.path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "gemma4");
  EXPECT_EQ(c.n_layer, 8);
  EXPECT_EQ(c.layer_head_dim, (std::vector<int>{16, 16, 32, 16, 32, 16, 16, 32}));
  EXPECT_EQ(c.layer_n_head_kv, (std::vector<int>{2, 2, 1, 2, 1, 2, 2, 1}));
  EXPECT_EQ(c.layer_n_ff, (std::vector<int>{48, 48, 48, 48, 48, 96, 96, 96}));  // double-wide shared layers
  EXPECT_EQ(c.attn_scale, 1.0f);
  EXPECT_EQ(c.num_kv_shared_layers, 3);
  EXPECT_TRUE(m->warnings().empty()) << m->warnings()[0];  // llama.cpp's rule agrees on this pattern
  auto st = m->NewState({.max_context = 64});
  const LayerPlan& plan = st->kv_cache().Plan();
  EXPECT_EQ(plan.num_slots, 5);
  EXPECT_EQ(plan.layers[5].source_layer, 3);  // sliding -> last owning sliding
  EXPECT_EQ(plan.layers[6].source_layer, 3);
  EXPECT_EQ(plan.layers[7].source_layer, 4);  // full -> last owning full
  // Shared layers own no buffer; the report says what sharing saves.
  const KvMemoryReport mem = st->kv_cache().Memory();
  std::size_t shared_bytes = 0;
  for (int l = 5; l < 8; ++l) {
    EXPECT_EQ(mem.layers[static_cast<std::size_t>(l)].bytes, 0u);
    shared_bytes += mem.layers[static_cast<std::size_t>(l)].bytes_if_owned;
  }
  EXPECT_GT(shared_bytes, 0u);
  EXPECT_EQ(mem.saved_by_sharing, shared_bytes);
  // Per-layer geometry in the cache: full layers hold 1 x 32, sliding 2 x 16 per position.
  EXPECT_EQ(st->kv_cache().Spec().layers[4].head_size, 32);
  EXPECT_EQ(st->kv_cache().Spec().layers[4].kv_heads, 1);
  EXPECT_EQ(st->kv_cache().Spec().layers[3].head_size, 16);
}

TEST(Gemma4, WarnsWhereLlamaCppWouldShareFromOtherLayers) {
  TinyGemma4Spec spec;
  spec.sliding = {true, true, false, true, true, false};
  spec.shared = 2;  // HF: 4 -> 3, 5 -> 2; llama.cpp's n_kv - 2 / n_kv - 1: 4 -> 2, 5 -> 3
  auto file = TempGemma4(spec, "warn");
  auto m = Model::Load(file.path);
  ASSERT_EQ(m->warnings().size(), 1u);
  EXPECT_NE(m->warnings()[0].find("layer 4 reads 3 (llama.cpp: 2), layer 5 reads 2 (llama.cpp: 3)"), std::string::npos)
      << m->warnings()[0];
  auto st = m->NewState({.max_context = 16});
  EXPECT_EQ(st->kv_cache().Plan().layers[4].source_layer, 3);
  EXPECT_EQ(st->kv_cache().Plan().layers[5].source_layer, 2);
}

// Prefill in chunks, then decode token by token past several window wraps; every
// step's logits equal a fresh all-positions run of the same tokens.
void ExpectCachedDecodeEqualsRecompute(const TinyGemma4Spec& spec, const std::string& tag) {
  auto file = TempGemma4(spec, tag);
  auto m = Model::Load(file.path);
  const int V = m->config().n_vocab, P = 9, steps = 14;
  std::vector<std::int32_t> seq = Tokens(P, V, 11);
  auto st = m->NewState({.max_context = 64, .max_step = 4});
  std::vector<std::vector<float>> cached{Logits(*m, *st, seq, 1)};
  for (int i = 0; i < steps; ++i) {
    const auto& last = cached.back();
    seq.push_back(static_cast<std::int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
    cached.push_back(Logits(*m, *st, {seq.back()}, 1));
  }
  auto full = m->NewState({.max_context = 64, .max_step = 64});
  const std::vector<float> all = Logits(*m, *full, seq, static_cast<std::int64_t>(seq.size()));
  for (int i = 0; i <= steps; ++i) {
    const std::size_t row = static_cast<std::size_t>(P - 1 + i);
    const std::vector<float> want(all.begin() + static_cast<std::ptrdiff_t>(row * V),
                                  all.begin() + static_cast<std::ptrdiff_t>((row + 1) * V));
    EXPECT_LT(MaxRelDiff(cached[static_cast<std::size_t>(i)], want), kFp32Tol) << tag << " step " << i;
  }
}

TEST(Gemma4, CachedDecodeEqualsRecomputeE2BLike) { ExpectCachedDecodeEqualsRecompute(TinyGemma4Spec{}, "e2b"); }

TEST(Gemma4, CachedDecodeEqualsRecomputeKEqVMoE) {
  TinyGemma4Spec spec;
  spec.shared = 0;
  spec.ple = 0;
  spec.double_wide = false;
  spec.k_eq_v = true;
  spec.kv_full = 1;
  spec.experts = 4;
  spec.experts_used = 2;
  ExpectCachedDecodeEqualsRecompute(spec, "moe");
}

// The KV-shared layers run only for the rows whose logits are asked for: the
// last row's logits and the cache left behind are the same as when every row runs.
TEST(Gemma4, PrefillShortCutIsExact) {
  auto file = TempGemma4(TinyGemma4Spec{}, "cut");
  auto m = Model::Load(file.path);
  const int V = m->config().n_vocab;
  const auto prompt = Tokens(11, V, 5);
  for (int max_step : {64, 4}) {
    auto a = m->NewState({.max_context = 32, .max_step = max_step});
    auto b = m->NewState({.max_context = 32, .max_step = max_step});
    auto c = m->NewState({.max_context = 32, .max_step = max_step});
    const std::vector<float> last = Logits(*m, *a, prompt, 1);
    const std::vector<float> every = Logits(*m, *b, prompt, static_cast<std::int64_t>(prompt.size()));
    const std::vector<float> two = Logits(*m, *c, prompt, 2);
    auto d = m->NewState({.max_context = 32, .max_step = max_step, .prefill_shortcut = false});
    EXPECT_EQ(last, Logits(*m, *d, prompt, 1)) << "max_step " << max_step;
    EXPECT_EQ(last, std::vector<float>(every.end() - V, every.end())) << "max_step " << max_step;
    EXPECT_EQ(two, std::vector<float>(every.end() - 2 * V, every.end())) << "max_step " << max_step;
    // The caches left behind agree: so do the next step's logits.
    const std::vector<float> next_a = Logits(*m, *a, {3}, 1);
    EXPECT_EQ(next_a, Logits(*m, *b, {3}, 1));
    EXPECT_EQ(next_a, Logits(*m, *c, {3}, 1));
  }
}

TEST(Gemma4, ResultsDoNotDependOnThreadCount) {
  auto file = TempGemma4(TinyGemma4Spec{}, "threads");
  auto m = Model::Load(file.path);
  const auto t = Tokens(13, m->config().n_vocab, 2);
  ThreadPool pool(2);
  auto a = m->NewState({.max_context = 32});
  auto b = m->NewState({.max_context = 32});
  EXPECT_EQ(Logits(*m, *a, t, 13), Logits(*m, *b, t, 13, &pool));
  EXPECT_EQ(Logits(*m, *a, {7}, 1), Logits(*m, *b, {7}, 1, &pool));
}

TEST(Gemma4, LessSharingThanTheFileNeedsItsKTensors) {
  auto file = TempGemma4(TinyGemma4Spec{}, "override");
  auto m = Model::Load(file.path);
  const std::string e = ErrorOf([&] { m->NewState({.max_context = 16, .num_kv_shared_layers = 1}); });
  EXPECT_NE(e.find("layer 5 compute its own K/V, but the file has no blk.5.attn_k.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("use at least 3 shared layers"), std::string::npos) << e;
  // With K/V tensors on the shared layers too, any valid amount of sharing runs.
  TinyGemma4Spec with_kv;
  with_kv.shared_have_kv = true;
  with_kv.double_wide = false;
  auto file2 = TempGemma4(with_kv, "override2");
  auto m2 = Model::Load(file2.path);
  auto st = m2->NewState({.max_context = 16, .num_kv_shared_layers = 0});
  EXPECT_EQ(st->kv_cache().Plan().num_slots, 8);
  EXPECT_NO_THROW(m2->Forward(*st, Tokens(6, m2->config().n_vocab, 1), nullptr));
}

// Several sequences in one state: ragged prompts prefilled together (in lock-step
// chunks), then steps mixing decode rows with a row that prefills, entries in any
// order, on 2 threads. Every row's logits equal, bitwise, the same tokens run
// alone in a one-row state on the calling thread (matmuls and attention compute
// each row on its own).
TEST(Gemma4, BatchOfRaggedRowsEqualsRowsAlone) {
  auto file = TempGemma4(TinyGemma4Spec{}, "batch");
  auto m = Model::Load(file.path);
  const int V = m->config().n_vocab;
  const std::vector<std::vector<std::int32_t>> prompts = {Tokens(7, V, 1), Tokens(12, V, 2), Tokens(3, V, 3)};
  const ModelStateOptions opt{.max_context = 48, .max_step = 4, .max_batch = 3};
  auto batch = m->NewState(opt);
  std::vector<std::unique_ptr<ModelState>> alone;
  for (int r = 0; r < 3; ++r) alone.push_back(m->NewState({.max_context = 48, .max_step = 4}));
  // Prefill of all three (row 2 first), every prompt position's logits.
  std::vector<BatchEntry> entries;
  for (int r : {2, 0, 1}) {
    entries.push_back({.row = r,
                       .tokens = prompts[static_cast<std::size_t>(r)],
                       .num_logits = static_cast<std::int64_t>(prompts[static_cast<std::size_t>(r)].size())});
  }
  ThreadPool pool(2);
  std::span<const float> got = m->ForwardBatch(*batch, entries, &pool);
  std::size_t at = 0;
  for (const BatchEntry& e : entries) {
    const std::vector<float> want =
        Logits(*m, *alone[static_cast<std::size_t>(e.row)], prompts[static_cast<std::size_t>(e.row)], e.num_logits);
    const std::vector<float> part(got.begin() + static_cast<std::ptrdiff_t>(at),
                                  got.begin() + static_cast<std::ptrdiff_t>(at + want.size()));
    EXPECT_EQ(part, want) << "prefill row " << e.row;
    at += want.size();
  }
  EXPECT_EQ(at, got.size());
  // Decode steps: rows 0 and 1 decode while row 2 takes a 5-token chunk, then all decode.
  for (int step = 0; step < 6; ++step) {
    std::vector<std::vector<std::int32_t>> toks = {{static_cast<std::int32_t>((step * 7 + 1) % V)},
                                                   {static_cast<std::int32_t>((step * 5 + 2) % V)},
                                                   step == 1 ? Tokens(5, V, 9) : std::vector<std::int32_t>{4}};
    entries.clear();
    for (int r : {1, 2, 0}) entries.push_back({.row = r, .tokens = toks[static_cast<std::size_t>(r)], .num_logits = 1});
    got = m->ForwardBatch(*batch, entries, &pool);
    ASSERT_EQ(got.size(), 3u * static_cast<std::size_t>(V));
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const int r = entries[i].row;
      const std::vector<float> want =
          Logits(*m, *alone[static_cast<std::size_t>(r)], toks[static_cast<std::size_t>(r)], 1);
      const std::vector<float> part(got.begin() + static_cast<std::ptrdiff_t>(i * V),
                                    got.begin() + static_cast<std::ptrdiff_t>((i + 1) * V));
      EXPECT_EQ(part, want) << "step " << step << " row " << r;
    }
  }
  for (int r = 0; r < 3; ++r) EXPECT_EQ(batch->length(r), alone[static_cast<std::size_t>(r)]->length());
}

TEST(Gemma4, BatchErrorsChangeNoRow) {
  auto file = TempGemma4(TinyGemma4Spec{}, "batcherr");
  auto m = Model::Load(file.path);
  auto st = m->NewState({.max_context = 8, .max_batch = 2});
  const std::vector<std::int32_t> a = {1, 2, 3}, big = Tokens(7, m->config().n_vocab, 4);
  m->ForwardBatch(*st, std::vector<BatchEntry>{{.row = 0, .tokens = a}, {.row = 1, .tokens = a}}, nullptr);
  const std::vector<std::pair<std::vector<BatchEntry>, std::string>> bad = {
      {{{.row = 0, .tokens = a}, {.row = 0, .tokens = a}}, "row 0 appears twice"},
      {{{.row = 2, .tokens = a}}, "row 2 is out of range [0, max_batch = 2)"},
      {{{.row = 0, .tokens = a}, {.row = 1, .tokens = big}}, "3 cached + 7 new tokens exceed max_context 8 in row 1"},
      {{{.row = 1, .tokens = a, .num_logits = 4}}, "num_logits 4 is out of range [1, 3]"},
      {{}, "no entries"},
  };
  for (const auto& [entries, want] : bad) {
    const std::string e = ErrorOf([&] { m->ForwardBatch(*st, entries, nullptr); });
    EXPECT_NE(e.find(want), std::string::npos) << e;
    EXPECT_EQ(st->length(0), 3);
    EXPECT_EQ(st->length(1), 3);
  }
  // Rewind a row and continue: equals a fresh run of the same tokens.
  st->Rewind(1, 1);
  EXPECT_EQ(st->length(1), 1);
  const std::vector<std::int32_t> tail = {5, 6};
  std::span<const float> l = m->ForwardBatch(*st, std::vector<BatchEntry>{{.row = 1, .tokens = tail}}, nullptr);
  const std::vector<float> after(l.begin(), l.end());
  auto fresh = m->NewState({.max_context = 8});
  EXPECT_LT(MaxRelDiff(after, Logits(*m, *fresh, {1, 5, 6}, 1)), kFp32Tol);
  EXPECT_EQ(st->length(0), 3);
}

TEST(Gemma4, BadFilesAreRefusedNamingTheKeyOrTensor) {
  struct Case {
    std::string tag;
    std::function<void(TinyGemma4Spec&)> set;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"missing_k", [](TinyGemma4Spec& s) { s.edit = Drop("blk.1.attn_k.weight"); }, "blk.1.attn_k.weight"},
      {"missing_ple", [](TinyGemma4Spec& s) { s.edit = Drop("blk.2.inp_gate.weight"); }, "blk.2.inp_gate.weight"},
      {"kv_array_length",
       [](TinyGemma4Spec& s) {
         s.kv_full = 1;
         s.edit = Replace(testing::GgufKv::I32Array("gemma4.attention.head_count_kv", {2, 2, 1}));
       },
       "'gemma4.attention.head_count_kv' is an array of 3 values, expected 8"},
      {"pattern_length",
       [](TinyGemma4Spec& s) {
         s.edit = Replace(testing::BoolArrayKv("gemma4.attention.sliding_window_pattern", {true, false}));
       },
       "sliding_window_pattern' has 2 entries, expected block_count = 8"},
      {"pattern_scalar",
       [](TinyGemma4Spec& s) { s.edit = Replace(testing::GgufKv::U32("gemma4.attention.sliding_window_pattern", 5)); },
       "'gemma4.attention.sliding_window_pattern' has type uint32, expected array of bool"},
      {"no_source",
       [](TinyGemma4Spec& s) {
         s.shared = 3;
         s.edit = Replace(testing::GgufKv::U32("gemma4.attention.shared_kv_layers", 6));
       },
       "gemma4.attention.shared_kv_layers = 6 is not a valid layer plan"},
      {"bidirectional",
       [](TinyGemma4Spec& s) {
         s.edit = [](testing::GgufSpec& g) {
           g.kvs.push_back(testing::GgufKv::Bool("gemma4.attention.causal", false));
         };
       },
       "gemma4.attention.causal is false"},
      {"fused_qkv",
       [](TinyGemma4Spec& s) {
         s.edit = [](testing::GgufSpec& g) {
           g.tensors.push_back(
               {"blk.0.attn_qkv.weight", {64, 8}, 0, std::vector<std::uint8_t>(64 * 8 * 4), std::nullopt});
         };
       },
       "blk.0.attn_qkv.weight': fused QKV"},
      {"bad_shape",
       [](TinyGemma4Spec& s) {
         s.edit = [](testing::GgufSpec& g) {
           Replace(testing::GgufKv::U32("gemma4.attention.key_length", 48))(g);
           Replace(testing::GgufKv::U32("gemma4.attention.value_length", 48))(g);
         };
       },
       "attn_q.weight' is [64, 128] (ne0, ne1), expected [64, 192]"},
      {"moe_no_count",
       [](TinyGemma4Spec& s) {
         s.experts = 4;
         s.edit = [](testing::GgufSpec& g) {
           std::erase_if(g.kvs, [](const testing::GgufKv& kv) { return kv.key == "gemma4.expert_count"; });
         };
       },
       "'gemma4.expert_count' is missing"},
      // A uint32 past INT_MAX reads back negative: refused before anything is sized by it.
      {"rope_dims_huge",
       [](TinyGemma4Spec& s) { s.edit = Replace(testing::GgufKv::U32("gemma4.rope.dimension_count", 0x80000000u)); },
       "gemma4.rope.dimension_count = -2147483648 is not supported"},
      {"block_count_huge",
       [](TinyGemma4Spec& s) { s.edit = Replace(testing::GgufKv::U32("gemma4.block_count", 0xFFFFFFFFu)); },
       "gemma4.block_count must be >= 1, got -1"},
      {"block_count_short", [](TinyGemma4Spec& s) { s.edit = Replace(testing::GgufKv::U32("gemma4.block_count", 6)); },
       "gemma4.block_count = 6, but the file's layer tensors end at layer 7"},
      {"rope_base_nan",
       [](TinyGemma4Spec& s) {
         s.edit = Replace(testing::GgufKv::F32("gemma4.rope.freq_base", std::numeric_limits<float>::quiet_NaN()));
       },
       "gemma4.rope.freq_base must be finite and > 0, got nan"},
      {"softcap_negative",
       [](TinyGemma4Spec& s) { s.edit = Replace(testing::GgufKv::F32("gemma4.final_logit_softcapping", -30.0f)); },
       "gemma4.final_logit_softcapping must be finite and >= 0 (0: off), got -30"},
      // The per-layer tables present, their width 0: they would go unused.
      {"ple_width_zero",
       [](TinyGemma4Spec& s) { s.edit = Replace(testing::GgufKv::U32("gemma4.embedding_length_per_layer_input", 0)); },
       "'per_layer_token_embd.weight' is present but embedding_length_per_layer_input is 0"},
      {"ple_width_negative",
       [](TinyGemma4Spec& s) {
         s.edit = Replace(testing::GgufKv::U32("gemma4.embedding_length_per_layer_input", 0xFFFFFFFFu));
       },
       "embedding_length_per_layer_input must be >= 0, got -1"},
  };
  for (const Case& c : cases) {
    TinyGemma4Spec spec;
    c.set(spec);
    auto file = TempGemma4(spec, c.tag);
    const std::string e = ErrorOf([&] { Model::Load(file.path); });
    EXPECT_NE(e.find(c.want), std::string::npos) << c.tag << ": " << e;
  }
}

}  // namespace
}  // namespace kvshare
