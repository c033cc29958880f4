// Benchmarks of detail::AttendOptimized (decode and prefill at Gemma and Llama
// shapes) against a STREAM-like triad measured in the same run.
//
// Counters:
//   kv_bytes/s  bytes of K and V the call must read: T * H * N_kv * 2 * sizeof(cache
//               dtype) per call (each cached row once; prefill re-reads hit cache).
//   FLOPS       4 * N * H * (sum over queries of visible keys) per call
//               (Q.K and P.V, one multiply-add = 2 flops).
//   bw_ratio    kv_bytes/s divided by the triad bandwidth with the same pool
//               (decode only; best of 3 triads right before and right after
//               the timed loop, the larger of the two: triad_bytes/s).
//   fma_ratio   FLOPS divided by the peak fp32 FMA rate of the same pool,
//               measured right before the timed loop (fma_peak.h: fma_flops).
//   amx_ratio   FLOPS divided by twice the tdpbf16ps MAC rate of as many threads
//               (amx_peak.h), for the rows with the bf16 products on AMX tiles.
//   roof_ratio  FLOPS divided by the roofline min(fma_flops, FLOPS/kv_bytes
//               x triad_bytes/s): the fraction of what the slower of compute
//               and memory allows (decode only). Decode with N / N_kv = 8
//               and an fp16 cache does 8 flops per cache byte: at DRAM speed
//               that is about the whole FMA peak of a 2-core AVX2 machine, so
//               there compute, not memory, is the roof.
// Triad: a[i] = b[i] + s * c[i] over three 64 MiB float arrays; bytes counted
// as 3 streams x 4 bytes per element (the write-allocate read of a is not
// counted, as in STREAM).
//
// Environment: KVSHARE_BENCH_BLOCK=n sets kv_block_size (default: kernel's choice);
// KVSHARE_BENCH_FOOTPRINT_MIB=n the bytes decode cycles through
// (bandwidth.h: DramFootprintBytes).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "amx_peak.h"
#include "attention/amx_attend.h"
#include "attention/attend.h"
#include "bandwidth.h"
#include "common/float_convert.h"
#include "common/q8_0.h"
#include "fma_peak.h"
#include "kvshare/common/thread_pool.h"

namespace {

using kvshare::DType;
using kvshare::ThreadPool;
using Clock = std::chrono::steady_clock;

using kvshare::bench::BigBuffer;
using kvshare::bench::TriadBandwidth;

struct AttnCase {
  int N, Nkv, H, S, T;
  DType kv_dtype;
  int threads;
  int B = 1;                // rows (a server's decode step: B sequences of T keys each)
  bool bf16_tiles = false;  // the bf16 products on AMX tiles (amx_attend.h)
};

// Owns BNSH cache pairs (capacity T; `copies` of them, one per call in
// turn), queries and output for one case.
struct AttnProblem {
  std::vector<float> q;
  std::unique_ptr<BigBuffer<std::uint16_t>> k16, v16;
  std::unique_ptr<BigBuffer<float>> k32, v32;
  std::unique_ptr<BigBuffer<unsigned char>> k8, v8;  // q8_0 blocks
  std::vector<float> out;
  std::vector<std::int64_t> kv_len, q_offset, valid_q;  // [B]
  std::size_t copies = 1, copy_bytes = 0, next_copy = 0;
  const char* k_base = nullptr;
  const char* v_base = nullptr;
  kvshare::detail::AttendParams p;

  template <typename T, class Gen>
  static std::unique_ptr<BigBuffer<T>> RandomCopies(std::size_t n, std::size_t copies, Gen gen) {
    auto buf = std::make_unique<BigBuffer<T>>(n * copies);
    for (std::size_t i = 0; i < n; ++i) (*buf)[i] = gen();
    for (std::size_t c = 1; c < copies; ++c) std::copy(buf->data(), buf->data() + n, buf->data() + c * n);
    return buf;
  }

