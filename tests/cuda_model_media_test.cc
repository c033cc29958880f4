// Images and audio with the model on the GPU (MoveModelToCuda, model_cuda.h):
// embedding spans (EmbeddingSpan: host rows over a prompt's tokens, some
// bidirectional) and Gemma 3n's hard-token rows (Model::SetHardTokenRows)
// against the CPU model, on the tiny random fixtures of the CPU tests.
// Skipped without a GPU. Fixtures (the parameter's first part):
//   gemma3        model_tiny_gemma.h: an image's tokens see each other on
//                 every layer (Gemma 3's image attention)
//   gemma3n       model_tiny_gemma3n.h: causal images; per-layer inputs of
//                 span tokens take id 0
//   gemma4_e      model_tiny_gemma4.h, per-layer inputs and KV-shared layers
//                 (E2B's shape): causal images, per-layer id 0
//   gemma4_large  the same without per-layer inputs: images bidirectional on
//                 the sliding layers (26B / 31B)
// and the weights' dtype on the device (second part: fp32 or bf16); the
// Gemma 3n / 4 fixtures' q / k norms scaled by H^-1/4 (ScaleQkNorms).
//   CudaModelMediaDevice.SpansFollowTheCpuModel: 20 tokens in chunks of 6
//     with a bidirectional span [4, 9) (one step: the chunk before it is cut
//     at 4) and a causal one [10, 17) (split over two steps), all logits,
//     then one text decode step; again keeping 2 logits (the prefill cut);
//     each with the family's image attention and with every layer
//     bidirectional (ModelStateOptions::image_attention). Every logits row
//     within 1e-4 (fp32) or 3e-2 (bf16) of the CPU's; the CPU's own runs
//     must show the spans matter (rows, overlay), so an ignored span fails.
//   CudaModelMediaDevice.BatchWithATextRowFollowsTheCpuModel: one
//     ForwardBatch of a row with both spans (after 3 cached tokens) and a
//     text decode row equals the CPU's batch and its rows run alone.
//   CudaGemma3nHardTokensDevice.FollowTheCpuModel: hard-token rows for ids
//     [V - 8, V) on both models; a prompt with such ids (and a span), then
//     decode steps feeding hard ids, within the tolerance of the CPU's; the
//     CPU's logits with the rows differ from those without.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "common_test_util.h"
#include "cuda_model_compare.h"
#include "cuda_test_util.h"
#include "kvshare/cuda_model/model_cuda.h"
#include "model_tiny_gemma.h"
#include "model_tiny_gemma3n.h"
#include "model_tiny_gemma4.h"

