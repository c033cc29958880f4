// Gemma 3n on the GPU (MoveModelToCuda, model_cuda.h) against the CPU model on
// the tiny random fixture of the CPU tests (model_tiny_gemma3n.h: 4 AltUp
// streams, Laurel rank 8, per-layer inputs, activation sparsity on the first
// two layers, 2 KV-shared layers, softcap), its q / k norms scaled by H^-1/4
// (ScaleQkNorms). Skipped without a GPU. The parameter: the weights' dtype on
// the device.
//   Weights/CudaGemma3nDevice.LogitsFollowTheCpuModel: a 13-token prefill in
//     chunks of 6 (all logits), 7 decode steps, a rewind and one more decode:
//     every logits row within 1e-4 (fp32 weights and cache) or 3e-2 (bf16) of
//     the CPU's, greedy tokens equal where the margin is clear; on failure the
//     per-layer divergence of the active AltUp stream.
//   Weights/CudaGemma3nDevice.BatchedStepEqualsRowsAlone: a decode row, a
//     prompt chunk over two steps and a new prompt in one ForwardBatch equal
//     their rows run alone.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda_model_compare.h"
#include "cuda_test_util.h"
#include "kvshare/cuda_model/model_cuda.h"
#include "model_tiny_gemma3n.h"

namespace kvshare::testing {
namespace {

class CudaGemma3nDevice : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
    spec_.edit = ScaleQkNorms;
  }
  double Tolerance() const { return ModelTolerance(GetParam()); }
  ModelStateOptions Options(int max_batch = 1) const { return DeviceTestOptions(GetParam(), max_batch); }
  TinyGemma3nSpec spec_;
};

TEST_P(CudaGemma3nDevice, LogitsFollowTheCpuModel) {
  const TempGguf file = TempGemma3n(spec_, "cuda_logits");
  const std::unique_ptr<Model> cpu = Model::Load(file.path);
  const std::unique_ptr<Model> gpu = MoveModelToCuda(Model::Load(file.path), {.weights = GetParam()});
  ExpectFollowsCpu(*cpu, *gpu, Options(), Tokens(20, spec_.n_vocab, 3),
                   {.tolerance = Tolerance(), .what = std::string("gemma3n ") + DTypeName(GetParam())});
}

// Rows 0 and 1 hold 7 and 3 tokens; the step decodes row 1, runs 8 more tokens
// of row 0 (chunks of 6 and 2, all logits) and a new 5-token prompt on row 3
// (its last 2 logits); row 2 stays empty.
TEST_P(CudaGemma3nDevice, BatchedStepEqualsRowsAlone) {
  const TempGguf file = TempGemma3n(spec_, "cuda_batch");
  const std::unique_ptr<Model> gpu = MoveModelToCuda(Model::Load(file.path), {.weights = GetParam()});
  const int V = spec_.n_vocab;
  const std::vector<std::vector<std::int32_t>> history = {Tokens(7, V, 1), Tokens(3, V, 2), {}, {}};
  const std::vector<std::int32_t> one = Tokens(1, V, 3), eight = Tokens(8, V, 4), five = Tokens(5, V, 5);
  const std::vector<BatchEntry> entries = {{.row = 1, .tokens = one},
                                           {.row = 0, .tokens = eight, .num_logits = 8},
                                           {.row = 3, .tokens = five, .num_logits = 2}};
  ExpectBatchEqualsAlone(*gpu, Options(4), history, entries, Tolerance(), "gemma3n");
}

INSTANTIATE_TEST_SUITE_P(Weights, CudaGemma3nDevice, ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) { return DTypeName(info.param); });

}  // namespace
}  // namespace kvshare::testing
