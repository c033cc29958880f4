// MatMul throughput on the model's shapes: weight bytes streamed per second
// (bytes_per_second) and GFLOP/s, per kernel level and thread count.
//   kvshare_bench --benchmark_filter=MatVec
// Weight types side by side on one shape (every int8 type, 2048 x 2048, m = 1
// and m = 64, on 1 thread): compare a type's time with Q4_K / Q6_K in the same run.
//   kvshare_bench --benchmark_filter=MatTypes
// The default model's shapes and the type table again with the weights
// repacked (PackForMatMul: 16 rows interleaved for the AVX-512 VNNI and AMX
// kernels; the label says "packed" only where this CPU's default level packs),
// the AMX level (3) beside AVX-512 VNNI (2) and AVX2 (1); amx_ratio = MACs per
// second over the tdpbssd peak on as many threads (amx_peak.h, amx_peak_mac/s),
// measured in the same process; on one thread also amx_ratio_cpu, per
// CPU-second of the timed loop against the per-core peak (ssd_core_mac/s):
//   kvshare_bench --benchmark_filter=MatPacked
// The default model's decode shapes packed and from DRAM (one row and a
// server's 8-row step), with the roofs below:
//   kvshare_bench --benchmark_filter=MatPackedDram
// Gemma 4 E2B decode shapes, from DRAM, against the memory roofs measured with
// the same threads right before and after (the larger of the two):
//   kvshare_bench --benchmark_filter='E2bVec|triad|read'
// Counters there: triad_bytes/s and read_bytes/s (bandwidth.h), bw_ratio =
// weight bytes per second over the triad, read_ratio = over the read stream
// (a matrix-vector product only reads its weights, so the read stream is its
// roof; the triad is the usual yardstick).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "amx_peak.h"
#include "bandwidth.h"
#include "common/float_convert.h"
#include "quant/quant.h"

