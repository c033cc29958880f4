// Prefill attention on Hopper (sm_90a): the FlashAttention-2 loop of
// attend_mma_cuda.cu with its products on warpgroup MMA (wgmma) and its K/V
// tiles brought in by the tensor copy engine (TMA), after FlashAttention-3
// (Shah et al. 2024, §3.1: producer / consumer warpgroups).
//
// Block (384 threads, one per multiprocessor): warpgroup 0 is the producer;
// one of its threads issues the TMA loads of each K and V tile (KT keys x H
// dims, 64-dim boxes of 128-byte rows in the 128-byte swizzle) into a ring of
// 2 stages, each completing on a "full" mbarrier; the consumers free a stage
// through its "empty" mbarrier (one arrival per consumer warp). Warpgroups 1
// and 2 are consumers of 64 M-rows each (GQA packing as attend_mma_cuda.cu:
// M-row = s * G + g; at H 512 both take the same rows and split the output
// dims, attend_wgmma_plan.h). The producer gives up registers (setmaxnreg)
// so the consumers hold their fp32 accumulators.
// Per consumer and tile: S = Q K^T (wgmma, Q and K from shared memory), then
// exactly the mma kernel's per-element steps: scale, softcap, the visibility
// rule (attend.h's VisibleKeys, only where a row does not see the whole tile),
// the online softmax in base 2, P rounded to the K/V dtype into A fragments
// in registers (the accumulator layout of S is the A layout of P V), O += P V
// (wgmma, V from shared memory read transposed). The overlapped loop (H 128,
// 512) issues tile i + 1's Q K^T and tile i's P V together and runs tile
// i + 1's softmax while P V does (FlashAttention-3 §3.2); the plain loop (H
// 256, or PrefillPath::kNoOverlap) does one tile at a time and skips tiles
// outside the consumer's rows' keys. With one key split the block writes
// the output itself (as attend_cuda.cu's combine kernel would); else it
// leaves (m, l, acc[H]) per row in its split's workspace slot for the
// combine kernel. Every order depends only on the shapes: results are
// deterministic.
// Keys past kv_len[b] inside the last tile are read by TMA (the tensor spans
// the longest row): their scores are masked, and their V rows are zeroed in
// shared memory before P V (0 * NaN would be NaN).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

#include "common/float_convert.h"
#include "cuda/attend_cuda.h"
#include "cuda/attend_wgmma_cuda.h"
#include "cuda/attend_wgmma_plan.h"
#include "cuda/cuda_check.h"
#include "cuda/wgmma_ptx.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "attend_wgmma_cuda.cu is built for sm_90a only (src/cuda/CMakeLists.txt)"
#endif

namespace kvshare::detail {
namespace {

using namespace sm90;

static_assert(kWgmmaMaxKeySplits == kCudaMaxKeySplits, "one limit on key splits");

constexpr int kWarp = 32;
constexpr int kWarpgroup = 128;
constexpr int kThreads = 3 * kWarpgroup;
constexpr int kConsumerThreads = 2 * kWarpgroup;
constexpr int kConsumerWarps = kConsumerThreads / kWarp;
constexpr int kConsumerBarrier = 1;  // named barrier of the two consumer warpgroups
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;
constexpr std::int64_t kNone = INT64_MAX;  // an empty range's lo

// Where the key, KV-head and batch coordinates go among a tensor map's dims
// 1-3 (attend_wgmma_plan.h's KvTensorMapPlan).
struct TmaSlots {
  int key, head, batch;
};

struct Range {
  std::int64_t lo = kNone, hi = -1;  // inclusive; empty when lo > hi
};

__device__ Range WarpUnion(Range r) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    r.lo = min(r.lo, static_cast<std::int64_t>(__shfl_xor_sync(kFullMask, static_cast<long long>(r.lo), o)));
    r.hi = max(r.hi, static_cast<std::int64_t>(__shfl_xor_sync(kFullMask, static_cast<long long>(r.hi), o)));
  }
  return r;
}

// Two floats rounded to T, packed (x in the low half).
template <typename T>
__device__ std::uint32_t Pack2(float x, float y) {
  std::uint32_t u;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(x, y);
    std::memcpy(&u, &h, 4);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    std::memcpy(&u, &h, 4);
  }
  return u;
}

