// ModelLoadOptions::weight_precision = kBf16 (the float weight matrices on
// the AMX-BF16 tiles, quant/bf16_tiles.h) on the tiny random gemma3 GGUF of
// model_tiny_gemma.h with F32, F16 and BF16 matrices:
// - the logits stay near the double reference (bf16 rounding of weights and
//   activations), and the bf16 products did run (they differ from f32);
// - a token's logits do not depend on how its sequence was cut into calls
//   or batched beside another row, bit for bit, as with the f32 products;
// - a file of quantized matrices only gives the f32 load's logits bit for
//   bit (their int8 products are untouched);
// - without usable tiles, Load refuses kBf16 with an actionable message.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/cpu_amx.h"
#include "common_record_measured.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/model.h"
#include "model_tiny_gemma.h"
#include "quant/bf16_tiles.h"

namespace kvshare {
namespace {

using testing::AllLogits;
using testing::TempGguf;
using testing::TinyGemmaSpec;

constexpr ModelLoadOptions kBf16Weights{.weight_precision = GqaMatMulPrecision::kBf16};

TinyGemmaSpec FloatTypes() {
  TinyGemmaSpec s;
  s.types = {GgmlType::kF16, GgmlType::kBF16, GgmlType::kF32};
  s.seed = 11;
  return s;
}

double MaxAbs(const std::vector<float>& a, const std::vector<double>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

class WeightPrecisionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::AmxBf16Usable()) GTEST_SKIP() << "no usable AMX-BF16 tiles here";
  }
};

TEST_F(WeightPrecisionTest, Bf16WeightsFollowTheReference) {
  TempGguf file(FloatTypes(), "wprec_ref");
  auto f32 = Model::Load(file.path);
  auto bf16 = Model::Load(file.path, kBf16Weights);
  const auto t = testing::Tokens(40, bf16->config().n_vocab, 3);
  const std::vector<double> ref = testing::ReferenceLogits(*f32, t, 0);
  double scale = 0;
  for (double v : ref) scale = std::max(scale, std::fabs(v));
  ThreadPool pool(2);
  const ModelStateOptions o{.max_context = 48, .max_step = 16};
  const std::vector<float> got = AllLogits(*bf16, t, o, &pool), exact = AllLogits(*f32, t, o, &pool);
  const double d_bf16 = MaxAbs(got, ref), d_f32 = MaxAbs(exact, ref);
  // bf16 keeps 8 significant bits (2^-8 relative per rounding) of weights
  // and activations; over 6 layers of 64-96-term sums the logits move by a
  // few percent of their scale at most.
  EXPECT_LT(d_bf16, 0.05 * scale);
  EXPECT_GT(d_bf16, 10 * d_f32) << "the bf16 products did not run";
  testing::RecordMeasured("[ measured ] bf16 weights: max |logit - reference| %.3g (f32 weights %.3g, scale %.3g)\n",
                          d_bf16, d_f32, scale);
}

TEST_F(WeightPrecisionTest, LogitsIndependentOfChunkingAndBatch) {
  TempGguf file(FloatTypes(), "wprec_chunk");
  auto m = Model::Load(file.path, kBf16Weights);
  const int V = m->config().n_vocab;
  const auto t = testing::Tokens(37, V, 5);
  ThreadPool pool(2);
  const std::vector<float> one = AllLogits(*m, t, {.max_context = 40, .max_step = 64}, &pool);
  // Chunks of 5 tokens in calls of 7, then token by token, on one thread.
  auto st = m->NewState({.max_context = 40, .max_step = 5});
  std::vector<float> cut;
  for (std::size_t i = 0; i < t.size();) {
    const std::size_t n = i < 28 ? 7 : 1;
    const std::vector<std::int32_t> part(t.begin() + static_cast<std::ptrdiff_t>(i),
                                         t.begin() + static_cast<std::ptrdiff_t>(i + n));
    std::span<const float> l = m->Forward(*st, part, nullptr, {.num_logits = static_cast<std::int64_t>(n)});
    cut.insert(cut.end(), l.begin(), l.end());
    i += n;
  }
  ASSERT_EQ(cut, one);
  // The last token beside another row in one batched step.
  auto batch = m->NewState({.max_context = 40, .max_step = 64, .max_batch = 2});
  const std::vector<std::int32_t> head(t.begin(), t.end() - 1), other = testing::Tokens(9, V, 8);
  m->ForwardBatch(*batch, std::vector<BatchEntry>{{.row = 0, .tokens = head}, {.row = 1, .tokens = other}}, &pool);
  const std::vector<std::int32_t> last = {t.back()}, next = {2};
  std::span<const float> l =
      m->ForwardBatch(*batch, std::vector<BatchEntry>{{.row = 1, .tokens = next}, {.row = 0, .tokens = last}}, &pool);
  EXPECT_EQ(std::vector<float>(l.begin() + V, l.end()), std::vector<float>(one.end() - V, one.end()));
}

TEST_F(WeightPrecisionTest, QuantizedMatricesKeepTheirProducts) {
  // Only quantized matrices (and the F32 norms): kBf16 changes nothing.
  TinyGemmaSpec s;
  s.types = {GgmlType::kQ8_0, GgmlType::kQ4_0};
  s.n_embd = 64;
  s.n_ff = 128;
  s.head_dim = 32;
  TempGguf file(s, "wprec_quant");
  auto a = Model::Load(file.path), b = Model::Load(file.path, kBf16Weights);
  const auto t = testing::Tokens(12, a->config().n_vocab, 2);
  const ModelStateOptions o{.max_context = 16};
  EXPECT_EQ(AllLogits(*a, t, o, nullptr), AllLogits(*b, t, o, nullptr));
}

TEST(WeightPrecision, RefusedWithoutTiles) {
  TempGguf file(FloatTypes(), "wprec_refuse");
  if (detail::AmxBf16Usable()) {
    EXPECT_NO_THROW(Model::Load(file.path, kBf16Weights));
    return;
  }
  try {
    Model::Load(file.path, kBf16Weights);
    FAIL() << "expected kvshare::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("AMX tiles"), std::string::npos) << msg;
    EXPECT_NE(msg.find(detail::AmxBf16UnusableReason()), std::string::npos) << msg;
    EXPECT_NE(msg.find("use weight precision f32"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kvshare
