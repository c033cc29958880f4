// Sentence embeddings with the model on the GPU (Model::Embed of
// MoveModelToCuda's model, src/cuda_model/embed_cuda.cc) against the CPU
// model's. Skipped without a GPU. Models (the parameter's first part):
//   embedding_gemma  tests/fixtures/embedding_gemma/tiny.f32.gguf: every layer
//                    bidirectional, sliding layers with the symmetric window
//                    |p - j| <= 4, mean pooling, dense 64 -> 128 -> 64
//   gemma3           model_tiny_gemma.h: a decoder's pooled causal states
//   gemma4_e         model_tiny_gemma4.h (per-layer inputs, KV-shared layers;
//                    q / k norms scaled by H^-1/4, ScaleQkNorms)
// and the weights on the device (fp32 or bf16).
//   CudaEmbedHarness.CpuAgainstItself: the comparisons below with the CPU
//     model on both sides (exact), everywhere.
//   CudaEmbedDevice.FollowsTheCpuModel: inputs of 1, 4, 9, 17 and 40 tokens
//     (one token; within, across and far past the window), embedded in one
//     call (one group: a batched step of five rows), one by one
//     (step_tokens 1: a step per input) and cut to 16 dimensions; mean and
//     last pooling for the decoders. Every vector within 1e-4 (fp32) or
//     3e-2 (bf16) of the CPU's, relative to its largest value
//     (cuda_model_compare.h's tolerances); the GPU's grouped and one-by-one
//     vectors within the same of each other. The pooling and the dense head
//     run on the host in the CPU's arithmetic, so an error here comes from
//     the layers: when only embedding_gemma fails, the bidirectional or
//     symmetric-window attention on the device is the suspect
//     (CudaGqaDevice.SymmetricWindowMatchesCpuReference checks the op alone).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common_record_measured.h"
#include "common_source_path.h"
#include "cuda_model_compare.h"
#include "cuda_test_util.h"
#include "kvshare/cuda_model/model_cuda.h"
#include "model_tiny_gemma.h"
#include "model_tiny_gemma4.h"

namespace kvshare::testing {
namespace {

using Param = std::tuple<std::string, DType>;  // model, device weights

// The path of model `name` (the list above); *file keeps a written one.
std::string ModelPath(const std::string& name, std::unique_ptr<TempGguf>* file) {
  std::string path;
  if (name == "embedding_gemma") {
    path = SourcePath("tests/fixtures/embedding_gemma/tiny.f32.gguf");
  } else if (name == "gemma3") {
    *file = std::make_unique<TempGguf>(TinyGemmaSpec{}, "cuda_embed");
    path = (*file)->path;
  } else {
    TinyGemma4Spec s;
    s.edit = ScaleQkNorms;
    *file = std::make_unique<TempGguf>("cuda_embed_gemma4", [s](const std::string& p) { WriteTinyGemma4(p, s); });
    path = (*file)->path;
  }
  return path;
}

// The comparisons of FollowsTheCpuModel: `got` (the GPU model) against `want`
// (the CPU model) within tol, `what` naming the case.
void ExpectEmbeddingsFollow(const Model& got_model, const Model& want_model, double tol, const std::string& what) {
  const ModelConfig& c = want_model.config();
  const int D = c.embedding_dim > 0 ? c.embedding_dim : c.n_embd;
  std::vector<std::vector<std::int32_t>> inputs;
  unsigned seed = 5;
  for (const int n : {1, 4, 9, 17, 40}) inputs.push_back(Tokens(n, c.n_vocab, seed++));
  const auto expect_close = [&](const std::vector<float>& got, const std::vector<float>& want, int width,
                                const std::string& how) {
    const RowsDiff d = CompareRows(got, want, width, tol);
    EXPECT_LE(d.worst, tol) << what << ", " << how << ": " << Describe(d)
                            << " (rows: the inputs of 1, 4, 9, 17, 40 tokens in order)";
    RecordMeasured("%s, %s: largest relative embedding error %.3g (absolute %.3g)\n", what.c_str(), how.c_str(),
                   d.worst, d.max_abs);
  };
  std::vector<std::optional<Pooling>> poolings = {std::nullopt};  // the file's (EmbeddingGemma: mean)
  if (c.causal) poolings = {Pooling::kMean, Pooling::kLast};
  for (const std::optional<Pooling>& p : poolings) {
    const std::string how = p ? std::string(PoolingName(*p)) + " pooling" : "the file's pooling";
    const EmbedOptions together{.pooling = p};
    const EmbedOptions alone{.pooling = p, .step_tokens = 1};
    const std::vector<float> want = want_model.Embed(inputs, together, nullptr);
    const std::vector<float> got = got_model.Embed(inputs, together, nullptr);
    ASSERT_EQ(got.size(), inputs.size() * static_cast<std::size_t>(D)) << what << ", " << how;
    expect_close(got, want, D, how + ", one group");
    const std::vector<float> one_by_one = got_model.Embed(inputs, alone, nullptr);
    expect_close(one_by_one, want, D, how + ", one input per step");
    expect_close(one_by_one, got, D, how + ", one input per step vs one group");
    const EmbedOptions cut{.pooling = p, .dimensions = 16};
    expect_close(got_model.Embed(inputs, cut, nullptr), want_model.Embed(inputs, cut, nullptr), 16,
                 how + ", 16 dimensions");
  }
  // The CPU's checks, unchanged.
  EXPECT_NE(ErrorOf([&] { got_model.Embed(std::vector<std::vector<std::int32_t>>(1), {.pooling = Pooling::kMean},
                                          nullptr); })
                .find("input 0 is empty"),
            std::string::npos)
      << what;
  if (!c.causal) {  // an encoder computes no logits
    auto st = got_model.NewState({.max_context = 8});
    const std::vector<std::int32_t> t = {1, 2};
    EXPECT_NE(ErrorOf([&] { got_model.Forward(*st, t, nullptr, {}); }).find("is an embedding model"),
              std::string::npos)
        << what;
  }
}

// The harness on the CPU model against itself (runs everywhere): every
// comparison holds exactly, with the fixtures loaded as on a GPU.
TEST(CudaEmbedHarness, CpuAgainstItself) {
  for (const std::string name : {"embedding_gemma", "gemma3", "gemma4_e"}) {
    std::unique_ptr<TempGguf> file;
    const std::unique_ptr<Model> m = Model::Load(ModelPath(name, &file));
    ExpectEmbeddingsFollow(*m, *m, 0.0, name + " CPU vs CPU");
  }
}

class CudaEmbedDevice : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
    const std::string path = ModelPath(std::get<0>(GetParam()), &file_);
    cpu_ = Model::Load(path);
    gpu_ = MoveModelToCuda(Model::Load(path), {.weights = std::get<1>(GetParam())});
  }

  std::unique_ptr<TempGguf> file_;
  std::unique_ptr<Model> cpu_, gpu_;
};

TEST_P(CudaEmbedDevice, FollowsTheCpuModel) {
  const DType w = std::get<1>(GetParam());
  ExpectEmbeddingsFollow(*gpu_, *cpu_, ModelTolerance(w), std::get<0>(GetParam()) + " " + DTypeName(w));
}

INSTANTIATE_TEST_SUITE_P(Models, CudaEmbedDevice,
                         ::testing::Combine(::testing::Values("embedding_gemma", "gemma3", "gemma4_e"),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::get<0>(info.param) + "_" +
                                  (std::get<1>(info.param) == DType::kFloat32 ? "fp32" : "bf16");
                         });

}  // namespace
}  // namespace kvshare::testing