namespace kvshare {
namespace {

std::vector<std::uint8_t> RandomWeights(GgmlType t, std::int64_t rows, std::int64_t cols) {
  const std::int64_t nb = rows * cols / GgmlBlockSize(t);
  const std::size_t bb = static_cast<std::size_t>(GgmlBlockBytes(t));
  std::vector<std::uint8_t> w(static_cast<std::size_t>(nb) * bb);
  std::mt19937 rng(1);
  for (auto& v : w) v = static_cast<std::uint8_t>(rng());
  const std::uint16_t h = detail::F32ToF16(0.01f);
  // Where d sits (the block's first fp16 field unless said here).
  std::size_t at = 0;
  switch (t) {
    case GgmlType::kQ6_K: at = 208; break;
    case GgmlType::kQ2_K: at = 80; break;
    case GgmlType::kQ3_K: at = 108; break;
    case GgmlType::kTQ1_0: at = 52; break;
    case GgmlType::kTQ2_0: at = 64; break;
    default: break;
  }
  // Types with a second fp16 field after d: dmin (Q2_K, Q4_K, Q5_K) or m (Q4_1, Q5_1).
  const bool two = t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ4_1 || t == GgmlType::kQ5_1 ||
                   t == GgmlType::kQ2_K;
  for (std::int64_t b = 0; b < nb; ++b) {
    std::uint8_t* blk = w.data() + static_cast<std::size_t>(b) * bb;
    if (t == GgmlType::kMXFP4) {
      blk[0] = 121;  // E8M0 scale 2^-7
      continue;
    }
    if (t == GgmlType::kIQ1_M) {  // d's fp16 bits: the top nibbles of the 4 scale words at byte 48
      for (int k = 0; k < 4; ++k)
        blk[49 + 2 * k] = static_cast<std::uint8_t>((blk[49 + 2 * k] & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
      continue;
    }
    std::memcpy(blk + at, &h, 2);
    if (two) std::memcpy(blk + at + 2, &h, 2);
  }
  return w;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// args: ggml type id, rows, cols, m, threads, kernel level. With `dram`, the
// calls cycle through copies of the weights spanning DramFootprintBytes()
// (the whole model streams from DRAM in a decode step) and the roofs are measured.
void RunMatMul(benchmark::State& state, bool dram, bool packed = false) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const std::int64_t rows = state.range(1), cols = state.range(2), m = state.range(3);
  const int threads = static_cast<int>(state.range(4));
  const auto level = static_cast<KernelLevel>(state.range(5));
  if (!KernelLevelAvailable(level)) {
    state.SkipWithError("kernel level not available");
    return;
  }
  const auto w = RandomWeights(type, rows, cols);
  const std::size_t copies =
      dram ? std::max<std::size_t>(
                 1, static_cast<std::size_t>(std::ceil(bench::DramFootprintBytes() / static_cast<double>(w.size()))))
           : 1;
  bench::BigBuffer<std::uint8_t> all(w.size() * copies);
  for (std::size_t c = 0; c < copies; ++c) std::memcpy(all.data() + c * w.size(), w.data(), w.size());
  std::vector<float> x(static_cast<std::size_t>(m * cols), 0.5f), y(static_cast<std::size_t>(m * rows));
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  const double triad_before = dram ? bench::TriadBandwidth(pool.get(), 3) : 0.0;
  const double read_before = dram ? bench::ReadBandwidth(pool.get(), 3) : 0.0;
  std::vector<WeightMatrix> mats;
  for (std::size_t c = 0; c < copies; ++c) {
    mats.push_back(WeightMatrix::Make(all.data() + c * w.size(), type, rows, cols));
    if (packed) mats.back() = PackForMatMul(mats.back());
  }
  // The tdpbssd peak on as many threads, measured once per thread count and
  // process, before the timed loop (0 where AMX is not usable).
  static std::map<int, bench::AmxPeakRates> amx_peaks;
  if (packed && !amx_peaks.contains(threads)) amx_peaks[threads] = bench::MeasureAmxPeak(threads, 3);
  std::size_t next = 0;
  const double cpu0 = ThreadCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const WeightMatrix& wm = mats[next];
    next = (next + 1) % copies;
    MatMul(wm, {.x = x.data(), .m = m, .y = y.data(), .pool = pool.get(), .level = level});
    benchmark::DoNotOptimize(y.data());
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu_sec = ThreadCpuSeconds() - cpu0;
  const double bytes = static_cast<double>(state.iterations()) * static_cast<double>(w.size());
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(rows * cols * m) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  if (packed && amx_peaks[threads].ssd > 0.0) {
    const bench::AmxPeakRates& peak = amx_peaks[threads];
    const double macs = static_cast<double>(rows * cols * m) * static_cast<double>(state.iterations());
    state.counters["amx_peak_mac/s"] = peak.ssd;
    state.counters["amx_ratio"] = macs / sec / peak.ssd;
    // On one thread also per CPU-second against the per-core peak: the shared
    // host's other load lowers neither.
    if (threads == 1 && cpu_sec > 0.0) state.counters["amx_ratio_cpu"] = macs / cpu_sec / peak.ssd_core;
  }
  if (dram) {
    const double triad = std::max(triad_before, bench::TriadBandwidth(pool.get(), 3));
    const double read = std::max(read_before, bench::ReadBandwidth(pool.get(), 3));
    state.counters["triad_bytes/s"] =
        benchmark::Counter(triad, benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
    state.counters["read_bytes/s"] =
        benchmark::Counter(read, benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
    state.counters["bw_ratio"] = bytes / sec / triad;
    state.counters["read_ratio"] = bytes / sec / read;
  }
  state.SetLabel(GgmlTypeName(type) + " " + KernelLevelName(level) + (mats[0].packed != nullptr ? " packed" : ""));
}

void BM_MatMul(benchmark::State& state) { RunMatMul(state, false); }
void BM_MatMulDram(benchmark::State& state) { RunMatMul(state, true); }
void BM_MatMulPacked(benchmark::State& state) { RunMatMul(state, false, true); }
void BM_MatMulPackedDram(benchmark::State& state) { RunMatMul(state, true, true); }

// The packable cases of Shapes and TypeShapes at the AMX (3), AVX-512 (2) and
// AVX2 (1) levels; m = 16 is one full tile of activation rows.
void PackedShapes(benchmark::internal::Benchmark* b) {
  const std::int64_t q80 = static_cast<std::int64_t>(GgmlType::kQ8_0), q50 = static_cast<std::int64_t>(GgmlType::kQ5_0),
                     q40 = static_cast<std::int64_t>(GgmlType::kQ4_0), q4k = static_cast<std::int64_t>(GgmlType::kQ4_K),
                     q6k = static_cast<std::int64_t>(GgmlType::kQ6_K);
  for (std::int64_t level : {2, 3}) {
    // A prefill chunk (m = 96) on the default model's layer shapes, 1 thread.
    for (std::int64_t t : {q80, q50, q40}) b->Args({t, 2048, 640, 96, 1, level});
    for (std::int64_t t : {q4k, q6k}) b->Args({t, 640, 2048, 96, 1, level});
    for (std::int64_t m : {1, 8, 16}) {
      b->Args({q80, 262144, 640, m, 2, level});
      b->Args({q50, 2048, 640, m, 2, level});
      b->Args({q4k, 640, 2048, m, 2, level});
      b->Args({q6k, 640, 2048, m, 2, level});
    }
    // Prefill products on Gemma 4 E2B's FFN shapes (Q4_K gate / up, Q6_K or
    // Q4_K down), 1 thread, m = 64, 128 and 256: at 6144 columns the AMX
    // level splits 256 rows into calls of 128 (AmxActRowsPerCall).
    for (std::int64_t m : {64, 128, 256}) {
      b->Args({q4k, 6144, 1536, m, 1, level});
      b->Args({q4k, 1536, 6144, m, 1, level});
      b->Args({q6k, 1536, 6144, m, 1, level});
    }
    // Speculative verify steps (k + 1 rows: draft-max 16 gives 17) and
    // tails of a few rows past whole tiles, 1 thread.
    for (std::int64_t m : {17, 20, 28, 33}) {
      b->Args({q50, 2048, 640, m, 1, level});
      b->Args({q4k, 640, 2048, m, 1, level});
    }
  }
  const std::int64_t iq4nl = static_cast<std::int64_t>(GgmlType::kIQ4_NL),
                     iq4xs = static_cast<std::int64_t>(GgmlType::kIQ4_XS),
                     mxfp4 = static_cast<std::int64_t>(GgmlType::kMXFP4);
  const std::int64_t q2k = static_cast<std::int64_t>(GgmlType::kQ2_K), q3k = static_cast<std::int64_t>(GgmlType::kQ3_K);
  for (std::int64_t m : {1, 8, 16, 64}) {
    for (std::int64_t level : {3, 2, 1}) {  // 1: AVX2 packed
      for (std::int64_t t : {q40, q50, q80, q4k, q6k, iq4nl, iq4xs, mxfp4, q2k, q3k})
        b->Args({t, 2048, 2048, m, 1, level});
    }
  }
}

// The default model's decode matrices, packed, from DRAM as in a model step
// (the layers' 73 MB and the head's 178 MB do not stay in cache from one step
// to the next): one row, and a server step's 8 rows; 1 and 2 threads.
void PackedDramShapes(benchmark::internal::Benchmark* b) {
  const std::int64_t q80 = static_cast<std::int64_t>(GgmlType::kQ8_0), q50 = static_cast<std::int64_t>(GgmlType::kQ5_0),
                     q4k = static_cast<std::int64_t>(GgmlType::kQ4_K), q6k = static_cast<std::int64_t>(GgmlType::kQ6_K);
  for (std::int64_t m : {1, 8}) {
    for (std::int64_t th : {1, 2}) {
      b->Args({q50, 2048, 640, m, th, 2});    // ffn_gate / ffn_up
      b->Args({q4k, 640, 2048, m, th, 2});    // ffn_down (Q4_K layers)
      b->Args({q6k, 640, 2048, m, th, 2});    // ffn_down (Q6_K layers)
      b->Args({q80, 262144, 640, m, th, 2});  // tied embedding as LM head
      b->Args({q80, 262144, 640, m, th, 1});  // the same on the AVX2 packed kernel
    }
  }
}

void Shapes(benchmark::internal::Benchmark* b) {
  const std::int64_t q4k = static_cast<std::int64_t>(GgmlType::kQ4_K), q6k = static_cast<std::int64_t>(GgmlType::kQ6_K),
                     q80 = static_cast<std::int64_t>(GgmlType::kQ8_0), q50 = static_cast<std::int64_t>(GgmlType::kQ5_0);
  for (std::int64_t level : {0, 1, 2}) {
    for (std::int64_t th : {1, 2}) {
      b->Args({q4k, 640, 2048, 1, th, level});    // ffn_down (Q4_K layers)
      b->Args({q6k, 640, 2048, 1, th, level});    // ffn_down (Q6_K layers)
      b->Args({q50, 2048, 640, 1, th, level});    // ffn_gate / ffn_up
      b->Args({q80, 262144, 640, 1, th, level});  // tied embedding as LM head
    }
  }
  b->Args({q4k, 640, 2048, 64, 2, 2});  // prefill-like m = 64
  // A server step of 8 decoding rows (kvshare serve, 8 slots), 2 threads.
  for (std::int64_t m : {1, 8}) {
    b->Args({q80, 262144, 640, m, 2, 2});
    b->Args({q50, 2048, 640, m, 2, 2});
    b->Args({q4k, 640, 2048, m, 2, 2});
  }
}

void TypeShapes(benchmark::internal::Benchmark* b) {
  for (std::int64_t level : {1, 2}) {
    for (std::int64_t m : {1, 8, 64}) {
      for (GgmlType t :
           {GgmlType::kQ4_K,   GgmlType::kQ5_K,    GgmlType::kQ6_K,  GgmlType::kQ4_0,    GgmlType::kQ4_1,
            GgmlType::kQ5_0,   GgmlType::kQ5_1,    GgmlType::kQ8_0,  GgmlType::kQ2_K,    GgmlType::kQ3_K,
            GgmlType::kIQ4_NL, GgmlType::kIQ4_XS,  GgmlType::kTQ1_0, GgmlType::kTQ2_0,   GgmlType::kMXFP4,
            GgmlType::kNVFP4,  GgmlType::kQ1_0,    GgmlType::kQ2_0,  GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS,
            GgmlType::kIQ2_S,  GgmlType::kIQ3_XXS, GgmlType::kIQ3_S, GgmlType::kIQ1_S,   GgmlType::kIQ1_M}) {
        b->Args({static_cast<std::int64_t>(t), 2048, 2048, m, 1, level});
      }
    }
  }
}

// Gemma 4 E2B decode shapes (Q4_K_M file): the double-wide FFN of a shared layer
// and the tied embedding as LM head (each matrix 10-330 MB), from DRAM (RunMatMul).
void E2bShapes(benchmark::internal::Benchmark* b) {
  const std::int64_t q4k = static_cast<std::int64_t>(GgmlType::kQ4_K), q6k = static_cast<std::int64_t>(GgmlType::kQ6_K);
  for (std::int64_t level : {1, 2}) {
    for (std::int64_t th : {1, 2}) {
      b->Args({q4k, 12288, 1536, 1, th, level});   // ffn_gate / ffn_up
      b->Args({q4k, 1536, 12288, 1, th, level});   // ffn_down (Q4_K layers)
      b->Args({q6k, 1536, 12288, 1, th, level});   // ffn_down (Q6_K layers)
      b->Args({q6k, 262144, 1536, 1, th, level});  // LM head
    }
  }
}

BENCHMARK(BM_MatMul)->Apply(Shapes)->Name("MatVec")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MatMul)->Apply(TypeShapes)->Name("MatTypes")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MatMulPacked)->Apply(PackedShapes)->Name("MatPacked")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MatMulPackedDram)
    ->Apply(PackedDramShapes)
    ->Name("MatPackedDram")
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_MatMulDram)->Apply(E2bShapes)->Name("E2bVec")->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace kvshare
