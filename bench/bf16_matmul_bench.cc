// The encoders' bf16 linears (vision/bf16_matmul.h) at real geometry, one
// thread: on the AMX tiles (quant/bf16_tiles.h) and through oneDNN's bf16
// matmul (AVX512-BF16 with oneDNN 2.6), alternating in one process, against
// the tdpbf16ps peak measured in the same process (amx_peak.h):
// bf16_ratio_cpu = MACs per CPU-second of the timed loop over the per-core
// peak (bf16_core).
//
// Shapes (m activation rows x n weight rows x k columns): SigLIP at 896 px
// (Gemma 3: 4096 tokens, width 1152, MLP 4304): attention projections, fc1
// and fc2; Gemma 4 E2B's encoder on 768 x 768 (2304 tokens, width 768, MLP
// 3072); and 256 rows of the SigLIP fc1 (a short input).
//
//   build/bench/kvshare_bench --benchmark_filter=Bf16Matrix
#include <benchmark/benchmark.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "amx_peak.h"
#include "common/float_convert.h"
#include "vision/bf16_matmul.h"

namespace {

struct Shape {
  const char* name;
  std::int64_t m, n, k;
};

constexpr Shape kShapes[] = {{"siglip_qkvo", 4096, 1152, 1152}, {"siglip_fc1", 4096, 4304, 1152},
                             {"siglip_fc2", 4096, 1152, 4304},  {"gemma4v_fc1", 2304, 3072, 768},
                             {"gemma4v_fc2", 2304, 768, 3072},  {"siglip_fc1_m256", 256, 4304, 1152}};

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void BM_Bf16Matrix(benchmark::State& state) {
  const Shape& sh = kShapes[state.range(0)];
  const bool tiles = state.range(1) == 1;
  if (tiles && !kvshare::detail::AmxBf16Usable()) {
    state.SkipWithError("no usable AMX-BF16 tiles here");
    return;
  }
  if (!tiles && !kvshare::detail::Bf16MatMulSupported()) {
    state.SkipWithError("no oneDNN bf16 matmul on this CPU");
    return;
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<std::uint16_t> w(static_cast<std::size_t>(sh.n * sh.k));
  for (auto& e : w) e = kvshare::detail::F32ToBF16(g(rng) * 0.03f);
  std::vector<float> x(static_cast<std::size_t>(sh.m * sh.k)), y(static_cast<std::size_t>(sh.m * sh.n));
  for (float& e : x) e = g(rng);
  const kvshare::detail::Bf16Matrix mat(kvshare::WeightMatrix::Make(w.data(), kvshare::GgmlType::kBF16, sh.n, sh.k),
                                        {.amx_tiles = tiles});
  static const kvshare::bench::AmxPeakRates peak = kvshare::bench::MeasureAmxPeak(1, 3);
  mat.Apply(x.data(), sh.m, y.data(), nullptr);  // warm-up
  const double cpu0 = ThreadCpuSeconds();
  for (auto _ : state) {
    mat.Apply(x.data(), sh.m, y.data(), nullptr);
    benchmark::DoNotOptimize(y.data());
  }
  const double cpu = ThreadCpuSeconds() - cpu0;
  const double macs = static_cast<double>(sh.m * sh.n * sh.k) * static_cast<double>(state.iterations());
  state.counters["MAC/s"] = benchmark::Counter(macs, benchmark::Counter::kIsRate);
  if (peak.bf16_core > 0.0 && cpu > 0.0) {
    state.counters["bf16_peak_mac/s"] = peak.bf16_core;
    state.counters["bf16_ratio_cpu"] = macs / cpu / peak.bf16_core;
  }
  state.SetLabel(std::string(sh.name) + (tiles ? "/amx_tiles" : "/onednn"));
}

BENCHMARK(BM_Bf16Matrix)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {1, 0}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5)
    ->UseRealTime();

}  // namespace
