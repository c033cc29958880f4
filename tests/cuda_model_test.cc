// MoveModelToCuda (model_cuda.h) on Gemma 3 (its errors without a GPU:
// tests/cuda_model_plan_test.cc).
//  - On a GPU (skipped without one), a tiny random Gemma 3 (sliding layers on
//    rings, full layers, two KV-shared layers, F32 / Q8_0 / F16 weights):
//    CudaModelDevice.LogitsFollowTheReference: logits follow the no-cache
//    double-precision reference (model_tiny_gemma.h) within bf16 rounding,
//    teacher-forced through a chunked prefill and single-token decode steps,
//    for float32 / float16 / bfloat16 caches, and after a rewind; a row twice
//    in one batch is an error.
//    CudaModelBatch.StepEqualsRowsAlone: a batched step (a decode row, a
//    prompt chunk over two steps, a new prompt, rows in any order) equals its
//    rows run alone, with fp32 weights (1e-4) and bf16 weights (3e-2).
//    CudaModelCpu.Fp32WeightsMatchTheCpuModel: with fp32 weights a batched
//    step equals the CPU model's within 1e-4 (logits and hidden()), and so
//    does a teacher-forced run with a rewind and the prefill cut
//    (ExpectFollowsCpu); layer by layer on failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "common_record_measured.h"
#include "cuda_model_compare.h"
#include "cuda_test_util.h"
#include "kvshare/cuda_model/model_cuda.h"
// GCC 12 reports a false -Wstringop-overflow inside std::vector::insert as
// inlined into the tests' GGUF writer here (as in bench/cuda_model_bench.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#include "model_tiny_gemma.h"
#pragma GCC diagnostic pop

namespace kvshare::testing {
namespace {

TinyGemmaSpec Spec() {
  TinyGemmaSpec s;
  s.types = {GgmlType::kF32, GgmlType::kQ8_0, GgmlType::kF16};
  s.shared_kv_layers = 2;
  return s;
}

class CudaModelDevice : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
  }
};

// Largest |got - want| of a logits row over the row's largest |want|.
double RowError(std::span<const float> got, const double* want, int n) {
  double diff = 0.0, scale = 1e-30;
  for (int i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(got[static_cast<std::size_t>(i)] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return diff / scale;
}

TEST_P(CudaModelDevice, LogitsFollowTheReference) {
  const TinyGemmaSpec spec = Spec();
  const TempGguf file(spec, "cuda_logits");
  const std::vector<std::int32_t> tokens = Tokens(20, spec.n_vocab, 3);
  const std::vector<double> ref = ReferenceLogits(*Model::Load(file.path), tokens, spec.shared_kv_layers);
  const std::unique_ptr<Model> gpu = MoveModelToCuda(Model::Load(file.path));
  const int V = spec.n_vocab;
  auto st = gpu->NewState({.max_context = 32, .max_step = 6, .kv_dtype = GetParam()});
  // bf16 weights and projection inputs (8 significant bits).
  constexpr double kTolerance = 3e-2;
  double worst = 0.0;
  // A 13-token prefill in one call (chunks of 6, 6, 1), every position's logits.
  const std::int64_t P = 13;
  const std::span<const float> pre =
      gpu->Forward(*st, std::span<const std::int32_t>(tokens.data(), P), nullptr, {.num_logits = P});
  ASSERT_EQ(pre.size(), static_cast<std::size_t>(P * V));
  for (std::int64_t t = 0; t < P; ++t) {
    const double e =
        RowError(pre.subspan(static_cast<std::size_t>(t * V), static_cast<std::size_t>(V)), &ref[t * V], V);
    EXPECT_LT(e, kTolerance) << "prefill position " << t;
    worst = std::max(worst, e);
  }
  // Decode the rest one token at a time.
  for (std::size_t t = P; t < tokens.size(); ++t) {
    const std::span<const float> got = gpu->Forward(*st, std::span<const std::int32_t>(&tokens[t], 1), nullptr);
    const double e = RowError(got, &ref[t * V], V);
    EXPECT_LT(e, kTolerance) << "decode position " << t;
    worst = std::max(worst, e);
  }
  EXPECT_EQ(st->length(), static_cast<std::int64_t>(tokens.size()));
  testing::RecordMeasured("CudaModel %s cache: largest relative logits error %.3g over %zu positions\n",
                          DTypeName(GetParam()), worst, tokens.size());
  // Rewind and decode again.
  st->Rewind(0, 15);
  const std::span<const float> again = gpu->Forward(*st, std::span<const std::int32_t>(&tokens[15], 1), nullptr);
  EXPECT_LT(RowError(again, &ref[15 * V], V), kTolerance);
  EXPECT_EQ(st->length(), 16);

  const BatchEntry two[] = {{.row = 0, .tokens = std::span<const std::int32_t>(tokens.data(), 1)},
                            {.row = 0, .tokens = std::span<const std::int32_t>(tokens.data(), 1)}};
  const std::string msg = ErrorOf([&] { gpu->ForwardBatch(*st, two, nullptr); });
  EXPECT_NE(msg.find("appears twice"), std::string::npos) << msg;
}

std::string DTypeParamName(const ::testing::TestParamInfo<DType>& info) { return DTypeName(info.param); }

INSTANTIATE_TEST_SUITE_P(CacheDtypes, CudaModelDevice,
                         ::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16), DTypeParamName);

class CudaModelBatch : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
  }
  double Tolerance() const { return ModelTolerance(GetParam()); }
};

// Rows 0 and 1 hold 7 and 3 tokens; the step decodes row 1, runs 6 more
// tokens of row 0 (two chunks of 4 and 2, all logits) and a new 5-token prompt
// on row 3 (its last 2 logits); row 2 stays empty (padding of the packed
// attention call).
TEST_P(CudaModelBatch, StepEqualsRowsAlone) {
  const TinyGemmaSpec spec = Spec();
  const TempGguf file(spec, "cuda_batch");
  const std::unique_ptr<Model> gpu = MoveModelToCuda(Model::Load(file.path), {.weights = GetParam()});
  const ModelStateOptions o{.max_context = 32, .max_step = 4, .max_batch = 4};
  const std::vector<std::vector<std::int32_t>> history = {
      Tokens(7, spec.n_vocab, 1), Tokens(3, spec.n_vocab, 2), {}, {}};
  const std::vector<std::int32_t> one = Tokens(1, spec.n_vocab, 3), six = Tokens(6, spec.n_vocab, 4),
                                  five = Tokens(5, spec.n_vocab, 5);
  const std::vector<BatchEntry> entries = {{.row = 1, .tokens = one},
                                           {.row = 0, .tokens = six, .num_logits = 6},
                                           {.row = 3, .tokens = five, .num_logits = 2}};
  ExpectBatchEqualsAlone(*gpu, o, history, entries, Tolerance(), "gemma3");
}

// With fp32 weights the GPU model is the CPU model up to summation order:
// every logit of a chunked prefill and a batched step within 1e-4.
TEST(CudaModelCpu, Fp32WeightsMatchTheCpuModel) {
  std::string why;
  if (!GpuUsable(&why)) GTEST_SKIP() << why;
  TinyGemmaSpec spec = Spec();
  spec.types = {GgmlType::kF32};  // the CPU's quantized kernels would round activations to int8
  const TempGguf file(spec, "cuda_cpu");
  const std::unique_ptr<Model> cpu = Model::Load(file.path);
  const std::unique_ptr<Model> gpu = MoveModelToCuda(Model::Load(file.path), {.weights = DType::kFloat32});
  const ModelStateOptions o{.max_context = 32, .max_step = 5, .max_batch = 2};
  const std::vector<std::int32_t> a = Tokens(12, spec.n_vocab, 6), b = Tokens(4, spec.n_vocab, 7);
  const std::vector<BatchEntry> entries = {{.row = 1, .tokens = b, .num_logits = 4},
                                           {.row = 0, .tokens = a, .num_logits = 12}};
  auto cs = cpu->NewState(o);
  auto gs = gpu->NewState(o);
  const std::span<const float> want = cpu->ForwardBatch(*cs, entries, nullptr);
  const std::vector<float> w(want.begin(), want.end());
  const std::span<const float> got = gpu->ForwardBatch(*gs, entries, nullptr);
  const RowsDiff d = CompareRows(got, w, spec.n_vocab, kFp32ModelTolerance);
  EXPECT_LE(d.worst, kFp32ModelTolerance) << Describe(d) << "\n"
                                          << LayerDivergence(*cpu, *gpu, o, a, kFp32ModelTolerance);
  const RowsDiff h = CompareRows(gs->hidden(), cs->hidden(), spec.n_embd, kFp32ModelTolerance);
  EXPECT_LE(h.worst, kFp32ModelTolerance) << "hidden(): " << Describe(h);
  RecordMeasured("CudaModelBatch fp32 weights: largest relative logits error vs the CPU %.3g", d.worst);
  // Teacher-forced, with a rewind and the prefill cut (two KV-shared layers).
  ExpectFollowsCpu(*cpu, *gpu, {.max_context = 32, .max_step = 6}, Tokens(20, spec.n_vocab, 8),
                   {.tolerance = kFp32ModelTolerance, .what = "gemma3 fp32"});
}

INSTANTIATE_TEST_SUITE_P(Weights, CudaModelBatch, ::testing::Values(DType::kFloat32, DType::kBFloat16), DTypeParamName);

}  // namespace
}  // namespace kvshare::testing