// The coordinate of tensor-map dim `slot + 1` for key j, KV head n, row b.
__device__ int Coord(const TmaSlots& s, int slot, int j, int n, int b) {
  return s.key == slot ? j : s.head == slot ? n : b;
}

// kOverlap: tile it + 1's Q K^T and softmax overlap tile it's P V.
template <typename T, int H, bool kOverlap>
__global__ void __launch_bounds__(kThreads, 1)
    WgmmaKernel(const AttendParams p, const MmaSplit sp, float* ws, const __grid_constant__ CUtensorMap k_map,
                const __grid_constant__ CUtensorMap v_map, const TmaSlots slots) {
  constexpr WgmmaShape kShape = WgmmaShapeFor(H);
  constexpr int KT = kShape.keys_per_tile, WGD = kShape.dim_groups, ROWS = kShape.rows, STAGES = kShape.stages;
  constexpr int HD = H / WGD;                                     // output dims per consumer
  constexpr int BOXES = H / 64;                                   // 128-byte columns of a tile
  constexpr int NB = KT / 8;                                      // 8-key n-blocks of a score tile
  constexpr int KC = KT / 16;                                     // 16-key steps of P V
  constexpr int DN = HD / 128;                                    // 128-dim wgmma of P V per key step
  constexpr std::uint32_t kQBox = ROWS * 128, kKvBox = KT * 128;  // bytes of one 64-dim column
  constexpr std::uint32_t kTileBytes = KT * H * 2;
  static_assert(ROWS * H * 2 + STAGES * 2 * kTileBytes + 2 * STAGES * 8 + 1024 == kShape.smem_bytes, "layout");
  static_assert(HD % 128 == 0 && KT % 16 == 0, "tile shape");

  extern __shared__ unsigned char smem_raw[];
  // 1024-byte aligned (the 128-byte swizzle's atom): Q [BOXES][ROWS][128 B],
  // then per stage K and V [BOXES][KT][128 B], then the barriers.
  const std::uint32_t base = (SmemAddr(smem_raw) + 1023u) & ~1023u;
  const std::uint32_t q_smem = base;
  const std::uint32_t kv_smem = q_smem + BOXES * kQBox;
  const std::uint32_t bars = kv_smem + STAGES * 2 * kTileBytes;  // full[STAGES], empty[STAGES]
  __shared__ long long warp_lo[kConsumerWarps], warp_hi[kConsumerWarps];

  const int tid = static_cast<int>(threadIdx.x), wg = tid / kWarpgroup, lane = tid % kWarp;
  const int cw = wg - 1;              // consumer index (wg >= 1)
  const int cwarp = tid / kWarp - 4;  // consumer warp 0-7
  const int gid = lane >> 2, tig = lane & 3;
  const int b = static_cast<int>(blockIdx.x) / p.kv_heads, n = static_cast<int>(blockIdx.x) % p.kv_heads;
  const int G = p.num_heads / p.kv_heads;
  const int split = static_cast<int>(blockIdx.y);
  // M-tiles last to first: under a causal mask the late rows see the most
  // keys, and starting them first keeps them out of the final wave.
  const int cta_row0 = static_cast<int>(gridDim.z - 1 - blockIdx.z) * ROWS;
  const std::int64_t split_lo = split * sp.per_split, split_hi = split_lo + sp.per_split - 1;

  // A consumer lane's two M-rows (gid, gid + 8 of its warp's 16) and their
  // visible keys in this split.
  const int warp_row0 = (WGD == 1 ? cw * 64 : 0) + (cwarp % 4) * 16;
  Range row[2];
  int row_s[2] = {0, 0}, row_h[2] = {0, 0};
  if (wg > 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int mr = cta_row0 + warp_row0 + gid + 8 * i;
      row_s[i] = mr / G;
      row_h[i] = n * G + mr % G;
      if (row_s[i] < p.q_len) {
        const KeyRange k = VisibleKeys(p, b, row_s[i]);
        const std::int64_t lo = max(k.lo, split_lo), hi = min(k.hi, split_hi);
        if (lo <= hi) row[i] = {lo, hi};
      }
    }
    Range mine = row[0];
    mine.lo = min(mine.lo, row[1].lo);
    mine.hi = max(mine.hi, row[1].hi);
    const Range u = WarpUnion(mine);
    if (lane == 0) {
      warp_lo[cwarp] = u.lo;
      warp_hi[cwarp] = u.hi;
    }
  } else if (tid == 0) {
    for (int st = 0; st < STAGES; ++st) {
      MbarInit(bars + 8 * st, 1);                          // the producer's arrival + TMA bytes
      MbarInit(bars + 8 * (STAGES + st), kConsumerWarps);  // one arrival per consumer warp
    }
    MbarInitFence();
    PrefetchTensorMap(&k_map);
    PrefetchTensorMap(&v_map);
  }
  __syncthreads();
  Range cta, mine_wg;  // the keys of the block's rows, of this consumer's rows
  for (int w = 0; w < kConsumerWarps; ++w) {
    cta.lo = min(cta.lo, static_cast<std::int64_t>(warp_lo[w]));
    cta.hi = max(cta.hi, static_cast<std::int64_t>(warp_hi[w]));
    if (w / 4 == cw) {
      mine_wg.lo = min(mine_wg.lo, static_cast<std::int64_t>(warp_lo[w]));
      mine_wg.hi = max(mine_wg.hi, static_cast<std::int64_t>(warp_hi[w]));
    }
  }
  const int tiles = cta.lo <= cta.hi ? static_cast<int>((cta.hi - cta.lo) / KT + 1) : 0;

  if (wg == 0) {
    // ---- producer ----
    RegDealloc<40>();
    if (tid == 0) {
      for (int it = 0; it < tiles; ++it) {
        const int st = it % STAGES;
        if (it >= STAGES) MbarWait<true>(bars + 8 * (STAGES + st), ((it / STAGES) - 1) & 1);
        const std::uint32_t full = bars + 8 * st;
        MbarArriveExpectTx(full, 2 * kTileBytes);
        const int j = static_cast<int>(cta.lo + static_cast<std::int64_t>(it) * KT);
        const int c1 = Coord(slots, 0, j, n, b), c2 = Coord(slots, 1, j, n, b), c3 = Coord(slots, 2, j, n, b);
        const std::uint32_t k_tile = kv_smem + st * 2 * kTileBytes, v_tile = k_tile + kTileBytes;
#pragma unroll
        for (int box = 0; box < BOXES; ++box) {
          TmaLoad4(k_tile + box * kKvBox, &k_map, box * 64, c1, c2, c3, full);
          TmaLoad4(v_tile + box * kKvBox, &v_map, box * 64, c1, c2, c3, full);
        }
      }
      // Watchdog: the consumers must release the last tile of each stage
      // (phase it / STAGES of its empty barrier; the earlier phases were
      // waited for above). A release follows the consumers' wait on the
      // tile's loads and every P V that read it, so a stall anywhere in the
      // key loop (a load that never lands, a consumer waiting on the wrong
      // phase or at a barrier the other one skips) traps here rather than
      // hang (the consumers' own waits stay bare: wgmma_ptx.h).
      for (int it = tiles > STAGES ? tiles - STAGES : 0; it < tiles; ++it) {
        MbarWait<true>(bars + 8 * (STAGES + it % STAGES), (it / STAGES) & 1);
      }
    }
    return;
  }

  // ---- consumers ----
  RegAlloc<232>();
  const int ctid = tid - kWarpgroup;  // 0-255

  // Q (fp32, [B, S, N, H]) rounded to T into q_smem in the swizzled layout.
  for (int i = ctid; i < ROWS * (H / 8); i += kConsumerThreads) {
    const int r = i / (H / 8), c = i % (H / 8);  // row, 8-dim chunk
    const int mr = cta_row0 + r, s = mr / G, h = n * G + mr % G;
    std::uint32_t v[4] = {0, 0, 0, 0};
    if (s < p.q_len) {
      const float4* src = reinterpret_cast<const float4*>(
          p.q + ((static_cast<std::int64_t>(b) * p.q_len + s) * p.num_heads + h) * H + c * 8);
      const float4 x = src[0], y = src[1];
      v[0] = Pack2<T>(x.x, x.y);
      v[1] = Pack2<T>(x.z, x.w);
      v[2] = Pack2<T>(y.x, y.y);
      v[3] = Pack2<T>(y.z, y.w);
    }
    const std::uint32_t at = q_smem + (c / 8) * kQBox + r * 128 + (((c % 8) ^ (r % 8)) << 4);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
                 : "memory");
  }
  FenceProxyAsync();
  NamedBarrier(kConsumerBarrier, kConsumerThreads);

  const std::uint32_t q_wg = q_smem + (WGD == 1 ? cw * 64 * 128 : 0);
  const int dim0 = WGD == 1 ? 0 : cw * HD;  // the consumer's first output dim
  const std::int64_t kv_len = p.kv_len[b];
  float o[DN][64];
