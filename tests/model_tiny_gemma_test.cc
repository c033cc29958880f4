// The model's KV cache on a tiny random gemma3 GGUF written by the test
// (model_tiny_gemma.h): 6 layers S S F S S F, window 5, one KV head of 16.
// - Forward equals an independent double-precision no-cache reference, with
//   and without KV-shared layers, in one chunk and in many;
// - cached generation (chunked prefill, then token by token, rings wrapping
//   several times) equals a no-cache full recomputation of the same tokens;
// - sharing changes the outputs and saves exactly the shared layers' bytes;
// - bad options and inputs throw and leave the state unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "common_record_measured.h"
#include "common_test_util.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/model.h"
#include "model_tiny_gemma.h"

namespace kvshare {
namespace {

using testing::GgufKv;
using testing::GgufSpec;
using testing::MaxRelDiff;
using testing::TempGguf;
using testing::TinyGemmaGguf;
using testing::TinyGemmaSpec;
using testing::WriteFile;

// fp32 everywhere (float weights, fp32 KV): rounding of ~100-term fp32 dot
// products (~sqrt(n) * 6e-8 each) through 6 layers stays far below this.
constexpr double kFp32Tol = 1e-5;

using testing::AllLogits;
using testing::Tokens;

std::vector<float> Slice(std::span<const float> v, std::size_t row, std::size_t width) {
  return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(row * width),
                            v.begin() + static_cast<std::ptrdiff_t>((row + 1) * width));
}

std::int32_t Argmax(const std::vector<float>& v) {
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<float> AsFloat(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

TinyGemmaSpec FloatSpec() {
  TinyGemmaSpec s;
  s.types = {GgmlType::kF32, GgmlType::kF16};
  return s;
}

TinyGemmaSpec QuantSpec() {
  TinyGemmaSpec s;
  s.types = {GgmlType::kQ8_0, GgmlType::kF16, GgmlType::kQ4_0, GgmlType::kF32};
  s.seed = 7;
  return s;
}

TEST(TinyGemma, ConfigAndPlanFromMetadata) {
  TinyGemmaSpec spec = FloatSpec();
  spec.shared_kv_layers = 2;
  TempGguf file(spec, "meta");
  auto m = Model::Load(file.path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.n_layer, 6);
  EXPECT_EQ(c.num_kv_shared_layers, 2);
  EXPECT_EQ(MaxKvSharedLayers(c), 3);  // layer 2 is the first full layer: shared layers start at >= 3
  auto st = m->NewState({.max_context = 32});
  const LayerPlan& plan = st->kv_cache().Plan();
  EXPECT_EQ(plan.num_slots, 4);
  EXPECT_FALSE(plan.layers[4].owns_cache);
  EXPECT_EQ(plan.layers[4].source_layer, 3);  // sliding -> last non-shared sliding
  EXPECT_EQ(plan.layers[5].source_layer, 2);  // full -> last non-shared full
  // The metadata default and the explicit override agree; 0 turns sharing off.
  const auto t = Tokens(12, c.n_vocab, 3);
  const auto by_meta = AllLogits(*m, t, {.max_context = 32});
  const auto explicit2 = AllLogits(*m, t, {.max_context = 32, .num_kv_shared_layers = 2});
  const auto off = AllLogits(*m, t, {.max_context = 32, .num_kv_shared_layers = 0});
  EXPECT_EQ(by_meta, explicit2);
  EXPECT_GT(MaxRelDiff(off, by_meta), 1e-2);
  EXPECT_LT(MaxRelDiff(by_meta, AsFloat(testing::ReferenceLogits(*m, t, 2))), kFp32Tol);
  EXPECT_LT(MaxRelDiff(off, AsFloat(testing::ReferenceLogits(*m, t, 0))), kFp32Tol);
}

TEST(TinyGemma, InvalidSharedLayersInMetadataIsRejected) {
  TinyGemmaSpec spec = FloatSpec();
  spec.shared_kv_layers = 4;  // layers 2..5 shared: the full ones have no source
  TempGguf file(spec, "badmeta");
  try {
    Model::Load(file.path);
    FAIL() << "expected kvshare::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shared_kv_layers = 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("valid: 0..3"), std::string::npos) << e.what();
  }
}

// Metadata that would size vectors by a negative count, divide by zero or
// run as NaN logits: refused at load, naming the key. A uint32 past INT_MAX
// reads back negative (0xFFFFFFFF is -1).
TEST(TinyGemma, BadHyperparametersAreRefused) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::string a = "gemma3.";
  const struct {
    GgufKv kv;
    std::string want;
  } cases[] = {
      {GgufKv::U32(a + "block_count", 0xFFFFFFFFu), "block_count must be >= 1, got -1"},
      {GgufKv::U32(a + "block_count", 3), "block_count = 3, but the file's layer tensors end at layer 5"},
      {GgufKv::U32(a + "block_count", 7), "block_count = 7, but the file's layer tensors end at layer 5"},
      {GgufKv::U32(a + "attention.head_count", 0), "attention.head_count must be >= 1, got 0"},
      {GgufKv::U32(a + "attention.head_count_kv", 0), "head_count_kv = 0 must be >= 1 and divide"},
      {GgufKv::U32(a + "attention.head_count_kv", 3), "head_count_kv = 3 must be >= 1 and divide"},
      {GgufKv::U32(a + "attention.key_length", 0), "attention.key_length must be >= 1, got 0"},
      {GgufKv::U32(a + "attention.value_length", 32), "value_length = 32 differs from attention.key_length = 16"},
      {GgufKv::U32(a + "attention.sliding_window", 0x80000000u), "attention.sliding_window must be >= 0"},
      {GgufKv::U32(a + "attention.sliding_window_pattern", 0), "sliding_window_pattern must be >= 1, got 0"},
      {GgufKv::U32(a + "context_length", 0), "context_length must be >= 1, got 0"},
      {GgufKv::F32(a + "attention.layer_norm_rms_epsilon", -1e-6f), "layer_norm_rms_epsilon must be finite and >= 0"},
      {GgufKv::F32(a + "attention.layer_norm_rms_epsilon", nan), "layer_norm_rms_epsilon must be finite and >= 0"},
      {GgufKv::F32(a + "rope.freq_base", 0.0f), "rope.freq_base must be finite and > 0, got 0"},
      {GgufKv::F32(a + "rope.freq_base", nan), "rope.freq_base must be finite and > 0, got nan"},
      {GgufKv::F32(a + "rope.freq_base_swa", -1e4f), "rope.freq_base_swa must be finite and > 0, got -10000"},
  };
  for (const auto& c : cases) {
    GgufSpec g = TinyGemmaGguf(FloatSpec());
    const auto it = std::find_if(g.kvs.begin(), g.kvs.end(), [&](const GgufKv& kv) { return kv.key == c.kv.key; });
    if (it != g.kvs.end()) {
      *it = c.kv;
    } else {
      g.kvs.push_back(c.kv);
    }
    TempGguf file("gemma_hparams", [&](const std::string& p) { WriteFile(p, g.Build()); });
    try {
      Model::Load(file.path);
      ADD_FAILURE() << c.kv.key << ": loaded, expected kvshare::Error with \"" << c.want << "\"";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.want), std::string::npos) << c.kv.key << ": " << e.what();
    }
  }
}

