// Triad and read-stream roofs (bandwidth.h), registered as benchmarks of
// their own too: triad/threads:N and read/threads:N.
#include "bandwidth.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>

namespace kvshare::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kTriadFloats = std::size_t{64} << 20 >> 2;  // 64 MiB per array
constexpr double kTriadBytesPerCall = 3.0 * 4.0 * static_cast<double>(kTriadFloats);
constexpr std::size_t kReadWords = std::size_t{192} << 20 >> 3;  // 192 MiB
constexpr double kReadBytesPerCall = 8.0 * static_cast<double>(kReadWords);

struct TriadArrays {
  BigBuffer<float> a{kTriadFloats, 0.0f}, b{kTriadFloats, 1.0f}, c{kTriadFloats, 2.0f};
};

TriadArrays& Triad() {
  static TriadArrays t;
  return t;
}

BigBuffer<std::uint64_t>& ReadArray() {
  static BigBuffer<std::uint64_t> r(kReadWords, 1);
  return r;
}

int Chunks(const ThreadPool* pool) { return 4 * (pool != nullptr ? pool->NumThreads() : 1); }

void RunTriad(ThreadPool* pool) {
  TriadArrays& t = Triad();
  const float s = 3.0f;
  const int chunks = Chunks(pool);
  const std::size_t per = (kTriadFloats + static_cast<std::size_t>(chunks) - 1) / static_cast<std::size_t>(chunks);
  ParallelFor(pool, chunks, [&](std::int64_t i) {
    const std::size_t lo = static_cast<std::size_t>(i) * per;
    const std::size_t hi = std::min(kTriadFloats, lo + per);
    float* __restrict a = t.a.data();
    const float* __restrict b = t.b.data();
    const float* __restrict c = t.c.data();
    for (std::size_t j = lo; j < hi; ++j) a[j] = b[j] + s * c[j];
  });
}

void RunRead(ThreadPool* pool) {
  BigBuffer<std::uint64_t>& r = ReadArray();
  const int chunks = Chunks(pool);
  const std::size_t per = (kReadWords + static_cast<std::size_t>(chunks) - 1) / static_cast<std::size_t>(chunks);
  ParallelFor(pool, chunks, [&](std::int64_t i) {
    const std::size_t lo = static_cast<std::size_t>(i) * per;
    const std::size_t hi = std::min(kReadWords, lo + per);
    const std::uint64_t* __restrict p = r.data();
    std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    std::size_t j = lo;
    for (; j + 4 <= hi; j += 4) s0 += p[j], s1 += p[j + 1], s2 += p[j + 2], s3 += p[j + 3];
    for (; j < hi; ++j) s0 += p[j];
    benchmark::DoNotOptimize(s0 + s1 + s2 + s3);
  });
}

template <void (*Run)(ThreadPool*)>
double Best(ThreadPool* pool, int reps, double bytes) {
  Run(pool);  // warm up, fault pages in
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    Run(pool);
    best = std::max(best, bytes / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

template <void (*Run)(ThreadPool*)>
void BM_Roof(benchmark::State& state, double bytes) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  Run(&pool);
  for (auto _ : state) {
    Run(&pool);
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::OneK::kIs1024);
}

void BM_Triad(benchmark::State& state) { BM_Roof<RunTriad>(state, kTriadBytesPerCall); }
void BM_Read(benchmark::State& state) { BM_Roof<RunRead>(state, kReadBytesPerCall); }

BENCHMARK(BM_Triad)->Name("triad")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Read)->Name("read")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

double TriadBandwidth(ThreadPool* pool, int reps) { return Best<RunTriad>(pool, reps, kTriadBytesPerCall); }
double ReadBandwidth(ThreadPool* pool, int reps) { return Best<RunRead>(pool, reps, kReadBytesPerCall); }

double DramFootprintBytes() {
  const char* e = std::getenv("KVSHARE_BENCH_FOOTPRINT_MIB");
  return (e != nullptr ? std::atof(e) : 512.0) * (1 << 20);
}

}  // namespace kvshare::bench