#pragma unroll
  for (int d = 0; d < DN; ++d) {
#pragma unroll
    for (int e = 0; e < 64; ++e) o[d][e] = 0.0f;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // m in base-2 units (x * log2 e)
  const float scale2 = p.scale * kLog2e;

  float s[KT / 2];         // scores, then probabilities, of the tile in flight
  std::uint32_t a[KC][4];  // P of the tile whose P V is next, as A fragments

  // Waits for tile it's K and V; zeroes V rows past the row's keys (the same
  // for the whole block). Returns the tile's first key.
  auto wait_tile = [&](int it) {
    MbarWait<false>(bars + 8 * (it % STAGES), (it / STAGES) & 1);
    const std::int64_t t = cta.lo + static_cast<std::int64_t>(it) * KT;
    if (t + KT > kv_len) {
      const std::uint32_t v_tile = kv_smem + (it % STAGES) * 2 * kTileBytes + kTileBytes;
      const int r0 = static_cast<int>(max(kv_len - t, static_cast<std::int64_t>(0)));
      for (int i = ctid; i < (KT - r0) * BOXES * 8; i += kConsumerThreads) {
        const int r = r0 + i / (BOXES * 8), box = (i / 8) % BOXES, c = i % 8;
        asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(v_tile + box * kKvBox + r * 128 + c * 16),
                     "r"(0)
                     : "memory");
      }
      FenceProxyAsync();
      NamedBarrier(kConsumerBarrier, kConsumerThreads);
    }
    return t;
  };
  // S = Q K^T of tile it: H / 16 steps of 16 dims (32 bytes along the rows).
  auto issue_qk = [&](int it) {
    const std::uint32_t k_tile = kv_smem + (it % STAGES) * 2 * kTileBytes;
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < H / 16; ++kk) {
      const std::uint32_t step = (kk % 4) * 32;
      WgmmaSS<T, KT>(s, SmemDesc(q_wg + (kk / 4) * kQBox + step, 16, 1024),
                     SmemDesc(k_tile + (kk / 4) * kKvBox + step, 16, 1024), kk > 0 ? 1 : 0);
    }
    WgmmaCommit();
  };
  // O += P V of tile it: per 16 keys (2 swizzle atoms of 8 keys down the
  // tile), per 128 dims (2 columns of 64).
  auto issue_pv = [&](int it) {
    const std::uint32_t v_tile = kv_smem + (it % STAGES) * 2 * kTileBytes + kTileBytes;
    WgmmaFence();
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
#pragma unroll
      for (int d = 0; d < DN; ++d) {
        const std::uint32_t col = (dim0 + d * 128) / 64;
        WgmmaRS128<T>(o[d], a[kc], SmemDesc(v_tile + col * kKvBox + kc * 16 * 128, kKvBox, 1024));
      }
    }
    WgmmaCommit();
  };
  // The scores of the tile at key t into probabilities in place: base-2
  // units, the visibility rule where the tile is not wholly visible to the
  // row, the running max per row (a row's 8 keys per n-block spread over the
  // 4 lanes of its quad), P = exp2(x - m), l. corr: the factor O must take.
  auto softmax = [&](std::int64_t t, float(&corr)[2]) {
    int vis_lo[2], vis_hi[2];  // visible key offsets from t, clamped to [-1, KT]
    bool whole[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      vis_lo[i] =
          static_cast<int>(min(max(row[i].lo - t, static_cast<std::int64_t>(-1)), static_cast<std::int64_t>(KT)));
      vis_hi[i] =
          static_cast<int>(min(max(row[i].hi - t, static_cast<std::int64_t>(-1)), static_cast<std::int64_t>(KT)));
      whole[i] = vis_lo[i] <= 0 && vis_hi[i] >= KT - 1;
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1, jo = nb * 8 + tig * 2 + (e & 1);
        float x = s[nb * 4 + e];
        x = p.softcap > 0.0f ? p.softcap * tanhf(x * p.scale / p.softcap) * kLog2e : x * scale2;
        if (!whole[i] && (jo < vis_lo[i] || jo > vis_hi[i])) x = -INFINITY;
        s[nb * 4 + e] = x;
        mx[i] = fmaxf(mx[i], x);
      }
    }
    float base2[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(kFullMask, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(kFullMask, mx[i], 2));
      const float m_new = fmaxf(m[i], mx[i]);
      base2[i] = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet: every weight 0
      corr[i] = exp2f(m[i] - base2[i]);
      m[i] = m_new;
      l[i] *= corr[i];
    }
