// Speculative decoding (kvshare/runtime/speculative.h): Sampler::Verify's acceptance
// rule keeps the target's distribution; the n-gram drafter's matches; and the
// generator's greedy output with every drafter is bitwise the output without
// speculation — the tokens and the logits each token was chosen from — on tiny
// Gemma 3 / Gemma 4 models (window rings with the least slack, KV-shared
// layers, f16 and q8_0 caches, MoE, k_eq_v) and on the default model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common_source_path.h"
#include "common_test_util.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/runtime/sampler.h"
#include "kvshare/runtime/speculative.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_default_path.h"
#include "model_tiny_gemma.h"
#include "model_tiny_gemma4.h"
#include "runtime_spec_util.h"
#include "tokenizer_tiny_vocab.h"

namespace kvshare {
namespace {

using testing::ExpectBitwiseEqual;
using testing::Generate;
using testing::GenRun;
using testing::TempGguf;
using testing::TinyGemma4Spec;
using testing::TinyGemmaSpec;

// ---- Sampler::Verify ----

TEST(SamplerVerify, GreedyAcceptsExactlyTheArgmax) {
  Sampler s({});
  const std::vector<float> logits = {0.5f, 3.0f, 3.0f, -1.0f};  // argmax 1 (lowest id on the tie)
  EXPECT_TRUE(s.Verify(logits, {}, 1).accepted);
  for (int32_t d : {0, 2, 3}) {
    const DraftVerdict v = s.Verify(logits, {}, d);
    EXPECT_FALSE(v.accepted) << d;
    EXPECT_EQ(v.token, 1) << d;
  }
  // The repetition penalty applies as in Sample: it moves the argmax.
  Sampler p({.repetition_penalty = 10.0f});
  const std::vector<int32_t> history = {1};
  EXPECT_EQ(p.Sample(logits, history), 2);
  EXPECT_TRUE(p.Verify(logits, history, 2).accepted);
  EXPECT_THROW(s.Verify(logits, {}, 4), Error);
  EXPECT_THROW(s.Verify(logits, {}, -1), Error);
}

// The token Verify returns is distributed as Sample's draws, whatever the
// draft (filtered-out drafts included), and the draft is accepted with
// probability p(draft). 200000 seeded trials: 5 sigma is at most 0.0056.
TEST(SamplerVerify, SamplingKeepsTheTargetDistribution) {
  const std::vector<float> logits = {1.0f, 0.2f, 2.0f, -0.5f, 1.5f, -3.0f};
  const SamplerOptions o{.temperature = 0.8f, .top_k = 4, .top_p = 0.97f};
  // p: softmax(logits / T) over the top 4 {2, 4, 0, 1}; top_p 0.97 keeps all 4.
  std::vector<double> p(logits.size(), 0.0);
  double z = 0.0;
  for (int i : {2, 4, 0, 1}) z += p[static_cast<std::size_t>(i)] = std::exp(logits[static_cast<std::size_t>(i)] / 0.8);
  for (double& v : p) v /= z;
  constexpr int kTrials = 200000;
  for (int32_t draft = 0; draft < 6; ++draft) {
    SamplerOptions so = o;
    so.seed = static_cast<uint64_t>(11 + draft);
    Sampler s(so);
    std::vector<double> freq(logits.size(), 0.0);
    double accepted = 0.0;
    for (int t = 0; t < kTrials; ++t) {
      const DraftVerdict v = s.Verify(logits, {}, draft);
      freq[static_cast<std::size_t>(v.token)] += 1.0 / kTrials;
      if (v.accepted) {
        EXPECT_EQ(v.token, draft);
        accepted += 1.0 / kTrials;
      } else {
        EXPECT_NE(v.token, draft);
      }
    }
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(freq[i], p[i], 0.006) << "draft " << draft << " token " << i;
    EXPECT_NEAR(accepted, p[static_cast<std::size_t>(draft)], 0.006) << "draft " << draft;
  }
}

// ---- n-gram drafter ----

std::vector<int32_t> NgramDrafts(const std::vector<int32_t>& seq, int max_tokens, NgramOptions o = {}) {
  std::unique_ptr<Drafter> d = MakeNgramDrafter(o);
  std::vector<int32_t> out;
  d->Draft(DraftContext{.row = 0, .tokens = seq}, max_tokens, out);
  return out;
}

TEST(NgramDrafter, LongestSuffixAtItsMostRecentOccurrence) {
  // Suffix "7 8": earlier at 1 (then 9 10 11) and at 6 (then 5 6); the most recent wins.
  EXPECT_EQ(NgramDrafts({1, 7, 8, 9, 10, 11, 7, 8, 5, 6, 3, 7, 8}, 8), (std::vector<int32_t>{5, 6, 3, 7, 8}));
  // The 3-gram "4 7 8" beats the more recent 2-gram "7 8".
  EXPECT_EQ(NgramDrafts({4, 7, 8, 20, 21, 7, 8, 30, 4, 7, 8}, 2), (std::vector<int32_t>{20, 21}));
  // No earlier occurrence of any suffix of >= ngram_min tokens: no drafts.
  EXPECT_TRUE(NgramDrafts({1, 2, 3, 4, 5}, 4).empty());
  EXPECT_TRUE(NgramDrafts({1, 2, 3, 1}, 4).empty());  // ngram_min = 2 by default
  EXPECT_EQ(NgramDrafts({1, 2, 3, 1}, 4, {.ngram_min = 1, .ngram_max = 3}), (std::vector<int32_t>{2, 3, 1}));
  // An overlapping earlier occurrence: "5 5" occurs at 0 and 1; 1 is the most recent with a token after it.
  EXPECT_EQ(NgramDrafts({5, 5, 5}, 3), (std::vector<int32_t>{5}));
  EXPECT_THROW(MakeNgramDrafter({.ngram_min = 0}), Error);
  EXPECT_THROW(MakeNgramDrafter({.ngram_min = 3, .ngram_max = 2}), Error);
}

// ---- Greedy losslessness through the generator ----

// Proposes the known greedy continuation with each draft token corrupted with
// probability `noise` (seeded), so rejections fall at every draft position.
class NoisyOracle final : public Drafter {
 public:
  NoisyOracle(std::vector<int32_t> truth, int n_vocab, double noise)
      : truth_(std::move(truth)), n_vocab_(n_vocab), noise_(noise) {}
  std::string name() const override { return "noisy-oracle"; }
  void Draft(const DraftContext& ctx, int max_tokens, std::vector<int32_t>& out) override {
    std::bernoulli_distribution flip(noise_);
    for (std::size_t i = ctx.tokens.size(); i < truth_.size() && out.size() < static_cast<std::size_t>(max_tokens) + 1;
         ++i) {
      const int32_t t = truth_[i];
      out.push_back(flip(rng_) ? (t + 1) % n_vocab_ : t);
    }
  }