// Forward against the independent reference, for every sharing level, in one
// chunk and in chunks of 1 and 4 (logits of every position, across chunks).
TEST(TinyGemma, ForwardEqualsReference) {
  TempGguf file(FloatSpec(), "ref");
  auto m = Model::Load(file.path);
  const auto t = Tokens(23, m->config().n_vocab, 5);
  std::vector<std::vector<float>> refs;
  for (int shared = 0; shared <= 3; ++shared) {
    refs.push_back(AsFloat(testing::ReferenceLogits(*m, t, shared)));
    for (int step : {512, 4, 1}) {
      const auto got = AllLogits(*m, t, {.max_context = 30, .max_step = step, .num_kv_shared_layers = shared});
      EXPECT_LT(MaxRelDiff(got, refs.back()), kFp32Tol) << "shared " << shared << " max_step " << step;
    }
  }
  // Sharing is visible in the results (this test would notice it being ignored).
  for (int shared = 1; shared <= 3; ++shared) EXPECT_GT(MaxRelDiff(refs[shared], refs[0]), 1e-2) << shared;
}

struct CacheCase {
  int shared;
  int max_step;
  DType kv;
  int head_dim = 16;  // q8_0 caches need a multiple of 32
};
void PrintTo(const CacheCase& c, std::ostream* os) {
  *os << "{shared " << c.shared << ", max_step " << c.max_step << ", " << DTypeName(c.kv) << ", H " << c.head_dim
      << "}";
}