#pragma unroll
    for (int e = 0; e < KT / 2; ++e) {
      s[e] = exp2f(s[e] - base2[(e >> 1) & 1]);
      l[(e >> 1) & 1] += s[e];
    }
  };
  // O *= corr; P (rounded to T) into the A fragments: keys 16 kc .. 16 kc +
  // 15 are the score n-blocks 2 kc and 2 kc + 1.
  auto rescale_and_pack = [&](const float(&corr)[2]) {
#pragma unroll
    for (int d = 0; d < DN; ++d) {
#pragma unroll
      for (int e = 0; e < 64; ++e) o[d][e] *= corr[(e >> 1) & 1];
    }
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
#pragma unroll
      for (int q = 0; q < 4; ++q) a[kc][q] = Pack2<T>(s[kc * 8 + 2 * q], s[kc * 8 + 2 * q + 1]);
    }
  };
  auto release = [&](int it) {
    __syncwarp();
    if (lane == 0) MbarArrive(bars + 8 * (STAGES + it % STAGES));
  };

  float corr[2];
  if constexpr (kOverlap) {
    // Tile it + 1's Q K^T and softmax run while tile it's P V does
    // (FlashAttention-3 §3.2): P of tile it sits packed in a while s takes
    // the next scores. Every tile of the block's range, for both consumers.
    if (tiles > 0) {
      const std::int64_t t0 = wait_tile(0);
      issue_qk(0);
      WgmmaWait<0>();
      FenceRegs(s);
      softmax(t0, corr);
      rescale_and_pack(corr);
    }
    // The last tile's P V apart: no branch around an issue inside the loop
    // (ptxas serializes the wgmma when it cannot tell which are in flight).
    for (int it = 0; it + 1 < tiles; ++it) {
      const std::int64_t t_next = wait_tile(it + 1);
      issue_qk(it + 1);
      issue_pv(it);
      WgmmaWait<1>();  // Q K^T of it + 1 (committed first) is done
      FenceRegs(s);
      softmax(t_next, corr);
      WgmmaWait<0>();
#pragma unroll
      for (int d = 0; d < DN; ++d) FenceRegs(o[d]);
      release(it);
      rescale_and_pack(corr);
    }
    if (tiles > 0) {
      issue_pv(tiles - 1);
      WgmmaWait<0>();
#pragma unroll
      for (int d = 0; d < DN; ++d) FenceRegs(o[d]);
      release(tiles - 1);
    }
  } else {
    // One tile at a time; tiles outside this consumer's rows' keys skipped.
    for (int it = 0; it < tiles; ++it) {
      const std::int64_t t = wait_tile(it);
      if (t <= mine_wg.hi && t + KT - 1 >= mine_wg.lo) {
        issue_qk(it);
        WgmmaWait<0>();
        FenceRegs(s);
        softmax(t, corr);
        rescale_and_pack(corr);
        issue_pv(it);
        WgmmaWait<0>();
#pragma unroll
        for (int d = 0; d < DN; ++d) FenceRegs(o[d]);
      }
      release(it);
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(kFullMask, l[i], 1);
    l[i] += __shfl_xor_sync(kFullMask, l[i], 2);
  }

  if (ws == nullptr) {
    // One key split: the output itself, as attend_cuda.cu's combine kernel
    // computes it (a row with no visible key gets zeros, written as such:
    // its o is 0 * V, NaN where a V it did not see is infinite; a sink adds
    // exp(sink - M) to the denominator only).
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (row_s[i] >= p.q_len) continue;
      float w = 0.0f;  // o -> output
      if (row[i].lo <= row[i].hi) {
        const float mn = m[i] / kLog2e;  // natural units, as the workspace holds it
        const float M = p.sink != nullptr ? fmaxf(mn, p.sink[row_h[i]]) : mn;
        const float e = expf(mn - M);
        const float L = l[i] * e + (p.sink != nullptr ? expf(p.sink[row_h[i]] - M) : 0.0f);
        w = L > 0.0f ? e / L : 0.0f;
      }
      const std::int64_t base =
          ((static_cast<std::int64_t>(b) * p.q_len + row_s[i]) * p.num_heads + row_h[i]) * static_cast<std::int64_t>(H);
#pragma unroll
      for (int d = 0; d < DN; ++d) {
#pragma unroll
        for (int nb = 0; nb < 16; ++nb) {
          const int dim = dim0 + d * 128 + nb * 8 + tig * 2;
          StoreFloatElement(p.out, p.out_dtype, base + dim, w != 0.0f ? o[d][nb * 4 + 2 * i] * w : 0.0f);
          StoreFloatElement(p.out, p.out_dtype, base + dim + 1, w != 0.0f ? o[d][nb * 4 + 2 * i + 1] * w : 0.0f);
        }
      }
    }
    return;
  }
  // (m, l, acc) per row into the split's slot (m back in natural units; at
  // H 512 each consumer writes its dims, consumer 0 m and l).
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (row_s[i] >= p.q_len) continue;
    const std::int64_t r = (static_cast<std::int64_t>(b) * p.num_heads + row_h[i]) * p.q_len + row_s[i];
    float* part = ws + (r * sp.key_splits + split) * (H + 2);
    if (tig == 0 && (WGD == 1 || cw == 0)) {
      part[0] = m[i] == -INFINITY ? -INFINITY : m[i] / kLog2e;
      part[1] = l[i];
    }
