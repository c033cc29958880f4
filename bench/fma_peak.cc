// FmaPeakFlops (fma_peak.h): kChains independent vector FMA chains per thread,
// enough to cover the FMA latency x FMA ports of current x86 and Arm cores
// (4 x 2 on Zen 3 and Intel since Skylake).
#include "fma_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fma_peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kChains = 10;

// Runs `iters` rounds of kChains FMAs; returns the flops done (the sum of the
// chains goes to *sink so that nothing is optimized away).
double FmaChains(std::int64_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  V acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = hn::Set(d, static_cast<float>(i));
  const V x = hn::Set(d, 0.999999f), y = hn::Set(d, 1e-6f);  // acc stays bounded
  for (std::int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = hn::MulAdd(acc[i], x, y);
  }
  V sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = hn::Add(sum, acc[i]);
  *sink = hn::GetLane(hn::SumOfLanes(d, sum));
  return 2.0 * kChains * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iters);
}

}  // namespace kvshare::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvshare::bench {

HWY_EXPORT(FmaChains);

double FmaPeakFlops(ThreadPool* pool, int reps) {
  constexpr std::int64_t kIters = 500'000;  // about 1 ms per item
  const int items = pool->NumThreads() * 4;
  std::vector<float> sinks(static_cast<std::size_t>(items));
  std::vector<double> flops(static_cast<std::size_t>(items));
  double best = 0.0;
  for (int r = 0; r < reps + 1; ++r) {  // the first run warms up clocks
    const auto t0 = std::chrono::steady_clock::now();
    ParallelFor(pool, items, [&](std::int64_t i) {
      const auto u = static_cast<std::size_t>(i);
      flops[u] = HWY_DYNAMIC_DISPATCH(FmaChains)(kIters, &sinks[u]);
    });
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double total = 0.0;
    for (const double f : flops) total += f;
    if (r > 0) best = std::max(best, total / sec);
  }
  return best;
}

}  // namespace kvshare::bench
#endif  // HWY_ONCE
