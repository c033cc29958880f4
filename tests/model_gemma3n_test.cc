// Gemma 3n on tiny random GGUF files written by the test
// (model_tiny_gemma3n.h): configuration and KV-sharing plan from metadata,
// cached decode equal to a full recomputation (window rings wrapping, shared
// layers), the KV-shared prefill short-cut exact, thread-count independence,
// rows of a batch bitwise equal to each alone, a per-layer embedding table
// shorter than the vocabulary, and bad files refused with an error naming the
// key or tensor. Logits against HF transformers and llama.cpp:
// tests/python/test_gemma3n_fixtures.py on the converted fixtures.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common_test_util.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/model.h"
#include "model_test_util.h"
#include "model_tiny_gemma3n.h"

namespace kvshare {
namespace {

using testing::Drop;
using testing::ErrorOf;
using testing::Logits;
using testing::MaxRelDiff;
using testing::Replace;
using testing::TempGemma3n;
using testing::TinyGemma3nSpec;
using testing::Tokens;

// fp32 weights and cache: a decode step and a recomputation differ only in the
// kernels' summation order, amplified by the random AltUp coefficients.
constexpr double kFp32Tol = 1e-5;

TEST(Gemma3n, ConfigAndPlanFromMetadata) {
  auto file = TempGemma3n(TinyGemma3nSpec{}, "config");
  auto m = Model::Load(file.path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.architecture, "gemma3n");
  EXPECT_EQ(c.n_layer, 6);
  EXPECT_EQ(c.num_kv_shared_layers, 2);
  EXPECT_EQ(c.sliding_window, 5);
  EXPECT_EQ(c.head_dim, 32);
  auto st = m->NewState({.max_context = 16});
  // S S S F S F with 2 shared: layer 4 (sliding) reads 2, layer 5 (full) reads 3.
  EXPECT_EQ(st->kv_cache().Plan().layers[4].source_layer, 2);
  EXPECT_EQ(st->kv_cache().Plan().layers[5].source_layer, 3);
  EXPECT_EQ(st->kv_cache().Plan().num_slots, 4);
}

TEST(Gemma3n, CachedDecodeEqualsRecompute) {
  for (const int ple_vocab : {0, 40}) {
    TinyGemma3nSpec spec;
    spec.ple_vocab = ple_vocab;  // 40 < n_vocab: later ids take row 0 of the PLE table
    auto file = TempGemma3n(spec, "cached" + std::to_string(ple_vocab));
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
      EXPECT_LT(MaxRelDiff(cached[static_cast<std::size_t>(i)], want), kFp32Tol)
          << "ple_vocab " << ple_vocab << " step " << i;
    }
  }
}

// The KV-shared layers run only for the rows whose logits are asked for.
TEST(Gemma3n, PrefillShortCutIsExact) {
  auto file = TempGemma3n(TinyGemma3nSpec{}, "cut");
  auto m = Model::Load(file.path);
  const int V = m->config().n_vocab;
  const auto prompt = Tokens(11, V, 5);
  for (int max_step : {64, 4}) {
    auto a = m->NewState({.max_context = 32, .max_step = max_step});
    auto b = m->NewState({.max_context = 32, .max_step = max_step});
    auto d = m->NewState({.max_context = 32, .max_step = max_step, .prefill_shortcut = false});
    const std::vector<float> last = Logits(*m, *a, prompt, 1);
    const std::vector<float> every = Logits(*m, *b, prompt, static_cast<std::int64_t>(prompt.size()));
    EXPECT_EQ(last, Logits(*m, *d, prompt, 1)) << "max_step " << max_step;
    EXPECT_EQ(last, std::vector<float>(every.end() - V, every.end())) << "max_step " << max_step;
    EXPECT_EQ(Logits(*m, *a, {3}, 1), Logits(*m, *b, {3}, 1));
  }
}

TEST(Gemma3n, ResultsDoNotDependOnThreadCount) {
  auto file = TempGemma3n(TinyGemma3nSpec{}, "threads");
  auto m = Model::Load(file.path);
  const auto t = Tokens(13, m->config().n_vocab, 2);
  ThreadPool pool(2);
  auto a = m->NewState({.max_context = 32});
  auto b = m->NewState({.max_context = 32});
  EXPECT_EQ(Logits(*m, *a, t, 13), Logits(*m, *b, t, 13, &pool));
  EXPECT_EQ(Logits(*m, *a, {7}, 1), Logits(*m, *b, {7}, 1, &pool));
}

// Rows of one step (ragged prefill, then decode rows beside a prompt chunk)
// equal, bitwise, each run alone.
TEST(Gemma3n, BatchOfRaggedRowsEqualsRowsAlone) {
  auto file = TempGemma3n(TinyGemma3nSpec{}, "batch");
  auto m = Model::Load(file.path);
  const int V = m->config().n_vocab;
  const std::vector<std::vector<std::int32_t>> prompts = {Tokens(7, V, 1), Tokens(12, V, 2), Tokens(3, V, 3)};
  auto batch = m->NewState({.max_context = 48, .max_step = 4, .max_batch = 3});
  std::vector<std::unique_ptr<ModelState>> alone;
  for (int r = 0; r < 3; ++r) alone.push_back(m->NewState({.max_context = 48, .max_step = 4}));
  ThreadPool pool(2);
  std::vector<BatchEntry> entries;
  for (int r : {2, 0, 1})
    entries.push_back({.row = r, .tokens = prompts[static_cast<std::size_t>(r)], .num_logits = 2});
  std::span<const float> got = m->ForwardBatch(*batch, entries, &pool);
  std::size_t at = 0;
  for (const BatchEntry& e : entries) {
    const std::vector<float> want =
        Logits(*m, *alone[static_cast<std::size_t>(e.row)], prompts[static_cast<std::size_t>(e.row)], 2);
    EXPECT_EQ(std::vector<float>(got.begin() + static_cast<std::ptrdiff_t>(at),
                                 got.begin() + static_cast<std::ptrdiff_t>(at + want.size())),
              want)
        << "prefill row " << e.row;
    at += want.size();
  }
  for (int step = 0; step < 5; ++step) {
    const std::vector<std::vector<std::int32_t>> toks = {{static_cast<std::int32_t>((step * 7 + 1) % V)},
                                                         step == 1 ? Tokens(5, V, 9) : std::vector<std::int32_t>{4},
                                                         {static_cast<std::int32_t>((step * 5 + 2) % V)}};
    entries.clear();
    for (int r : {1, 2, 0}) entries.push_back({.row = r, .tokens = toks[static_cast<std::size_t>(r)]});
    got = m->ForwardBatch(*batch, entries, &pool);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const int r = entries[i].row;
      EXPECT_EQ(std::vector<float>(got.begin() + static_cast<std::ptrdiff_t>(i * V),
                                   got.begin() + static_cast<std::ptrdiff_t>((i + 1) * V)),
                Logits(*m, *alone[static_cast<std::size_t>(r)], toks[static_cast<std::size_t>(r)], 1))
          << "step " << step << " row " << r;
    }
  }
}