#pragma unroll
    for (int d = 0; d < DN; ++d) {
#pragma unroll
      for (int nb = 0; nb < 16; ++nb) {
        const int dim = dim0 + d * 128 + nb * 8 + tig * 2;
        *reinterpret_cast<float2*>(part + 2 + dim) = make_float2(o[d][nb * 4 + 2 * i], o[d][nb * 4 + 2 * i + 1]);
      }
    }
  }
}

// ---- host side ----------------------------------------------------------

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled, looked up once through the runtime
// (the binary does not link libcuda); null when the driver lacks it.
EncodeTiledFn EncodeTiled() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<EncodeTiledFn>(nullptr);
    }
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

struct DeviceInfo {
  int cc_major = 0, cc_minor = 0, sms = 132;
};
// The current device at the first call (the op runs on one device).
const DeviceInfo& CurrentDevice() {
  static const DeviceInfo info = [] {
    DeviceInfo d;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      d = DeviceInfo{};
    }
    return d;
  }();
  return info;
}

std::atomic<int> g_path{-1};  // -1: not read yet; else a PrefillPath
std::atomic<std::int64_t> g_launches{0};
std::mutex g_refusal_mutex;
std::string g_refusal;

void Refuse(const std::string& why) {
  const std::lock_guard<std::mutex> lock(g_refusal_mutex);
  g_refusal = why;
}