namespace kvshare::testing {
namespace {

// Writes fixture `name` (the list above) to a path.
std::function<void(const std::string&)> Writer(const std::string& name) {
  if (name == "gemma3") return [](const std::string& p) { WriteTinyGemma(p, TinyGemmaSpec{}); };
  if (name == "gemma3n") {
    TinyGemma3nSpec s;
    s.edit = ScaleQkNorms;
    return [s](const std::string& p) { WriteTinyGemma3n(p, s); };
  }
  TinyGemma4Spec s;
  s.edit = ScaleQkNorms;
  if (name == "gemma4_large") s.ple = 0;
  return [s](const std::string& p) { WriteTinyGemma4(p, s); };
}

std::vector<float> RandomRows(std::int64_t n, int width, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<std::size_t>(n * width));
  for (float& e : v) e = d(rng);
  return v;
}

std::vector<float> Copy(std::span<const float> s) { return {s.begin(), s.end()}; }

// A prompt's logits (the last num_logits) and one text decode step's, on a
// fresh state of m.
std::vector<float> Logits(const Model& m, const ModelStateOptions& o, const std::vector<std::int32_t>& tokens,
                       std::span<const EmbeddingSpan> spans, std::int64_t num_logits, std::int32_t next) {
  auto st = m.NewState(o);
  std::vector<float> out = Copy(m.Forward(*st, tokens, nullptr, {.num_logits = num_logits, .embeddings = spans}));
  const std::vector<float> step = Copy(m.Forward(*st, std::span(&next, 1), nullptr, {}));
  out.insert(out.end(), step.begin(), step.end());
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, std::int64_t V, double tol,
                 const std::string& what) {
  const RowsDiff d = CompareRows(got, want, V, tol);
  EXPECT_LE(d.worst, tol) << what << ": " << Describe(d);
  RecordMeasured("%s: largest relative logits error %.3g\n", what.c_str(), d.worst);
}

using Param = std::tuple<std::string, DType>;  // fixture, device weights

class CudaModelMediaDevice : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
    const std::string name = std::get<0>(GetParam());
    file_ = std::make_unique<TempGguf>("cuda_media_" + name, Writer(name));
    cpu_ = Model::Load(file_->path);
    gpu_ = MoveModelToCuda(Model::Load(file_->path), {.weights = std::get<1>(GetParam())});
    E_ = cpu_->config().n_embd;
    V_ = cpu_->config().n_vocab;
    bidi_rows_ = RandomRows(5, E_, 11);
    causal_rows_ = RandomRows(7, E_, 12);
    spans_ = {{.begin = 4, .count = 5, .rows = bidi_rows_.data(), .bidirectional = true},
              {.begin = 10, .count = 7, .rows = causal_rows_.data(), .bidirectional = false}};
  }
  std::string What(const std::string& how) const {
    return std::get<0>(GetParam()) + " " + DTypeName(std::get<1>(GetParam())) + ": " + how;
  }
  double Tolerance() const { return ModelTolerance(std::get<1>(GetParam())); }
  ModelStateOptions Options(int max_batch = 1) const { return DeviceTestOptions(std::get<1>(GetParam()), max_batch); }

  std::unique_ptr<TempGguf> file_;
  std::unique_ptr<Model> cpu_, gpu_;
  int E_ = 0, V_ = 0;
  std::vector<float> bidi_rows_, causal_rows_;
  std::vector<EmbeddingSpan> spans_;
};

TEST_P(CudaModelMediaDevice, SpansFollowTheCpuModel) {
  const std::vector<std::int32_t> t = Tokens(20, V_, 21);
  const std::int32_t next = Tokens(1, V_, 22)[0];
  const ImageAttention family = cpu_->config().image_attention;
  std::vector<ImageAttention> modes = {family};
  if (family != ImageAttention::kAllLayers) modes.push_back(ImageAttention::kAllLayers);
  for (const ImageAttention mode : modes) {
    ModelStateOptions o = Options();
    o.image_attention = mode;
    ModelStateOptions causal_o = o;
    causal_o.image_attention = ImageAttention::kCausal;
    for (const std::int64_t keep : {std::int64_t{20}, std::int64_t{2}}) {
      const std::string what = What(std::string("image attention ") + ImageAttentionName(mode) + ", " +
                                    std::to_string(keep) + " logits kept");
      const std::vector<float> want = Logits(*cpu_, o, t, spans_, keep, next);
      // The CPU run must depend on the rows and, where images are
      // bidirectional, on the overlay: else this case would not test them.
      EXPECT_GT(MaxRelDiff(want, Logits(*cpu_, o, t, {}, keep, next)), 1e-3) << what << ": the spans change nothing";
      if (mode != ImageAttention::kCausal) {
        EXPECT_GT(MaxRelDiff(want, Logits(*cpu_, causal_o, t, spans_, keep, next)), 1e-4)
            << what << ": the bidirectional overlay changes nothing";
      }
      ExpectClose(Logits(*gpu_, o, t, spans_, keep, next), want, V_, Tolerance(), what);
    }
  }
}

// The logits of one ForwardBatch on a fresh state of m after each row's
// history.
std::vector<float> BatchLogits(const Model& m, const ModelStateOptions& o,
                               const std::vector<std::vector<std::int32_t>>& history,
                               const std::vector<BatchEntry>& entries) {
  auto st = m.NewState(o);
  for (std::size_t r = 0; r < history.size(); ++r) {
    if (!history[r].empty())
      m.ForwardBatch(*st, std::vector<BatchEntry>{{.row = static_cast<int>(r), .tokens = history[r]}}, nullptr);
  }
  return Copy(m.ForwardBatch(*st, entries, nullptr));
}

