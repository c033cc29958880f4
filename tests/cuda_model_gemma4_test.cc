// Gemma 4 on the GPU (MoveModelToCuda, model_cuda.h) against the CPU model on
// the tiny random fixtures of the CPU tests (model_tiny_gemma4.h). Skipped
// without a GPU. Fixtures (the parameter's first part):
//   ple_shared  per-layer embeddings, 3 KV-shared layers, double-wide MLP,
//               layer scales, proportional RoPE, softcap (the E2B shape)
//   plain       no sharing, no per-layer embeddings
//   k_eq_v      full layers without attn_v (V = raw K), 1 KV head on full
//               layers and 2 on sliding ones (per-layer KV heads)
//   moe         every layer MoE (4 experts, top 2) plus the dense MLP
// and the weights' dtype on the device (second part: fp32 or bf16). Every
// fixture's q / k norms are scaled by H^-1/4 (ScaleQkNorms).
//   CudaGemma4Device.LogitsFollowTheCpuModel: a 13-token prefill in chunks of
//     6 (all logits) and 7 decode steps, then a rewind and one more decode:
//     every logits row within 1e-4 (fp32 weights, fp32 cache) or 3e-2 (bf16
//     weights and cache; 0.15 for k_eq_v: CpuTolerance) of the CPU model's;
//     greedy tokens equal where the CPU's top-2 margin exceeds twice the
//     tolerance. bf16 MoE may route a
//     near-tie differently: up to a quarter of its rows may exceed the
//     tolerance. On failure the message gives the largest absolute and
//     relative error, the first wrong element and the per-layer residual
//     divergence of the prefill (DecoderState::layer_probe).
//   CudaGemma4Device.BatchedStepEqualsRowsAlone: a decode row, a prompt chunk
//     over two steps and a new prompt in one ForwardBatch equal their rows
//     run alone (same tolerances).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_model_compare.h"
#include "cuda_test_util.h"
#include "kvshare/cuda_model/model_cuda.h"
#include "model_tiny_gemma4.h"

namespace kvshare::testing {
namespace {

TinyGemma4Spec FixtureSpec(const std::string& name) {
  TinyGemma4Spec s;
  s.edit = ScaleQkNorms;
  if (name == "plain") {
    s.shared = 0;
    s.ple = 0;
  } else if (name == "k_eq_v") {
    s.k_eq_v = true;
    s.kv_full = 1;
  } else if (name == "moe") {
    s.experts = 4;
    s.experts_used = 2;
    s.shared = 0;
    s.ple = 0;
  }
  return s;
}

using Param = std::tuple<std::string, DType>;  // fixture, device weights

class CudaGemma4Device : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
  }
  std::string Fixture() const { return std::get<0>(GetParam()); }
  DType Weights() const { return std::get<1>(GetParam()); }
  bool Fp32() const { return Weights() == DType::kFloat32; }
  double Tolerance() const { return ModelTolerance(Weights()); }
  // Against the CPU model: k_eq_v's random fixture (one KV head on full
  // layers, V = raw K) amplifies bf16 rounding. The CPU model with its
  // weights and every projection input rounded to bf16, as the GPU rounds
  // them (a by-hand run, not a test), left it 0.078 from the fp32 CPU run
  // (7 of 24 rows past 3e-2), the other fixtures 0.015 (ple_shared), 0.006
  // (plain), 0.007 (moe), and Gemma 3n 0.015. Twice that measured error for
  // it; fp32 weights check its logic to 1e-4.
  double CpuTolerance() const { return !Fp32() && Fixture() == "k_eq_v" ? 0.15 : Tolerance(); }
  ModelStateOptions Options(int max_batch = 1) const { return DeviceTestOptions(Weights(), max_batch); }
};

TEST_P(CudaGemma4Device, LogitsFollowTheCpuModel) {
  const TinyGemma4Spec spec = FixtureSpec(Fixture());
  const TempGguf file = TempGemma4(spec, "cuda_" + Fixture());
  const std::unique_ptr<Model> cpu = Model::Load(file.path);
  const std::unique_ptr<Model> gpu = MoveModelToCuda(Model::Load(file.path), {.weights = Weights()});
  const bool moe_bf16 = Fixture() == "moe" && !Fp32();  // near-ties may route differently
  ExpectFollowsCpu(*cpu, *gpu, Options(), Tokens(20, spec.n_vocab, 3),
                   {.tolerance = CpuTolerance(),
                    .bad_rows_allowed = moe_bf16 ? 0.25 : 0.0,
                    .greedy = !moe_bf16,
                    .what = "gemma4 " + Fixture() + " " + DTypeName(Weights())});
}

// Rows 0 and 1 hold 7 and 3 tokens; the step decodes row 1, runs 8 more tokens
// of row 0 (chunks of 6 and 2, all logits) and a new 5-token prompt on row 3
// (its last 2 logits); row 2 stays empty.
TEST_P(CudaGemma4Device, BatchedStepEqualsRowsAlone) {
  const TinyGemma4Spec spec = FixtureSpec(Fixture());
  const TempGguf file = TempGemma4(spec, "cuda_batch_" + Fixture());
  const std::unique_ptr<Model> gpu = MoveModelToCuda(Model::Load(file.path), {.weights = Weights()});
  const int V = spec.n_vocab;
  const std::vector<std::vector<std::int32_t>> history = {Tokens(7, V, 1), Tokens(3, V, 2), {}, {}};
  const std::vector<std::int32_t> one = Tokens(1, V, 3), eight = Tokens(8, V, 4), five = Tokens(5, V, 5);
  const std::vector<BatchEntry> entries = {{.row = 1, .tokens = one},
                                           {.row = 0, .tokens = eight, .num_logits = 8},
                                           {.row = 3, .tokens = five, .num_logits = 2}};
  ExpectBatchEqualsAlone(*gpu, Options(4), history, entries, Tolerance(), "gemma4 " + Fixture());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGemma4Device,
                         ::testing::Combine(::testing::Values("ple_shared", "plain", "k_eq_v", "moe"),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) == DType::kFloat32 ? "_fp32" : "_bf16");
                         });

}  // namespace
}  // namespace kvshare::testing