// Encodes one K or V map; "" or the driver's refusal.
std::string Encode(const KvSource& s, const KvTensorMapPlan& plan, CUtensorMap* map) {
  const CUresult r = EncodeTiled()(
      map, s.dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
      const_cast<void*>(s.data), plan.dims, plan.strides_bytes, plan.box, std::array<cuuint32_t, 4>{1, 1, 1, 1}.data(),
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? "" : "cuTensorMapEncodeTiled refused the K/V map (CUresult " + std::to_string(r) + ")";
}

template <typename T, int H>
void Launch(const AttendParams& p, const WgmmaCall& c, float* ws, cudaStream_t stream) {
  constexpr int smem = WgmmaShapeFor(H).smem_bytes;
  auto* kernel = WgmmaKernel<T, H, false>;
  if constexpr (WgmmaShapeFor(H).overlap) {
    if (c.overlap) kernel = WgmmaKernel<T, H, true>;
  }
  CudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
            "GroupQueryAttention (device cuda): Hopper kernel shared memory");
  const dim3 grid(static_cast<unsigned>(p.batch * p.kv_heads), static_cast<unsigned>(c.split.key_splits),
                  static_cast<unsigned>(c.m_tiles));
  kernel<<<grid, kThreads, smem, stream>>>(p, c.split, ws, c.k_map, c.v_map,
                                           TmaSlots{c.slot_key, c.slot_head, c.slot_batch});
  CudaCheck(cudaGetLastError(), "GroupQueryAttention (device cuda): Hopper kernel launch");
}