  explicit AttnProblem(const AttnCase& c) {
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    q.resize(static_cast<std::size_t>(c.B) * c.S * c.N * c.H);
    for (float& x : q) x = u(rng);
    const std::size_t n = static_cast<std::size_t>(c.B) * c.Nkv * c.T * c.H;
    copy_bytes = kvshare::DTypeBytes(c.kv_dtype, static_cast<std::int64_t>(n));
    if (c.S == 1) {
      copies = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(kvshare::bench::DramFootprintBytes() /
                                                                           (2.0 * static_cast<double>(copy_bytes)))));
    }
    if (c.kv_dtype == DType::kFloat32) {
      k32 = RandomCopies<float>(n, copies, [&] { return u(rng); });
      v32 = RandomCopies<float>(n, copies, [&] { return u(rng); });
    } else if (c.kv_dtype == DType::kQ8_0) {
      for (auto* buf : {&k8, &v8}) {
        std::vector<float> x(n);
        for (float& e : x) e = u(rng);
        *buf = std::make_unique<BigBuffer<unsigned char>>(copy_bytes * copies);
        kvshare::detail::QuantizeRowQ8_0(x.data(), static_cast<std::int64_t>(n), (*buf)->data());
        for (std::size_t cp = 1; cp < copies; ++cp) {
          std::copy((*buf)->data(), (*buf)->data() + copy_bytes, (*buf)->data() + cp * copy_bytes);
        }
      }
    } else {
      const bool bf = c.kv_dtype == DType::kBFloat16;
      const auto gen = [&] { return bf ? kvshare::detail::F32ToBF16(u(rng)) : kvshare::detail::F32ToF16(u(rng)); };
      k16 = RandomCopies<std::uint16_t>(n, copies, gen);
      v16 = RandomCopies<std::uint16_t>(n, copies, gen);
    }
    out.resize(q.size());
    kv_len.assign(static_cast<std::size_t>(c.B), c.T);
    q_offset.assign(static_cast<std::size_t>(c.B), c.T - c.S);
    valid_q.assign(static_cast<std::size_t>(c.B), c.S);
    p.batch = c.B;
    p.q_len = c.S;
    p.num_heads = c.N;
    p.kv_heads = c.Nkv;
    p.head_size = c.H;
    p.q = q.data();
    for (kvshare::detail::KvSource* s : {&p.k, &p.v}) {
      s->dtype = c.kv_dtype;
      s->batch_stride = static_cast<std::int64_t>(n) / c.B;
      s->head_stride = static_cast<std::int64_t>(c.T) * c.H;
      s->row_stride = c.H;
    }
    if (c.kv_dtype == DType::kQ8_0) {
      k_base = reinterpret_cast<const char*>(k8->data());
      v_base = reinterpret_cast<const char*>(v8->data());
    } else {
      k_base = c.kv_dtype == DType::kFloat32 ? reinterpret_cast<const char*>(k32->data())
                                             : reinterpret_cast<const char*>(k16->data());
      v_base = c.kv_dtype == DType::kFloat32 ? reinterpret_cast<const char*>(v32->data())
                                             : reinterpret_cast<const char*>(v16->data());
    }
    NextCopy();
    p.kv_len = kv_len.data();
    p.q_offset = q_offset.data();
    p.valid_q = valid_q.data();
    p.causal = true;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.H));
    p.out = out.data();
    p.out_dtype = DType::kFloat32;
    if (const char* e = std::getenv("KVSHARE_BENCH_BLOCK")) p.kv_block_size = std::atoi(e);
    p.bf16_tiles = c.bf16_tiles;
  }

  // Points the problem at the next cache copy.
  void NextCopy() {
    p.k.data = k_base + next_copy * copy_bytes;
    p.v.data = v_base + next_copy * copy_bytes;
    next_copy = (next_copy + 1) % copies;
  }
};

