// MeasureAmxPeak (amx_peak.h): N independent C tiles (N = 1-6; tiles 6 and 7
// hold A and B) each taking one tdpb* per round, 12 vpdpbusd zmm chains
// (latency 5 x 2 ports on Sapphire Rapids, with room), and the tile steps of
// the int8 kernels (BlockSumSteps, KQuantSteps). The tile code carries
// per-function target attributes, so this file builds with the bench's plain
// flags and runs the tiles only after AmxUsable.
#include "amx_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <thread>
#include <vector>

#include "common/amx_tiles.h"
#include "common/cpu_amx.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVSHARE_AMX_PEAK 1
#include <immintrin.h>
#endif

namespace kvshare::bench {
namespace {

enum class Op { kSsd, kUsd, kBf16, kVnni, kQ32Steps, kKQuantSteps };

// Tile instructions per thread per run: about 4 ms at 3.3 TMAC/s.
constexpr std::int64_t kTileInstrs = 3 << 18;
constexpr std::int64_t kVnniInstrs = 12 << 18;
constexpr int kVnniChains = 12;

#if KVSHARE_AMX_PEAK
#define KVSHARE_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni,amx-tile,amx-int8,amx-bf16")))

// The chains and the K-quant steps run in detail::FullTiles(): every tile 16
// rows of 64 bytes (C 16 x 16 int32 / fp32, A 16 x 64 int8 or 16 x 32 bf16,
// B K / 4 int8 or K / 2 bf16 pairs per row).

// One round: tile i += A * B for i < N. The tile numbers must be literals (the
// intrinsics paste them into the instruction).
#define KVSHARE_TILE_ROUND(OP) \
  do {                         \
    OP(0, 6, 7);               \
    if constexpr (N > 1) OP(1, 6, 7); \
    if constexpr (N > 2) OP(2, 6, 7); \
    if constexpr (N > 3) OP(3, 6, 7); \
    if constexpr (N > 4) OP(4, 6, 7); \
    if constexpr (N > 5) OP(5, 6, 7); \
  } while (0)

// Runs kTileInstrs / N rounds; returns the MACs done. Tile 0 goes to *sink.
template <int N>
KVSHARE_AMX_TARGET double TileChains(Op op, std::int32_t* sink) {
  alignas(64) std::uint8_t ab[16 * 64];
  // int8 ones, or bf16 1.0 (0x3f80) pairs: C grows by K an instruction.
  for (int i = 0; i < 16 * 64; ++i) ab[i] = op == Op::kBf16 ? (i % 2 == 0 ? 0x80 : 0x3f) : 1;
  _tile_loadconfig(&detail::FullTiles());
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  const std::int64_t rounds = kTileInstrs / N;
  switch (op) {
    case Op::kSsd:
      for (std::int64_t r = 0; r < rounds; ++r) KVSHARE_TILE_ROUND(_tile_dpbssd);
      break;
    case Op::kUsd:
      for (std::int64_t r = 0; r < rounds; ++r) KVSHARE_TILE_ROUND(_tile_dpbusd);
      break;
    default:
      for (std::int64_t r = 0; r < rounds; ++r) KVSHARE_TILE_ROUND(_tile_dpbf16ps);
      break;
  }
  alignas(64) std::int32_t c[16 * 16];
  _tile_stored(0, c, 64);
  _tile_release();
  *sink = c[0];
  const double k = op == Op::kBf16 ? 32.0 : 64.0;
  return 16.0 * 16.0 * k * static_cast<double>(N) * static_cast<double>(rounds);
}
#undef KVSHARE_TILE_ROUND

// The 32-element kernel's tile steps (AmxPeakRates::q32_roof): tiles 0, 1:
// A (16 rows of 32 bytes); 2, 3: B (8 rows of 64); 4, 5: C; block b + 1's
// product issued before block b's store, as packed_q32.cc's TileRows does.
KVSHARE_AMX_TARGET double BlockSumSteps(std::int32_t* sink) {
  static const detail::TileConfig cfg = [] {
    detail::TileConfig c;
    for (int t : {0, 1}) c.rows[t] = 16, c.colsb[t] = 32;
    for (int t : {2, 3}) c.rows[t] = 8, c.colsb[t] = 64;
    for (int t : {4, 5}) c.rows[t] = 16, c.colsb[t] = 64;
    return c;
  }();
  alignas(64) std::int8_t a[2][512], b[2][512];
  alignas(64) std::int32_t c[4][256];
  for (int i = 0; i < 512; ++i) a[0][i] = a[1][i] = b[0][i] = b[1][i] = 1;
  _tile_loadconfig(&cfg);
  const std::int64_t pairs = kTileInstrs / 4;
  _tile_loadd(0, a[0], 32);
  _tile_loadd(2, b[0], 64);
  _tile_zero(4);
  _tile_dpbssd(4, 0, 2);
  for (std::int64_t r = 0; r < pairs; ++r) {
    _tile_loadd(1, a[1], 32);
    _tile_loadd(3, b[1], 64);
    _tile_zero(5);
    _tile_dpbssd(5, 1, 3);
    _tile_stored(4, c[(2 * r) % 4], 64);
    _tile_loadd(0, a[0], 32);
    _tile_loadd(2, b[0], 64);
    _tile_zero(4);
    _tile_dpbssd(4, 0, 2);
    _tile_stored(5, c[(2 * r + 1) % 4], 64);
  }
  _tile_stored(4, c[0], 64);
  _tile_release();
  *sink = c[0][0] + c[1][0];
  return 16.0 * 16.0 * 32.0 * static_cast<double>(2 * pairs + 1);
}

// The K-quant kernel's tile steps (AmxPeakRates::kquant_roof): per
// super-block, the previous super-block's C stored, C_lo, C_hi zeroed (tiles
// 4, 5 or 6, 7 alternating), then 4 K-steps of an A load (tile 0 / 1), the
// B_lo, B_hi loads (2, 3) and their two products, as scaled_tiles.h and
// packed_k.cc do (with common/amx_tiles.h's instructions).
template <int kC, int kA>
inline void KQuantStep(const std::int8_t* a, const std::int8_t* lo, const std::int8_t* hi) {
  detail::TileLoad<kA, 1024>(a, 64);
  detail::TileLoad<2, 1024>(lo, 64);
  detail::TileLoad<3, 1024>(hi, 64);
  detail::TileDpbsud<kC, kA, 2>();
  detail::TileDpbssd<kC + 1, kA, 3>();
}
template <int kSet>
inline void KQuantBlock(const std::int8_t* a, const std::int8_t* lo, const std::int8_t* hi, std::int32_t* c) {
  constexpr int kC = 4 + 2 * kSet, kPrev = 6 - 2 * kSet;
  detail::TileStore<kPrev, 1024>(c, 64);
  detail::TileStore<kPrev + 1, 1024>(c + 256, 64);
  detail::TileZero<kC>();
  detail::TileZero<kC + 1>();
  KQuantStep<kC, 0>(a, lo, hi);
  KQuantStep<kC, 1>(a + 1024, lo + 1024, hi + 1024);
  KQuantStep<kC, 0>(a + 2048, lo + 2048, hi + 2048);
  KQuantStep<kC, 1>(a + 3072, lo + 3072, hi + 3072);
}

KVSHARE_AMX_TARGET double KQuantSteps(std::int32_t* sink) {
  alignas(64) std::int8_t a[4096], lo[4096], hi[4096];
  alignas(64) std::int32_t c[1024];
  for (int i = 0; i < 4096; ++i) a[i] = lo[i] = hi[i] = 1;
  _tile_loadconfig(&detail::FullTiles());
  const std::int64_t pairs = kTileInstrs / 32;
  for (std::int64_t r = 0; r < pairs; ++r) {
    KQuantBlock<0>(a, lo, hi, c);
    KQuantBlock<1>(a, lo, hi, c + 512);
  }
  _tile_stored(4, c, 64);
  _tile_release();
  *sink = c[0];
  return 16.0 * 16.0 * 256.0 * static_cast<double>(2 * pairs);
}

__attribute__((target("avx512f,avx512vnni"))) double VnniChains(std::int32_t* sink) {
  __m512i acc[kVnniChains];
  for (int i = 0; i < kVnniChains; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(1);
  asm volatile("" : "+v"(a), "+v"(b));  // opaque: no folding of the rounds
  const std::int64_t rounds = kVnniInstrs / kVnniChains;
  for (std::int64_t r = 0; r < rounds; ++r) {
    for (int i = 0; i < kVnniChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  __m512i sum = acc[0];
  for (int i = 1; i < kVnniChains; ++i) sum = _mm512_add_epi32(sum, acc[i]);
  alignas(64) std::int32_t lanes[16];
  _mm512_store_si512(lanes, sum);  // not _mm512_reduce_add_epi32: GCC 12 warns inside it
  *sink = 0;
  for (const std::int32_t v : lanes) *sink += v;
  return 64.0 * kVnniChains * static_cast<double>(rounds);
}

double RunOne(Op op, int chains, std::int32_t* sink) {
  if (op == Op::kQ32Steps) return BlockSumSteps(sink);
  if (op == Op::kKQuantSteps) return KQuantSteps(sink);
  switch (op == Op::kVnni ? 0 : chains) {
    case 0: return VnniChains(sink);
    case 1: return TileChains<1>(op, sink);
    case 2: return TileChains<2>(op, sink);
    case 3: return TileChains<3>(op, sink);
    case 4: return TileChains<4>(op, sink);
    case 5: return TileChains<5>(op, sink);
    default: return TileChains<6>(op, sink);
  }
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Rate {
  double wall = 0.0;  // all threads' MACs over the wall time
  double core = 0.0;  // all threads' MACs over their summed CPU time
};

// Best rates of `reps` runs (after a warm-up) on `threads` threads.
Rate Measure(Op op, int chains, int threads, int reps) {
  std::vector<std::int32_t> sinks(static_cast<std::size_t>(threads));
  std::vector<double> macs(static_cast<std::size_t>(threads)), cpu(static_cast<std::size_t>(threads));
  Rate best;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      const auto u = static_cast<std::size_t>(t);
      pool.emplace_back([&, u] {
        const double c0 = ThreadCpuSeconds();
        macs[u] = RunOne(op, chains, &sinks[u]);
        cpu[u] = ThreadCpuSeconds() - c0;
      });
    }
    for (auto& th : pool) th.join();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double total = 0.0, cpu_total = 0.0;
    for (std::size_t u = 0; u < macs.size(); ++u) total += macs[u], cpu_total += cpu[u];
    if (r > 0) {
      best.wall = std::max(best.wall, total / sec);
      if (cpu_total > 0.0) best.core = std::max(best.core, total / cpu_total);
    }
  }
  return best;
}
#endif  // KVSHARE_AMX_PEAK

}  // namespace

AmxPeakRates MeasureAmxPeak(int threads, int reps) {
  AmxPeakRates out;
#if KVSHARE_AMX_PEAK
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni")) {
    const Rate v = Measure(Op::kVnni, 0, threads, reps);
    out.vnni = v.wall, out.vnni_core = v.core;
  }
  if (!detail::AmxUsable()) return out;
  const Rate q32 = Measure(Op::kQ32Steps, 1, threads, reps), kq = Measure(Op::kKQuantSteps, 1, threads, reps);
  out.q32_roof = q32.wall, out.q32_roof_core = q32.core;
  out.kquant_roof = kq.wall, out.kquant_roof_core = kq.core;
  for (int n = 1; n <= 6; ++n) {
    const Rate ssd = Measure(Op::kSsd, n, threads, reps);
    const Rate usd = Measure(Op::kUsd, n, threads, reps);
    const Rate bf16 = Measure(Op::kBf16, n, threads, reps);
    if (ssd.wall > out.ssd) out.ssd = ssd.wall, out.ssd_chains = n;
    if (usd.wall > out.usd) out.usd = usd.wall, out.usd_chains = n;
    if (bf16.wall > out.bf16) out.bf16 = bf16.wall, out.bf16_chains = n;
    out.ssd_core = std::max(out.ssd_core, ssd.core);
    out.usd_core = std::max(out.usd_core, usd.core);
    out.bf16_core = std::max(out.bf16_core, bf16.core);
  }
#else
  (void)threads;
  (void)reps;
#endif
  return out;
}

}  // namespace kvshare::bench