class TinyGemmaCache : public ::testing::TestWithParam<CacheCase> {};

// Prefill 11 tokens in chunks of max_step, then 20 greedy decode steps: every
// step's logits equal a no-cache recomputation (one chunk over the whole
// sequence, linear buffers) of the same tokens. Window 5 with rings of
// 5 + max_step - 1 positions: the rings wrap several times.
TEST_P(TinyGemmaCache, CachedGenerationEqualsRecompute) {
  const CacheCase p = GetParam();
  TinyGemmaSpec spec = QuantSpec();
  spec.head_dim = p.head_dim;
  TempGguf file(spec, "cache");
  auto m = Model::Load(file.path);
  const int V = m->config().n_vocab, P = 11, steps = 20;
  ThreadPool pool(2);
  const ModelStateOptions o{
      .max_context = 40, .max_step = p.max_step, .kv_dtype = p.kv, .num_kv_shared_layers = p.shared};
  auto st = m->NewState(o);
  EXPECT_LT(st->kv_cache().Memory().layers[0].capacity, P + steps);  // the sliding ring wraps
  std::vector<std::int32_t> seq = Tokens(P, V, 11);
  std::vector<std::vector<float>> cached;
  std::span<const float> l = m->Forward(*st, seq, &pool);
  cached.emplace_back(l.begin(), l.end());
  for (int i = 0; i < steps; ++i) {
    const std::int32_t next = Argmax(cached.back());
    seq.push_back(next);
    l = m->Forward(*st, std::span<const std::int32_t>(&next, 1), &pool);
    cached.emplace_back(l.begin(), l.end());
  }
  ASSERT_EQ(st->length(), P + steps);
  const int T = P + steps;
  const auto full =
      AllLogits(*m, seq, {.max_context = T, .max_step = T, .kv_dtype = p.kv, .num_kv_shared_layers = p.shared}, &pool);
  for (int i = 0; i <= steps; ++i) {
    EXPECT_LT(MaxRelDiff(cached[static_cast<std::size_t>(i)], Slice(full, static_cast<std::size_t>(P - 1 + i), V)),
              kFp32Tol)
        << "step " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, TinyGemmaCache,
                         ::testing::Values(CacheCase{0, 16, DType::kFloat32}, CacheCase{0, 3, DType::kFloat32},
                                           CacheCase{0, 1, DType::kFloat32}, CacheCase{2, 3, DType::kFloat32},
                                           CacheCase{3, 4, DType::kFloat32}, CacheCase{3, 1, DType::kFloat32},
                                           CacheCase{2, 3, DType::kFloat16}, CacheCase{3, 4, DType::kBFloat16},
                                           CacheCase{0, 3, DType::kQ8_0, 32}, CacheCase{3, 1, DType::kQ8_0, 32},
                                           CacheCase{2, 16, DType::kQ8_0, 64}),
                         [](const ::testing::TestParamInfo<CacheCase>& i) {
                           return "shared" + std::to_string(i.param.shared) + "_step" +
                                  std::to_string(i.param.max_step) + "_" + DTypeName(i.param.kv) + "_h" +
                                  std::to_string(i.param.head_dim);
                         });

// Greedy generation on a q8_0 cache stays close to float32: every step's
// logits (fed the float32 run's tokens) within kQ8_0LogitTol relative, and the
// greedy tokens agree. float16 is shown for scale.
TEST(TinyGemma, Q8_0CacheStaysCloseToFloat32) {
  TinyGemmaSpec spec = QuantSpec();
  spec.head_dim = 32;
  TempGguf file(spec, "q8close");
  auto m = Model::Load(file.path);
  const int V = m->config().n_vocab, P = 11, steps = 20;
  std::vector<std::int32_t> seq = Tokens(P, V, 12);
  auto f32 = m->NewState({.max_context = 40, .max_step = 4});
  std::span<const float> l = m->Forward(*f32, seq, nullptr);
  for (int i = 0; i < steps; ++i) {
    const std::int32_t next = Argmax(std::vector<float>(l.begin(), l.end()));
    seq.push_back(next);
    l = m->Forward(*f32, std::span<const std::int32_t>(&next, 1), nullptr);
  }
  const auto want = AllLogits(*m, seq, {.max_context = 40, .max_step = 4}, nullptr);
  const auto q8 = AllLogits(*m, seq, {.max_context = 40, .max_step = 4, .kv_dtype = DType::kQ8_0}, nullptr);
  const auto f16 = AllLogits(*m, seq, {.max_context = 40, .max_step = 4, .kv_dtype = DType::kFloat16}, nullptr);
  const double d_q8 = MaxRelDiff(q8, want), d_f16 = MaxRelDiff(f16, want);
  testing::RecordMeasured("tiny gemma logits vs f32 cache: q8_0 %.2e, f16 %.2e (max rel)\n", d_q8, d_f16);
  constexpr double kQ8_0LogitTol = 2e-2;
  EXPECT_LT(d_q8, kQ8_0LogitTol);
  EXPECT_GT(d_q8, 0.0);  // the cache really is quantized
  int same = 0;
  for (int t = P - 1; t < P + steps - 1; ++t) {
    same += Argmax(Slice(q8, static_cast<std::size_t>(t), V)) == seq[static_cast<std::size_t>(t) + 1];
  }
  EXPECT_GE(same, steps - 1);
}

// K+V bytes per layer: 2 * N_kv * H * C * sizeof(dtype); sliding C = W + S_max - 1.
TEST(TinyGemma, SharingSavesTheSharedLayersBytes) {
  TempGguf file(FloatSpec(), "bytes");
  auto m = Model::Load(file.path);
  const std::size_t per_pos = 2 * 1 * 16 * sizeof(float);
  const std::size_t sliding = per_pos * (5 + 3 - 1), full = per_pos * 40;
  // Layers S S F S S F.
  auto own = m->NewState({.max_context = 40, .max_step = 3, .num_kv_shared_layers = 0});
  EXPECT_EQ(own->kv_bytes(), 4 * sliding + 2 * full);
  auto sh = m->NewState({.max_context = 40, .max_step = 3, .num_kv_shared_layers = 3});  // 3 S, 4 S, 5 F shared
  EXPECT_EQ(sh->kv_bytes(), 2 * sliding + 1 * full);
  EXPECT_EQ(sh->kv_cache().Memory().bytes_without_sharing, own->kv_bytes());
  EXPECT_EQ(sh->kv_cache().Memory().saved_by_sharing, 2 * sliding + 1 * full);
  auto half = m->NewState({.max_context = 40, .max_step = 3, .kv_dtype = DType::kFloat16, .num_kv_shared_layers = 3});
  EXPECT_EQ(half->kv_bytes(), sh->kv_bytes() / 2);
  // max_step is clamped to max_context; rings never exceed a linear buffer.
  auto tiny = m->NewState({.max_context = 4, .max_step = 512, .num_kv_shared_layers = 0});
  EXPECT_EQ(tiny->kv_bytes(), 6 * per_pos * 4);
}

// After the attention of the last layer that writes K/V, a prefill runs on
// the rows whose logits are read only (ModelStateOptions::prefill_shortcut):
// the logits asked for, and the cache left behind, are bitwise those of a run
// where every row goes through every layer; with and without KV-shared layers
// (the cut then falls in layer 5 or layer 2), int8 and float weights, in one
// chunk and in many, and in a batch whose other row keeps no logits.
TEST(TinyGemma, PrefillShortCutIsExact) {
  for (const TinyGemmaSpec& spec : {FloatSpec(), QuantSpec()}) {
    TempGguf file(spec, "cut");
    auto m = Model::Load(file.path);
    const int V = m->config().n_vocab;
    const std::vector<std::int32_t> prompt = Tokens(11, V, 5), other = Tokens(6, V, 9);
    const std::size_t Vz = static_cast<std::size_t>(V);
    for (int shared : {0, 3}) {
      for (int max_step : {64, 4}) {
        const std::string at = "shared " + std::to_string(shared) + " max_step " + std::to_string(max_step);
        const ModelStateOptions on{.max_context = 32, .max_step = max_step, .num_kv_shared_layers = shared};
        ModelStateOptions off = on;
        off.prefill_shortcut = false;
        const std::vector<float> every = AllLogits(*m, prompt, off);
        auto a = m->NewState(on);
        auto b = m->NewState(off);
        std::span<const float> l = m->Forward(*a, prompt, nullptr, {.num_logits = 1});
        EXPECT_EQ(std::vector<float>(l.begin(), l.end()), std::vector<float>(every.end() - V, every.end())) << at;
        l = m->Forward(*b, prompt, nullptr, {.num_logits = 1});
        EXPECT_EQ(std::vector<float>(l.begin(), l.end()), std::vector<float>(every.end() - V, every.end())) << at;
        auto two = m->NewState(on);
        l = m->Forward(*two, prompt, nullptr, {.num_logits = 2});
        EXPECT_EQ(std::vector<float>(l.begin(), l.end()), std::vector<float>(every.end() - 2 * V, every.end())) << at;
        // The caches left behind agree: so do the next step's logits.
        const std::vector<std::int32_t> next = {3};
        l = m->Forward(*a, next, nullptr);
        const std::vector<float> next_a(l.begin(), l.end());
        l = m->Forward(*b, next, nullptr);
        EXPECT_EQ(next_a, std::vector<float>(l.begin(), l.end())) << at;

        // A batch beside a shorter prompt: with max_step 4 its steps mix rows
        // that keep a logits row with rows that keep none.
        const std::vector<float> other_every = AllLogits(*m, other, off);
        ModelStateOptions two_rows = on;
        two_rows.max_batch = 2;
        auto batch = m->NewState(two_rows);
        l = m->ForwardBatch(*batch, std::vector<BatchEntry>{{.row = 0, .tokens = other}, {.row = 1, .tokens = prompt}}, nullptr);
        EXPECT_EQ(Slice(l, 0, Vz), std::vector<float>(other_every.end() - V, other_every.end())) << at;
        EXPECT_EQ(Slice(l, 1, Vz), std::vector<float>(every.end() - V, every.end())) << at;
        l = m->ForwardBatch(*batch, std::vector<BatchEntry>{{.row = 0, .tokens = next}, {.row = 1, .tokens = next}}, nullptr);
        EXPECT_EQ(Slice(l, 1, Vz), next_a) << at;
        std::vector<std::int32_t> other_next = other;
        other_next.push_back(3);
        const std::vector<float> want0 = AllLogits(*m, other_next, off);
        EXPECT_EQ(Slice(l, 0, Vz), std::vector<float>(want0.end() - V, want0.end())) << at;
      }
    }
  }
}

TEST(TinyGemma, ResultsDoNotDependOnThreads) {
  TempGguf file(QuantSpec(), "threads");
  auto m = Model::Load(file.path);
  const auto t = Tokens(17, m->config().n_vocab, 2);
  ThreadPool pool(3);
  const ModelStateOptions o{.max_context = 20, .max_step = 4, .num_kv_shared_layers = 2};
  EXPECT_EQ(AllLogits(*m, t, o, nullptr), AllLogits(*m, t, o, &pool));
}

TEST(TinyGemma, BadStateOptionsThrow) {
  TempGguf file(FloatSpec(), "opts");
  auto m = Model::Load(file.path);
  auto message = [&](const ModelStateOptions& o) {
    try {
      m->NewState(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({.num_kv_shared_layers = 4}).find("valid 0..3"), std::string::npos)
      << message({.num_kv_shared_layers = 4});
  EXPECT_NE(message({.num_kv_shared_layers = 6}).find("valid 0..3"), std::string::npos);
  EXPECT_NE(message({.num_kv_shared_layers = -1}).find(">= 0"), std::string::npos);
  EXPECT_NE(message({.max_context = 0}).find("max_context"), std::string::npos);
  // Negative: checked before anything is sized by it (was a std::length_error).
  EXPECT_NE(message({.max_context = -5}).find("max_context must be >= 1, got -5"), std::string::npos);
  EXPECT_NE(message({.max_step = 0}).find("max_step"), std::string::npos);
  EXPECT_NE(message({.kv_dtype = DType::kInt32}).find("kv_dtype"), std::string::npos);
  // head_dim 16: q8_0 blocks of 32 do not fit.
  EXPECT_NE(message({.kv_dtype = DType::kQ8_0}).find("head_size 16, not a multiple of 32"), std::string::npos)
      << message({.kv_dtype = DType::kQ8_0});
}

// Overflow, a bad token id (in the last chunk) and a bad num_logits throw
// before anything runs: the sequence then goes on as if they never happened.
TEST(TinyGemma, FailedForwardLeavesStateUnchanged) {
  TempGguf file(QuantSpec(), "errors");
  auto m = Model::Load(file.path);
  const int V = m->config().n_vocab;
  const auto t = Tokens(20, V, 9);
  const ModelStateOptions o{.max_context = 20, .max_step = 3, .num_kv_shared_layers = 2};
  auto st = m->NewState(o);
  const std::span<const std::int32_t> all(t);
  m->Forward(*st, all.subspan(0, 13), nullptr);
  ASSERT_EQ(st->length(), 13);
  EXPECT_THROW(m->Forward(*st, all.subspan(0, 8), nullptr), Error);  // 13 + 8 > 20
  std::vector<std::int32_t> bad(t.begin() + 13, t.end());
  bad.back() = V;
  EXPECT_THROW(m->Forward(*st, bad, nullptr), Error);
  bad.back() = -1;
  EXPECT_THROW(m->Forward(*st, bad, nullptr), Error);
  EXPECT_THROW(m->Forward(*st, all.subspan(13, 7), nullptr, {.num_logits = 0}), Error);
  EXPECT_THROW(m->Forward(*st, all.subspan(13, 7), nullptr, {.num_logits = 8}), Error);
  EXPECT_THROW(m->Forward(*st, {}, nullptr), Error);
  EXPECT_EQ(st->length(), 13);
  std::span<const float> l = m->Forward(*st, all.subspan(13, 7), nullptr, {.num_logits = 7});
  const std::vector<float> got(l.begin(), l.end());
  const auto full = AllLogits(*m, t, {.max_context = 20, .max_step = 20, .num_kv_shared_layers = 2});
  const std::vector<float> want(full.begin() + 13 * V, full.end());
  EXPECT_LT(MaxRelDiff(got, want), 1e-4);
  // Reset starts over: the same tokens give the same logits.
  st->Reset();
  EXPECT_EQ(st->length(), 0);
  l = m->Forward(*st, t, nullptr, {.num_logits = 20});
  EXPECT_EQ(std::vector<float>(l.begin(), l.end()), AllLogits(*m, t, o));
}

// Two sequences of different lengths in one state (quantized weights, shared
// layers, chunks of 3): prefill together, then decode together; each row's
// logits equal, bitwise, the same tokens run alone.
TEST(TinyGemma, BatchRowsEqualRowsAlone) {
  TempGguf file(QuantSpec(), "batch");
  auto m = Model::Load(file.path);
  const int V = m->config().n_vocab;
  const std::vector<std::vector<std::int32_t>> prompts = {Tokens(8, V, 4), Tokens(5, V, 6)};
  const ModelStateOptions one{.max_context = 24, .max_step = 3, .num_kv_shared_layers = 2};
  ModelStateOptions two = one;
  two.max_batch = 2;
  auto batch = m->NewState(two);
  auto a = m->NewState(one), b = m->NewState(one);
  ThreadPool pool(2);
  std::vector<std::int32_t> next = {3, 4};
  for (int step = 0; step < 4; ++step) {
    const std::vector<std::int32_t> t0 = step == 0 ? prompts[0] : std::vector<std::int32_t>{next[0]};
    const std::vector<std::int32_t> t1 = step == 0 ? prompts[1] : std::vector<std::int32_t>{next[1]};
    std::span<const float> l =
        m->ForwardBatch(*batch, std::vector<BatchEntry>{{.row = 1, .tokens = t1}, {.row = 0, .tokens = t0}}, &pool);
    const std::vector<float> got(l.begin(), l.end());
    std::span<const float> la = m->Forward(*a, t0, nullptr);
    const std::vector<float> want0(la.begin(), la.end());
    std::span<const float> lb = m->Forward(*b, t1, nullptr);
    const std::vector<float> want1(lb.begin(), lb.end());
    EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + V), want1) << "step " << step;
    EXPECT_EQ(std::vector<float>(got.begin() + V, got.end()), want0) << "step " << step;
    next = {Argmax(want0), Argmax(want1)};
  }
}

}  // namespace
}  // namespace kvshare