template <typename T>
void LaunchType(const AttendParams& p, const WgmmaCall& c, float* ws, cudaStream_t stream) {
  switch (p.head_size) {
    case 128: Launch<T, 128>(p, c, ws, stream); break;
    case 256: Launch<T, 256>(p, c, ws, stream); break;
    default: Launch<T, 512>(p, c, ws, stream); break;
  }
}

}  // namespace

void SetPrefillPath(PrefillPath path) { g_path.store(static_cast<int>(path)); }

void ResetPrefillPath() { g_path.store(-1); }

PrefillPath CurrentPrefillPath() {
  int v = g_path.load();
  if (v < 0) {
    const char* e = std::getenv("KVSHARE_CUDA_PREFILL");
    const std::string v_env = e != nullptr ? e : "";
    const int from_env = static_cast<int>(v_env == "mma"         ? PrefillPath::kMma
                                          : v_env == "workspace" ? PrefillPath::kWorkspace
                                          : v_env == "nooverlap" ? PrefillPath::kNoOverlap
                                                                 : PrefillPath::kAuto);
    g_path.compare_exchange_strong(v, from_env);
    v = g_path.load();
  }
  return static_cast<PrefillPath>(v);
}

std::optional<WgmmaCall> PrepareWgmma(const AttendParams& p, std::int64_t max_kv_len) {
  if (CudaPlainKernelsOnly() || CurrentPrefillPath() == PrefillPath::kMma) {
    Refuse("KVSHARE_CUDA_PLAIN=1 or the mma prefill path chosen");
    return std::nullopt;
  }
  const DeviceInfo& dev = CurrentDevice();
  std::string why = WgmmaRefusal(p, max_kv_len, dev.cc_major, dev.cc_minor);
  if (why.empty() && EncodeTiled() == nullptr) why = "the driver has no cuTensorMapEncodeTiled";
  WgmmaCall c;
  if (why.empty()) {
    const int kt = WgmmaShapeFor(p.head_size).keys_per_tile;
    KvTensorMapPlan kp, vp;
    PlanKvTensorMap(p.k, p.head_size, p.kv_heads, p.batch, max_kv_len, kt, &kp);
    PlanKvTensorMap(p.v, p.head_size, p.kv_heads, p.batch, max_kv_len, kt, &vp);
    if (kp.slot_key != vp.slot_key || kp.slot_head != vp.slot_head || kp.slot_batch != vp.slot_batch) {
      why = "K and V laid out with different axis orders";
    } else {
      why = Encode(p.k, kp, &c.k_map);
      if (why.empty()) why = Encode(p.v, vp, &c.v_map);
    }
    c.slot_key = kp.slot_key;
    c.slot_head = kp.slot_head;
    c.slot_batch = kp.slot_batch;
  }
  if (!why.empty()) {
    Refuse(why);
    return std::nullopt;
  }
  const WgmmaSplit s = WgmmaSplitFor(p, max_kv_len, dev.sms);
  if (s.m_tiles > 65535) {  // gridDim.z
    Refuse("more than 65535 blocks of M-rows");
    return std::nullopt;
  }
  c.split.key_splits = s.key_splits;
  c.split.per_split = s.per_split;
  c.m_tiles = s.m_tiles;
  c.direct_output = s.key_splits == 1 && CurrentPrefillPath() != PrefillPath::kWorkspace;
  c.overlap = CurrentPrefillPath() != PrefillPath::kNoOverlap;
  Refuse("");
  return c;
}

std::string LastWgmmaRefusal() {
  const std::lock_guard<std::mutex> lock(g_refusal_mutex);
  return g_refusal;
}

std::int64_t WgmmaLaunchCount() { return g_launches.load(); }

void AttendWgmmaCuda(const AttendParams& p, const WgmmaCall& call, float* ws, cudaStream_t stream) {
  if (p.k.dtype == DType::kBFloat16) {
    LaunchType<__nv_bfloat16>(p, call, ws, stream);
  } else {
    LaunchType<__half>(p, call, ws, stream);
  }
  g_launches.fetch_add(1);
}

}  // namespace kvshare::detail