void BM_Attend(benchmark::State& state, AttnCase c) {
  AttnProblem pr(c);
  ThreadPool pool(c.threads);
  // Decode: the triad right before and right after the timed loop (the
  // machine's bandwidth drifts when it is shared); the ratio uses the larger.
  const double triad_before = c.S == 1 ? TriadBandwidth(&pool, 3) : 0.0;
  const double fma_peak = kvshare::bench::FmaPeakFlops(&pool, 3);
  // The tdpbf16ps peak of as many threads (2 flops a MAC), for the tile rows.
  const double amx_peak = c.bf16_tiles ? 2.0 * kvshare::bench::MeasureAmxPeak(c.threads, 3).bf16 : 0.0;
  kvshare::detail::AttendOptimized(pr.p, &pool);  // warm up
  const double kv_bytes =
      2.0 * static_cast<double>(kvshare::DTypeBytes(c.kv_dtype, static_cast<std::int64_t>(c.B) * c.T * c.H * c.Nkv));
  double visible = 0.0;  // causal, queries at T - S + s
  for (int s = 0; s < c.S; ++s) visible += static_cast<double>(c.T - c.S + s + 1);
  const double flops = 4.0 * c.B * c.N * c.H * visible;
  const auto t0 = Clock::now();
  for (auto _ : state) {
    pr.NextCopy();
    kvshare::detail::AttendOptimized(pr.p, &pool);
    benchmark::DoNotOptimize(pr.out.data());
  }
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  const double triad = c.S == 1 ? std::max(triad_before, TriadBandwidth(&pool, 3)) : 0.0;
  const double iters = static_cast<double>(state.iterations());
  state.counters["kv_bytes/s"] =
      benchmark::Counter(kv_bytes * iters, benchmark::Counter::kIsRate, benchmark::Counter::OneK::kIs1024);
  state.counters["FLOPS"] = benchmark::Counter(flops * iters, benchmark::Counter::kIsRate);
  state.counters["fma_flops"] = fma_peak;
  state.counters["fma_ratio"] = flops * iters / sec / fma_peak;
  if (amx_peak > 0.0) state.counters["amx_ratio"] = flops * iters / sec / amx_peak;
  if (triad > 0.0) {
    state.counters["bw_ratio"] = kv_bytes * iters / sec / triad;
    state.counters["roof_ratio"] = flops * iters / sec / std::min(fma_peak, flops / kv_bytes * triad);
    state.counters["triad_bytes/s"] =
        benchmark::Counter(triad, benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
  }
}

void RegisterAll() {
  struct Shape {
    const char* name;
    int N, Nkv, H;
  };
  const Shape shapes[] = {{"gemma_n4", 4, 1, 256}, {"gemma_n8", 8, 1, 256}, {"llama", 32, 8, 128}};
  const std::pair<DType, const char*> dtypes[] = {
      {DType::kFloat32, "f32"}, {DType::kFloat16, "f16"}, {DType::kQ8_0, "q8_0"}};
  for (const bool decode : {true, false}) {
    for (const int T : decode ? std::vector<int>{512, 4096, 32768} : std::vector<int>{512, 2048}) {
      for (const Shape& sh : shapes) {
        for (const auto& dt : dtypes) {
          for (const int threads : {1, 2}) {
            const AttnCase c{sh.N, sh.Nkv, sh.H, decode ? 1 : T, T, dt.first, threads};
            const std::string name = std::string(decode ? "decode/" : "prefill/") + sh.name +
                                     "/T:" + std::to_string(T) + "/" + dt.second +
                                     "/threads:" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), BM_Attend, c)
                ->UseRealTime()
                ->Unit(decode ? benchmark::kMicrosecond : benchmark::kMillisecond)
                ->MinTime(decode ? 0.3 : 0.5);
          }
        }
      }
    }
  }
  // Prefill with the bf16 products on AMX tiles (GqaMatMulPrecision::kBf16)
  // beside the f16 rows above, at the default model's shape, and a 512-query
  // chunk after 16384 tokens of context (pp512 at depth 16384).
  if (kvshare::detail::AmxAttendUsable()) {
    for (const int T : {512, 2048, 16896}) {
      for (const bool tiles : {false, true}) {
        for (const int threads : {1, 2}) {
          if (T <= 2048 && !tiles) continue;  // the f16 rows above
          AttnCase c{4, 1, 256, std::min(T, 512), T, DType::kFloat16, threads};
          c.bf16_tiles = tiles;
          const std::string name = "prefill/gemma_n4/T:" + std::to_string(T) + (T > 2048 ? "/S:512" : "") + "/f16" +
                                   (tiles ? "_amx_bf16" : "") + "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_Attend, c)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond)
              ->MinTime(0.5);
        }
      }
    }
  }
  // Decode with the bf16 tiles (every step of a sequence runs them when the
  // model's attention precision is bf16) beside the f16 rows above.
  if (kvshare::detail::AmxAttendUsable()) {
    for (const int T : {4096, 32768}) {
      for (const int threads : {1, 2}) {
        for (const DType dt : {DType::kFloat16, DType::kBFloat16}) {
          AttnCase c{4, 1, 256, 1, T, dt, threads};
          c.bf16_tiles = true;
          const std::string name = "decode/gemma_n4/T:" + std::to_string(T) +
                                   (dt == DType::kFloat16 ? "/f16" : "/bf16") +
                                   "_amx_bf16/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_Attend, c)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond)
              ->MinTime(0.3);
        }
      }
    }
  }
  // A server's decode step on the default model (Gemma 3 270M: 4 heads on 1
  // KV head, H = 256): B rows of T keys each in one call.
  for (const int B : {8, 16}) {
    for (const int T : {128, 320}) {
      for (const int threads : {1, 2}) {
        const AttnCase c{4, 1, 256, 1, T, DType::kFloat16, threads, B};
        const std::string name = "decode/gemma_n4/B:" + std::to_string(B) + "/T:" + std::to_string(T) +
                                 "/f16/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_Attend, c)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.3);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