namespace kvshare {
namespace {

// A token's logits do not depend on how its sequence was cut into calls and
// steps (past the window and past the attention kernel's 1024-key splits):
// one call, calls of 37 tokens, a smaller max_step, token by token at the
// end, a batch next to another row, and a rewind then the same tokens again
// all give bitwise the same logits. Exact prompt caching and batching in the
// server rest on this.
TEST(TinyGemma, LogitsIndependentOfChunking) {
  TempGguf file(FloatSpec(), "chunking");  // float weights: no int8 activations to hide last-bit changes
  auto m = Model::Load(file.path);
  const int V = m->config().n_vocab, T = 1100;
  const std::vector<std::int32_t> t = Tokens(T, V, 21);
  const std::span<const std::int32_t> all(t);
  ThreadPool pool(2);
  auto last_logits = [&](ModelStateOptions o, const std::vector<int>& calls) {
    auto st = m->NewState(o);
    std::span<const float> l;
    int at = 0;
    for (int n : calls) {
      l = m->Forward(*st, all.subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(n)), &pool);
      at += n;
    }
    EXPECT_EQ(at, T);
    return std::vector<float>(l.begin(), l.end());
  };
  const ModelStateOptions o{.max_context = T, .max_step = 256};
  const std::vector<float> want = last_logits(o, {T});
  std::vector<int> by37(T / 37, 37);
  by37.push_back(T % 37);
  EXPECT_EQ(last_logits(o, by37), want) << "calls of 37";
  EXPECT_EQ(last_logits({.max_context = T, .max_step = 64}, {T}), want) << "max_step 64";
  std::vector<int> tail = {T - 10};
  tail.insert(tail.end(), 10, 1);
  EXPECT_EQ(last_logits(o, tail), want) << "decode the last 10";
  EXPECT_EQ(last_logits({.max_context = T, .max_step = 256, .exact_rewind = true}, {T}), want) << "exact_rewind";