 private:
  std::vector<int32_t> truth_;
  int n_vocab_;
  double noise_;
  std::mt19937 rng_{7};
};

struct Case {
  std::string name;
  ModelStateOptions state;
};

// Plain greedy, then each drafter on a fresh generator of the same state
// options; two turns each (the second appends to the first's cache).
void CheckLossless(const Model& model, const Case& c, ThreadPool* pool, int n_new, bool expect_ngram_drafts = false) {
  const int V = model.config().n_vocab;
  const Tokenizer tok(model.gguf().Has("tokenizer.ggml.tokens") ? ReadVocab(model.gguf()) : testing::TinyVocab(V));
  std::vector<int32_t> turn1 = {2, 5, 9, 14, 5, 9, 14, 21, 33, 5, 9};
  const std::vector<int32_t> turn2 = {7, 8, 5, 9};
  for (int32_t& t : turn1) t %= V;
  GenerateOptions o;
  o.max_new_tokens = n_new;

  Generator plain_gen(model, tok, pool, c.state);
  const GenRun p1 = Generate(plain_gen, turn1, o);
  const GenRun p2 = Generate(plain_gen, turn2, o);
  // The whole greedy sequence the oracle proposes from: turn 1, its output
  // but the last token (pending, never fed), turn 2, its output.
  std::vector<int32_t> truth = turn1;
  truth.insert(truth.end(), p1.tokens.begin(), p1.tokens.end() - 1);
  truth.insert(truth.end(), turn2.begin(), turn2.end());
  truth.insert(truth.end(), p2.tokens.begin(), p2.tokens.end());

  std::vector<std::pair<std::string, std::unique_ptr<Drafter>>> drafters;
  drafters.emplace_back("oracle noise 0.3", std::make_unique<NoisyOracle>(truth, V, 0.3));
  drafters.emplace_back("oracle noise 0", std::make_unique<NoisyOracle>(truth, V, 0.0));
  drafters.emplace_back("ngram", MakeNgramDrafter({.ngram_min = 1, .ngram_max = 3}));
  drafters.emplace_back("draft model (itself)",
                        MakeDraftModelDrafter(model, model, {.max_context = c.state.max_context, .pool = pool}));
  for (auto& [dname, drafter] : drafters) {
    for (const bool adaptive : {false, true}) {
      const std::string what = c.name + ", " + dname + (adaptive ? ", adaptive" : ", k = 5");
      GenerateOptions so = o;
      so.drafter = drafter.get();
      so.speculative = {.draft_max = 5, .adaptive = adaptive};
      Generator gen(model, tok, pool, c.state);
      drafter->Reset(0);
      const GenRun s1 = Generate(gen, turn1, so);
      ExpectBitwiseEqual(p1, s1, what + ", turn 1");
      const GenRun s2 = Generate(gen, turn2, so);
      ExpectBitwiseEqual(p2, s2, what + ", turn 2");
      EXPECT_EQ(gen.state().length(), plain_gen.state().length()) << what;
      SpeculativeStats st = s1.stats.speculative;
      st.rounds += s2.stats.speculative.rounds;
      st.drafted += s2.stats.speculative.drafted;
      st.accepted += s2.stats.speculative.accepted;
      if (dname == "oracle noise 0.3") {
        EXPECT_GT(st.accepted, 0) << what;
        EXPECT_LT(st.accepted, st.drafted) << what << ": the test needs rejections";
      }
      if (dname == "oracle noise 0" || dname == "draft model (itself)") {
        // Every draft is right; only a turn that stops at an end token leaves
        // the drafts after it unaccepted.
        const int stopped = (p1.stats.stop_reason != "max_tokens") + (p2.stats.stop_reason != "max_tokens");
        EXPECT_LE(st.drafted - st.accepted, stopped * 5) << what;
        EXPECT_LT(s1.stats.decode_steps, s1.stats.generated_tokens - 1) << what << ": fewer target steps than tokens";
      }
      if (dname == "ngram" && expect_ngram_drafts) {
        EXPECT_GT(st.drafted, 0) << what;
      }
    }
  }
}

TEST(SpeculativeLossless, TinyGemma3RingsSharingAndCacheTypes) {
  ThreadPool pool(2);
  for (const int shared : {0, 2}) {
    TinyGemmaSpec spec;
    spec.head_dim = 32;  // q8_0 caches need H % 32 == 0
    spec.window = 4;
    spec.shared_kv_layers = shared;
    spec.types = {GgmlType::kF32, GgmlType::kQ8_0, GgmlType::kF16};
    const TempGguf file(spec, "spec_g3_" + std::to_string(shared));
    const std::unique_ptr<Model> model = Model::Load(file.path);
    for (const DType dt : {DType::kFloat32, DType::kFloat16, DType::kQ8_0}) {
      // max_step 6 = draft_max + 1: a verify step is one chunk, and the rings
      // (window + max_step - 1) keep just enough to rewind the rejected drafts.
      CheckLossless(*model,
                    {"gemma3 shared " + std::to_string(shared) + " " + DTypeName(dt),
                     {.max_context = 96, .max_step = 6, .kv_dtype = dt}},
                    &pool, 40);
    }
    CheckLossless(*model, {"gemma3 exact_rewind", {.max_context = 96, .max_step = 64, .exact_rewind = true}}, nullptr,
                  40);
  }
}

TEST(SpeculativeLossless, TinyGemma4SharingPleMoeKeqv) {
  ThreadPool pool(2);
  TinyGemma4Spec dense;
  TinyGemma4Spec moe;
  moe.experts = 4;
  moe.k_eq_v = true;
  moe.ple = 0;
  moe.shared = 0;
  for (const auto& [name, spec] : {std::pair{"dense", dense}, std::pair{"moe", moe}}) {
    const TempGguf file("spec_g4_" + std::string(name), [&](const std::string& p) { WriteTinyGemma4(p, spec); });
    const std::unique_ptr<Model> model = Model::Load(file.path);
    CheckLossless(*model, {std::string("gemma4 ") + name, {.max_context = 96, .max_step = 6}}, &pool, 40);
  }
}

// The converted Gemma 4 fixtures (tests/fixtures/gemma4): per-layer head
// sizes, PLE, KV sharing, k_eq_v, MoE, and llama.cpp's Q8_0 / Q4_K_M
// quantizations of e2b.
TEST(SpeculativeLossless, Gemma4Fixtures) {
  ThreadPool pool(2);
  const std::string dir = testing::SourcePath("tests/fixtures/gemma4/");
  for (const char* name : {"e2b.f32", "e2b.q8_0", "e2b.q4_k_m", "keqv.f32", "moe.f32", "noshare.f32"}) {
    const std::unique_ptr<Model> model = Model::Load(dir + name + ".gguf");
    CheckLossless(*model, {name, {.max_context = 96, .max_step = 6}}, &pool, 40);
  }
}

// The converted Gemma 3n fixtures (tests/fixtures/gemma3n): AltUp streams,
// Laurel, activation sparsity and KV sharing under verify steps and rewinds,
// in f32 and llama.cpp's quantizations.
TEST(SpeculativeLossless, Gemma3nFixtures) {
  ThreadPool pool(2);
  const std::string dir = testing::SourcePath("tests/fixtures/gemma3n/");
  for (const char* name : {"e2b.f32", "e2b.q8_0", "e2b.q4_k_m", "pattern5.f32"}) {
    const std::unique_ptr<Model> model = Model::Load(dir + name + ".gguf");
    CheckLossless(*model, {name, {.max_context = 96, .max_step = 6}}, &pool, 40);
  }
}

// A row whose verify steps mix accepted drafts with ring wrap-around many
// times over: long generation on a window of 4.
TEST(SpeculativeLossless, LongRunOverSmallRings) {
  TinyGemmaSpec spec;
  spec.window = 3;
  const TempGguf file(spec, "spec_long");
  const std::unique_ptr<Model> model = Model::Load(file.path);
  CheckLossless(*model, {"long", {.max_context = 512, .max_step = 6}}, nullptr, 200, /*expect_ngram_drafts=*/true);
}

// ---- Sampling with speculation ----

// The same seed gives the same tokens run after run; every token is a valid id;
// the stop rules hold (exactly max_new_tokens, stop tokens end the run).
TEST(SpeculativeSampling, ReproducibleAndStopsWhereAsked) {
  TinyGemmaSpec spec;
  const TempGguf file(spec, "spec_sampling");
  const std::unique_ptr<Model> model = Model::Load(file.path);
  const Tokenizer tok(testing::TinyVocab(spec.n_vocab));
  const std::vector<int32_t> prompt = {2, 10, 20, 30, 10, 20};
  std::unique_ptr<Drafter> ngram = MakeNgramDrafter({.ngram_min = 1, .ngram_max = 2});
  GenerateOptions o;
  o.max_new_tokens = 60;
  o.sampler = {.temperature = 0.7f, .top_k = 8, .seed = 5};
  o.drafter = ngram.get();
  Generator a(*model, tok, nullptr, {.max_context = 128, .max_step = 8});
  Generator b(*model, tok, nullptr, {.max_context = 128, .max_step = 8});
  const GenRun ra = Generate(a, prompt, o);
  const GenRun rb = Generate(b, prompt, o);
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_EQ(ra.tokens.size(), 60u);
  EXPECT_GT(ra.stats.speculative.drafted, 0);
  EXPECT_EQ(a.state().length(), static_cast<std::int64_t>(prompt.size()) + 59) << "the last token is pending";
  // Stop at the 10th token's id: the run ends at its first occurrence.
  o.stop_tokens = {ra.tokens[9]};
  Generator c(*model, tok, nullptr, {.max_context = 128, .max_step = 8});
  const GenRun rc = Generate(c, prompt, o);
  ASSERT_FALSE(rc.tokens.empty());
  EXPECT_EQ(rc.tokens.back(), ra.tokens[9]);
  EXPECT_EQ(rc.stats.stop_reason, "end_of_turn");
  EXPECT_EQ(c.state().length(), static_cast<std::int64_t>(prompt.size() + rc.tokens.size()) - 1);
}

// ---- Errors ----

TEST(Speculative, BadOptionsAndVocabularies) {
  EXPECT_THROW(CheckSpeculativeOptions({.draft_max = 0}), Error);
  EXPECT_THROW(CheckSpeculativeOptions({.draft_max = 65}), Error);
  EXPECT_THROW(CheckSpeculativeOptions({.verify_cost = 0}), Error);
  EXPECT_NO_THROW(CheckSpeculativeOptions({}));
  TinyGemmaSpec a;
  TinyGemmaSpec b;
  b.n_vocab = 60;
  const TempGguf fa(a, "spec_vocab_a"), fb(b, "spec_vocab_b");
  const std::unique_ptr<Model> ma = Model::Load(fa.path), mb = Model::Load(fb.path);
  try {
    MakeDraftModelDrafter(*mb, *ma, {});
    FAIL() << "a draft model with another vocabulary size was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("60 tokens, the target's 50"), std::string::npos) << e.what();
  }
  const Tokenizer tok(testing::TinyVocab(a.n_vocab));
  Generator gen(*ma, tok, nullptr, {.max_context = 32});
  std::unique_ptr<Drafter> ngram = MakeNgramDrafter();
  GenerateOptions o;
  o.drafter = ngram.get();
  o.speculative.draft_max = 100;
  const std::vector<int32_t> prompt = {2, 3};
  EXPECT_THROW(gen.Generate(prompt, o, nullptr), Error);
  EXPECT_EQ(gen.state().length(), 0) << "nothing runs before the check";
}

// ---- The default model ----

TEST(SpeculativeLossless, DefaultModelPromptLookupAndDraftModel) {
  const std::string path = testing::DefaultModelPath();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no default model at " << path << " (scripts/fetch_model.py)";
  const std::unique_ptr<Model> model = Model::Load(path);
  const Tokenizer tok(ReadVocab(model->gguf()));
  ThreadPool pool(2);
  const std::vector<std::string> prompts = {
      "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox",
      "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
  };
  std::unique_ptr<Drafter> ngram = MakeNgramDrafter();
  // The model drafting for itself: every draft is accepted.
  std::unique_ptr<Drafter> self = MakeDraftModelDrafter(*model, *model, {.max_context = 256, .pool = &pool});
  for (const std::string& text : prompts) {
    const std::vector<int32_t> ids = tok.Encode(text);
    GenerateOptions o;
    o.max_new_tokens = 48;
    Generator plain(*model, tok, &pool, {.max_context = 256, .kv_dtype = DType::kFloat16});
    const GenRun p = Generate(plain, ids, o);
    for (Drafter* d : {ngram.get(), self.get()}) {
      o.drafter = d;
      Generator spec(*model, tok, &pool, {.max_context = 256, .kv_dtype = DType::kFloat16});
      const GenRun s = Generate(spec, ids, o);
      ExpectBitwiseEqual(p, s, d->name() + ": " + text);
      EXPECT_GT(s.stats.speculative.accepted, 0) << text;
      EXPECT_LT(s.stats.decode_steps, p.stats.decode_steps) << text;
    }
  }
}

}  // namespace
}  // namespace kvshare
