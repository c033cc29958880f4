// The vision encoders' bidirectional attention at real geometry, one layer on
// one thread (docs/vision.md "Precision"): the GQA op (causal = 0, S queries
// over the same S keys) with bf16 products (GqaMatMulPrecision::kBf16, the
// bf16 path's call), with bf16 Q, K, V and output through the f32 kernel
// (the conversions included), and in f32 (the f32 path's call).
//
// Shapes: siglip = Gemma 3 4B's SigLIP at 896 px (4096 tokens, 16 heads of
// 72); gemma4v = Gemma 4 E2B's encoder on a 768 x 768 image (2304 tokens, 12
// heads of 64). Counter FLOPS = 4 * S^2 * heads * hd per call (Q K^T and P V).
//
//   build/bench/kvshare_bench --benchmark_filter=VisionAttention --benchmark_format=json
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvshare/attention/gqa.h"
#include "kvshare/common/tensor.h"
#include "vision/bf16_matmul.h"
#include "vision/bf16_rows.h"

namespace {

using kvshare::ConstTensorView;
using kvshare::DType;
using kvshare::TensorView;

struct Shape {
  std::int64_t S;
  int heads, hd;
  float scale;
};

constexpr Shape kShapes[] = {{4096, 16, 72, 0.11785113f}, {2304, 12, 64, 1.0f}};

enum Path { kOpBf16Mm, kOpBf16, kOpF32 };

void BM_VisionAttention(benchmark::State& state) {
  const Shape& sh = kShapes[state.range(0)];
  const auto path = static_cast<Path>(state.range(1));
  if (path == kOpBf16Mm && !kvshare::detail::Bf16MatMulSupported()) {
    state.SkipWithError("no bf16 matmul on this CPU");
    return;
  }
  const std::int64_t qd = static_cast<std::int64_t>(sh.heads) * sh.hd, n = sh.S * qd;
  std::mt19937 rng(7);
  // Scores spread like a trained model's: |q . k| * scale of a few units.
  std::normal_distribution<float> g(0.0f, sh.scale == 1.0f ? 0.35f : 1.0f);
  std::vector<float> q(n), k(n), v(n), out(n);
  for (auto* x : {&q, &k, &v}) {
    for (float& e : *x) e = g(rng);
  }
  std::vector<std::uint16_t> q16(n), k16(n), v16(n), o16(n);
  const std::int32_t seqlen = static_cast<std::int32_t>(sh.S - 1), total = static_cast<std::int32_t>(sh.S);
  kvshare::GqaAttributes attrs;
  attrs.num_heads = attrs.kv_num_heads = sh.heads;
  attrs.causal = 0;
  attrs.scale = sh.scale;
  const bool f32 = path == kOpF32 || path == kOpBf16Mm;
  const DType t = f32 ? DType::kFloat32 : DType::kBFloat16;
  const void* qp = f32 ? static_cast<const void*>(q.data()) : q16.data();
  const void* kp = f32 ? static_cast<const void*>(k.data()) : k16.data();
  const void* vp = f32 ? static_cast<const void*>(v.data()) : v16.data();
  kvshare::GqaInputs in;
  in.query = ConstTensorView{qp, t, {1, sh.S, qd}};
  in.key = ConstTensorView{kp, t, {1, sh.S, qd}};
  in.value = ConstTensorView{vp, t, {1, sh.S, qd}};
  in.seqlens_k = ConstTensorView{&seqlen, DType::kInt32, {1}};
  in.total_sequence_length = ConstTensorView{&total, DType::kInt32, {1}};
  kvshare::GqaOutputs o;
  o.output = f32 ? TensorView{out.data(), t, {1, sh.S, qd}} : TensorView{o16.data(), t, {1, sh.S, qd}};
  for (auto _ : state) {
    if (path == kOpBf16) {  // the conversions a bf16-tensor route through the op adds
      kvshare::detail::F32ToBf16Rows(q.data(), n, q16.data());
      kvshare::detail::F32ToBf16Rows(k.data(), n, k16.data());
      kvshare::detail::F32ToBf16Rows(v.data(), n, v16.data());
    }
    kvshare::GroupQueryAttention(attrs, in, o,
                                 {.matmul_precision = path == kOpBf16Mm ? kvshare::GqaMatMulPrecision::kBf16
                                                                        : kvshare::GqaMatMulPrecision::kF32});
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(o16.data());
  }
  state.counters["FLOPS"] = benchmark::Counter(4.0 * static_cast<double>(sh.S) * static_cast<double>(sh.S) * qd,
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(state.range(0) == 0 ? "siglip" : "gemma4v") + "/" +
                 (path == kOpBf16     ? "op_bf16"
                  : path == kOpBf16Mm ? "op_bf16_matmul"
                                      : "op_f32"));
}

BENCHMARK(BM_VisionAttention)
    ->ArgsProduct({{0, 1}, {kOpBf16Mm, kOpBf16, kOpF32}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->UseRealTime();

}  // namespace