  // In a batch: row 1 prefills in chunks of 300 while row 0 decodes its own tokens.
  auto batch = m->NewState({.max_context = T, .max_step = 256, .max_batch = 2});
  const std::vector<std::int32_t> other = Tokens(20, V, 5);
  std::span<const float> l;
  for (int at = 0, i = 0; at < T; at += 300, ++i) {
    const std::size_t n = static_cast<std::size_t>(std::min(300, T - at));
    const std::vector<BatchEntry> entries = {
        {.row = 0, .tokens = std::span(other).subspan(static_cast<std::size_t>(i), 1)},
        {.row = 1, .tokens = all.subspan(static_cast<std::size_t>(at), n)}};
    l = m->ForwardBatch(*batch, entries, &pool);
  }
  EXPECT_EQ(Slice(l, 1, static_cast<std::size_t>(V)), want) << "batched";

  // Rewind then the same tokens again (full-length sliding caches: any length).
  auto st = m->NewState({.max_context = T, .max_step = 256, .exact_rewind = true});
  m->Forward(*st, all, &pool);
  st->Rewind(0, 700);
  l = m->Forward(*st, all.subspan(700), &pool);
  EXPECT_EQ(std::vector<float>(l.begin(), l.end()), want) << "rewind to 700";
}

}  // namespace
}  // namespace kvshare