TEST(Gemma3n, BadFilesAreRefusedNamingTheKeyOrTensor) {
  struct Case {
    std::string tag;
    std::function<void(TinyGemma3nSpec&)> set;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"missing_laurel", [](TinyGemma3nSpec& s) { s.edit = Drop("blk.1.laurel_r.weight"); }, "blk.1.laurel_r.weight"},
      {"missing_router", [](TinyGemma3nSpec& s) { s.edit = Drop("blk.3.altup_router.weight"); },
       "blk.3.altup_router.weight"},
      {"missing_altup_key",
       [](TinyGemma3nSpec& s) {
         s.edit = [](testing::GgufSpec& g) {
           std::erase_if(g.kvs, [](const testing::GgufKv& k) { return k.key == "gemma3n.altup.num_inputs"; });
         };
       },
       "gemma3n.altup.num_inputs"},
      {"altup_count", [](TinyGemma3nSpec& s) { s.edit = Replace(testing::GgufKv::U32("gemma3n.altup.num_inputs", 3)); },
       "tensor 'altup_proj.weight' is [64, 64, 3]: gemma3n.altup.num_inputs = 3 needs 2 projections"},
      {"active_idx", [](TinyGemma3nSpec& s) { s.edit = Replace(testing::GgufKv::U32("gemma3n.altup.active_idx", 4)); },
       "gemma3n.altup.active_idx = 4 is outside [0, altup.num_inputs = 4)"},
      {"sparsity_length",
       [](TinyGemma3nSpec& s) {
         s.sparsity = {1.6448536f, -INFINITY};
       },
       "'gemma3n.activation_sparsity_scale' has 2 entries, expected block_count = 6"},
      {"sparsity_nan",
       [](TinyGemma3nSpec& s) { s.sparsity = {1.6448536f, NAN, -INFINITY, -INFINITY, -INFINITY, -INFINITY}; },
       "gemma3n.activation_sparsity_scale[1] = nan is not a std multiplier"},
      {"softcap_nan",
       [](TinyGemma3nSpec& s) { s.edit = Replace(testing::GgufKv::F32("gemma3n.final_logit_softcapping", NAN)); },
       "gemma3n.final_logit_softcapping must be finite and >= 0 (0: off), got nan"},
      {"ple_table", [](TinyGemma3nSpec& s) { s.ple_vocab = 70; }, "tensor 'per_layer_token_embd.weight' is"},
      {"missing_k", [](TinyGemma3nSpec& s) { s.edit = Drop("blk.2.attn_k.weight"); }, "blk.2.attn_k.weight"},
  };
  for (const Case& c : cases) {
    TinyGemma3nSpec spec;
    c.set(spec);
    auto file = TempGemma3n(spec, "bad_" + c.tag);
    const std::string e = ErrorOf([&] { Model::Load(file.path); });
    EXPECT_NE(e.find(c.want), std::string::npos) << c.tag << ": " << e;
  }
}

}  // namespace
}  // namespace kvshare