// Row 0 holds 3 tokens and takes 20 more with both spans (all logits); row
// 1 holds 4 and decodes one text token; row 2 stays empty.
TEST_P(CudaModelMediaDevice, BatchWithATextRowFollowsTheCpuModel) {
  const ModelStateOptions o = Options(3);
  const std::vector<std::vector<std::int32_t>> history = {Tokens(3, V_, 31), Tokens(4, V_, 32), {}};
  const std::vector<std::int32_t> prompt = Tokens(20, V_, 33), one = Tokens(1, V_, 34);
  const std::vector<BatchEntry> entries = {{.row = 1, .tokens = one},
                                           {.row = 0, .tokens = prompt, .num_logits = 20, .embeddings = spans_}};
  ExpectClose(BatchLogits(*gpu_, o, history, entries), BatchLogits(*cpu_, o, history, entries), V_, Tolerance(),
              What("batch of an image row and a text row vs the CPU"));
  ExpectBatchEqualsAlone(*gpu_, o, history, entries, Tolerance(), What("batch vs rows alone"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaModelMediaDevice,
                         ::testing::Combine(::testing::Values("gemma3", "gemma3n", "gemma4_e", "gemma4_large"),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::get<0>(info.param) + "_" +
                                  (std::get<1>(info.param) == DType::kFloat32 ? "fp32" : "bf16");
                         });

class CudaGemma3nHardTokensDevice : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
  }
};

TEST_P(CudaGemma3nHardTokensDevice, FollowTheCpuModel) {
  const TempGguf file("cuda_media_hard", Writer("gemma3n"));
  const std::unique_ptr<Model> cpu = Model::Load(file.path);
  const std::unique_ptr<Model> gpu = MoveModelToCuda(Model::Load(file.path), {.weights = GetParam()});
  const int E = cpu->config().n_embd, V = cpu->config().n_vocab;
  const ModelStateOptions o = DeviceTestOptions(GetParam());
  std::vector<std::int32_t> t = Tokens(16, V, 41);
  for (const int i : {2, 3, 9, 14}) t[static_cast<std::size_t>(i)] = V - 8 + i % 8;  // hard ids
  const std::vector<float> rows = RandomRows(5, E, 42);
  const EmbeddingSpan span[] = {{.begin = 5, .count = 3, .rows = rows.data()}};
  const std::vector<std::int32_t> fed = {V - 1, Tokens(1, V, 43)[0], V - 8};
  const auto run = [&](const Model& m) {
    auto st = m.NewState(o);
    std::vector<float> out =
        Copy(m.Forward(*st, t, nullptr, {.num_logits = static_cast<std::int64_t>(t.size()), .embeddings = span}));
    for (const std::int32_t id : fed) {
      const std::vector<float> step = Copy(m.Forward(*st, std::span(&id, 1), nullptr, {}));
      out.insert(out.end(), step.begin(), step.end());
    }
    return out;
  };
  const std::vector<float> without = run(*cpu);
  const std::vector<HardTokenRows> hard = {{.first = V - 8, .rows = RandomRows(8, E, 44)}};
  cpu->SetHardTokenRows(hard);
  gpu->SetHardTokenRows(hard);
  ASSERT_NE(gpu->hard_token_rows(), nullptr);
  const std::vector<float> want = run(*cpu);
  EXPECT_GT(MaxRelDiff(want, without), 1e-3) << "the hard-token rows change nothing";
  ExpectClose(run(*gpu), want, V, ModelTolerance(GetParam()),
              std::string("gemma3n hard tokens ") + DTypeName(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Weights, CudaGemma3nHardTokensDevice, ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return info.param == DType::kFloat32 ? "fp32" : "bf16";
                         });

}  // namespace
}  // namespace kvshare::testing