namespace kvshare {
namespace {

// ModelState::hidden(): the LM head's input of every logits row, entry by
// entry. With float weights the tied head's logits are its dot products with
// the embedding rows (Gemma 3 has no final softcap), and a row's hidden state
// is bitwise that of the same token run alone (in another step, another row).
TEST(TinyGemma, HiddenStatesAreTheLmHeadInput) {
  TinyGemmaSpec spec;
  spec.types = {GgmlType::kF32};
  TempGguf file(spec, "hidden");
  auto m = Model::Load(file.path);
  const int V = m->config().n_vocab, E = m->config().n_embd;
  const std::vector<std::int32_t> a = Tokens(9, V, 3), b = Tokens(4, V, 8);
  auto st = m->NewState({.max_context = 32, .max_batch = 2});
  std::span<const float> l = m->ForwardBatch(
      *st, std::vector<BatchEntry>{{.row = 1, .tokens = b, .num_logits = 1}, {.row = 0, .tokens = a, .num_logits = 3}},
      nullptr);
  const std::vector<float> logits(l.begin(), l.end());
  const std::vector<float> hidden(st->hidden().begin(), st->hidden().end());
  ASSERT_EQ(hidden.size(), static_cast<std::size_t>(4 * E));
  // Embedding rows scaled back: EmbedTokens gives row * sqrt(E).
  std::vector<float> emb(static_cast<std::size_t>(V) * E);
  std::vector<std::int32_t> all(static_cast<std::size_t>(V));
  for (int v = 0; v < V; ++v) all[static_cast<std::size_t>(v)] = v;
  m->EmbedTokens(all, emb.data());
  const double unscale = 1.0 / std::sqrt(static_cast<double>(E));
  for (int r = 0; r < 4; ++r) {
    std::vector<double> want(static_cast<std::size_t>(V));
    for (int v = 0; v < V; ++v) {
      double dot = 0;
      for (int i = 0; i < E; ++i)
        dot += static_cast<double>(hidden[r * E + i]) * emb[static_cast<std::size_t>(v) * E + i] * unscale;
      want[static_cast<std::size_t>(v)] = dot;
    }
    EXPECT_LT(MaxRelDiff(Slice(logits, r, V), AsFloat(want)), kFp32Tol) << "row " << r;
  }
  // Row 0's last three positions, one call each on a fresh state.
  auto alone = m->NewState({.max_context = 32});
  m->Forward(*alone, std::span<const std::int32_t>(a).first(6), nullptr);
  for (int i = 6; i < 9; ++i) {
    m->Forward(*alone, std::span<const std::int32_t>(a).subspan(i, 1), nullptr);
    EXPECT_EQ(Slice(alone->hidden(), 0, E), Slice(hidden, 1 + (i - 6), E)) << "position " << i;
  }
  EXPECT_THROW(m->EmbedTokens(std::vector<std::int32_t>{V}, emb.data()), Error);
}

}  // namespace
}  // namespace kvshare
