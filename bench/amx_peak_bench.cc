// The AMX and VNNI int8 / bf16 peaks (amx_peak.h) on 1 and 2 threads:
//   kvshare_bench --benchmark_filter=AmxPeak
// Counters (MACs per second, all threads together): ssd_mac/s (tdpbssd),
// usd_mac/s (tdpbusd), bf16_mac/s (tdpbf16ps), vnni_mac/s (vpdpbusd zmm),
// amx_vnni = ssd over vnni; *_core_mac/s: the same MACs per CPU-second of
// the threads (one core's rate, robust to a shared host's load; amx_vnni_core
// their ratio); *_chains: the accumulator tiles that gave the
// best rate; q32_roof_mac/s, kquant_roof_mac/s (and *_core): the tile steps
// alone of the 32-element and K-quant kernels, the roofs of kernels that keep
// the AVX-512 level's arithmetic (amx_peak.h). The AMX counters are 0 where AMX is not usable here.
#include <benchmark/benchmark.h>

#include "amx_peak.h"

namespace kvshare {
namespace {

void BM_AmxPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  bench::AmxPeakRates r;
  for (auto _ : state) r = bench::MeasureAmxPeak(threads, 3);
  const auto rate = [](double v) {
    return benchmark::Counter(v, benchmark::Counter::kDefaults, benchmark::Counter::kIs1000);
  };
  state.counters["ssd_mac/s"] = rate(r.ssd);
  state.counters["usd_mac/s"] = rate(r.usd);
  state.counters["bf16_mac/s"] = rate(r.bf16);
  state.counters["vnni_mac/s"] = rate(r.vnni);
  state.counters["ssd_core_mac/s"] = rate(r.ssd_core);
  state.counters["usd_core_mac/s"] = rate(r.usd_core);
  state.counters["bf16_core_mac/s"] = rate(r.bf16_core);
  state.counters["vnni_core_mac/s"] = rate(r.vnni_core);
  state.counters["q32_roof_mac/s"] = rate(r.q32_roof);
  state.counters["kquant_roof_mac/s"] = rate(r.kquant_roof);
  state.counters["q32_roof_core_mac/s"] = rate(r.q32_roof_core);
  state.counters["kquant_roof_core_mac/s"] = rate(r.kquant_roof_core);
  state.counters["amx_vnni"] = r.vnni > 0.0 ? r.ssd / r.vnni : 0.0;
  state.counters["amx_vnni_core"] = r.vnni_core > 0.0 ? r.ssd_core / r.vnni_core : 0.0;
  state.counters["ssd_chains"] = r.ssd_chains;
  state.counters["usd_chains"] = r.usd_chains;
  state.counters["bf16_chains"] = r.bf16_chains;
  if (r.ssd == 0.0) state.SetLabel("AMX not usable here");
}

BENCHMARK(BM_AmxPeak)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvshare
