// Tensor-core attention over fp16 / bf16 K/V (FlashAttention-2, Dao 2023,
// Algorithm 1, on mma.sync.m16n8k16 with fp32 accumulation).
//
// GQA packing: the G = N / N_kv query heads of a KV head read the same K/V,
// so the M axis of the tiles is (query s, head g) pairs, M-row = s * G + g.
// A block of 4 warps takes one (row b, KV head n, key split, M-tile); its K/V
// tiles go through shared memory (cp.async, two stages, rows swizzled by
// 16-byte chunk so ldmatrix is conflict-free). The warps split the block's
// M-rows (prefill: 16 each), or share 16 M-rows and split each tile's keys
// (decode, S * G <= 16: several warps' loads in flight per block; they merge
// in warp order through shared memory at the end), or split the output dims
// (H = 512, H = 256 decode); ShapeFor has the shapes.
// Per warp: S = Q K^T on the tensor cores, scale, softcap, the visibility
// rule per element (attend.h's VisibleKeys; only where a sub-tile is not
// wholly visible; sub-tiles wholly outside the warp's rows are skipped), the
// online softmax in base 2, P (rounded to the cache dtype) times V into fp32
// accumulators. The block leaves (m, l, acc[H]) per row in its split's
// workspace slot; attend_cuda.cu's combine kernel merges the splits in order.
// Every order depends only on the shapes: results are deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/attend_mma_cuda.h"

#include "cuda/attend_cuda.h"
#include "cuda/cuda_check.h"

namespace kvshare::detail {
namespace {

constexpr int kWarp = 32;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kStages = 2;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;
constexpr std::int64_t kNone = INT64_MAX;  // an empty range's lo

// ---- PTX wrappers -------------------------------------------------------

__device__ std::uint32_t SmemAddr(const void* p) { return static_cast<std::uint32_t>(__cvta_generic_to_shared(p)); }

// 16 bytes global -> shared, zero-filled when !valid (nothing is read then).
__device__ void CpAsync16(std::uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ void LdMatrixX4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ void LdMatrixX4Trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a (16 x 16, row) * b (16 x 8, col), fp32 accumulators.
template <typename T>
__device__ void Mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, packed (x in the low half).
template <typename T>
__device__ std::uint32_t Pack(float x, float y) {
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

// ---- tiles in shared memory ---------------------------------------------

// Byte offset of 16-byte chunk c of row r in a [rows][H] tile of 16-bit
// values: chunks permuted by r mod 8, so the 8 row addresses of an ldmatrix
// (same chunk, 8 consecutive rows) fall in 8 different bank groups.
template <int H>
__device__ std::uint32_t TileOffset(int r, int c) {
  return static_cast<std::uint32_t>(r * H * 2 + ((c ^ (r & 7)) << 4));
}

// Keys [t, t + KT) of (b, n) into a K tile and a V tile; keys past `last`
// are zero-filled (their V must not be garbage: 0 * NaN is NaN).
template <int H, int KT>
__device__ void LoadKv(const AttendParams& p, int b, int n, std::int64_t t, std::int64_t last, std::uint32_t k_tile,
                       std::uint32_t v_tile) {
  constexpr int kChunks = H / 8;
  const auto* kd = static_cast<const unsigned short*>(p.k.data);
  const auto* vd = static_cast<const unsigned short*>(p.v.data);
  for (int i = static_cast<int>(threadIdx.x); i < KT * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const std::int64_t j = t + r;
    const bool valid = j <= last;
    const std::uint32_t off = TileOffset<H>(r, c);
    CpAsync16(k_tile + off, valid ? kd + KvOffset(p.k, b, n, j) + c * 8 : kd, valid);
    CpAsync16(v_tile + off, valid ? vd + KvOffset(p.v, b, n, j) + c * 8 : vd, valid);
  }
}

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

// Warps of a block: WM along the M-rows (16 each), WK along the keys of a
// tile (KT / WK each), WD along the output dims (H / WD each); WM * WK * WD =
// 4. Warps that share rows and keys but not dims compute the same scores
// (the same bits) and each keeps its slice of the accumulators.
template <typename T, int H, int WM, int WK, int WD, int KT, bool QR, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) MmaKernel(AttendParams p, MmaSplit sp, float* ws) {
  static_assert(WM * WK * WD == kWarps, "warp roles");
  constexpr int KW = KT / WK;  // keys of a tile per warp
  constexpr int NB = KW / 8;   // score n-blocks
  constexpr int DC = H / 16;   // k-chunks of Q K^T
  constexpr int HD = H / WD;   // output dims per warp
  constexpr int ND = HD / 8;   // output n-blocks
  constexpr bool kQInRegs = QR;
  static_assert(KW % 16 == 0 && HD % 16 == 0 && H % 64 == 0, "tile shape");

  extern __shared__ __align__(128) unsigned char smem[];
  const std::uint32_t q_smem = SmemAddr(smem);             // [WM * 16][H]
  const std::uint32_t kv_smem = q_smem + WM * 16 * H * 2;  // stages x (K, V) x [KT][H]
  constexpr std::uint32_t kTileBytes = KT * H * 2;
  __shared__ long long cta_lo[kWarps], cta_hi[kWarps];

  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int wd = warp % WD, wm = (warp / WD) % WM, wk = warp / (WD * WM);
  const int gid = lane >> 2, tig = lane & 3;
  const int b = static_cast<int>(blockIdx.x) / p.kv_heads, n = static_cast<int>(blockIdx.x) % p.kv_heads;
  const int G = p.num_heads / p.kv_heads;
  const int split = static_cast<int>(blockIdx.y);
  // M-tiles last to first: under a causal mask the late rows see the most
  // keys, and starting them first keeps them out of the final wave.
  const int cta_row0 = static_cast<int>(gridDim.z - 1 - blockIdx.z) * WM * 16;
  const int row0 = cta_row0 + wm * 16;  // the warp's first M-row
  const std::int64_t split_lo = split * sp.per_split, split_hi = split_lo + sp.per_split - 1;

  // The lane's two M-rows (gid, gid + 8): their visible keys in this split.
  Range row[2];
  int row_s[2], row_h[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int mr = row0 + gid + 8 * i;
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
  const Range warp_keys = WarpUnion(mine);
  if (lane == 0) {
    cta_lo[warp] = warp_keys.lo;
    cta_hi[warp] = warp_keys.hi;
  }

  // Q (fp32, [B, S, N, H]) rounded to T into q_smem, by the whole block.
  for (int i = static_cast<int>(threadIdx.x); i < WM * 16 * (H / 8); i += kThreads) {
    const int r = i / (H / 8), c = i % (H / 8);
    const int mr = cta_row0 + r, s = mr / G, h = n * G + mr % G;
    std::uint32_t v[4] = {0, 0, 0, 0};
    if (s < p.q_len) {
      const float4* src = reinterpret_cast<const float4*>(
          p.q + ((static_cast<std::int64_t>(b) * p.q_len + s) * p.num_heads + h) * H + c * 8);
      const float4 x = src[0], y = src[1];
      v[0] = Pack<T>(x.x, x.y);
      v[1] = Pack<T>(x.z, x.w);
      v[2] = Pack<T>(y.x, y.y);
      v[3] = Pack<T>(y.z, y.w);
    }
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(q_smem + TileOffset<H>(r, c)), "r"(v[0]), "r"(v[1]),
                 "r"(v[2]), "r"(v[3]));
  }
  __syncthreads();
  Range cta;
  for (int w = 0; w < kWarps; ++w) {
    cta.lo = min(cta.lo, static_cast<std::int64_t>(cta_lo[w]));
    cta.hi = max(cta.hi, static_cast<std::int64_t>(cta_hi[w]));
  }

  // A fragments of Q chunk kc (16 rows x 16 dims): ldmatrix x4 of rows
  // 0-7 / 8-15 and dims 0-7 / 8-15.
  const std::uint32_t q_tile = q_smem + wm * 16 * H * 2;
  auto load_q = [&](int kc, std::uint32_t(&a)[4]) {
    const int mat = lane >> 3;
    LdMatrixX4(a, q_tile + TileOffset<H>((mat & 1) * 8 + (lane & 7), 2 * kc + (mat >> 1)));
  };
  std::uint32_t qf[kQInRegs ? DC : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kc = 0; kc < DC; ++kc) load_q(kc, qf[kc]);
  }

  float o[ND][4];
#pragma unroll
  for (int d = 0; d < ND; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // m in base-2 units (x * log2 e)
  const float scale2 = p.scale * kLog2e;

  const int tiles = cta.lo <= cta.hi ? static_cast<int>((cta.hi - cta.lo) / KT + 1) : 0;
  if (tiles > 0) LoadKv<H, KT>(p, b, n, cta.lo, cta.hi, kv_smem, kv_smem + kTileBytes);
  CpAsyncCommit();
  for (int it = 0; it < tiles; ++it) {
    if (it + 1 < tiles) {
      const std::uint32_t next = kv_smem + ((it + 1) % kStages) * 2 * kTileBytes;
      LoadKv<H, KT>(p, b, n, cta.lo + static_cast<std::int64_t>(it + 1) * KT, cta.hi, next, next + kTileBytes);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();

    const std::uint32_t k_tile = kv_smem + (it % kStages) * 2 * kTileBytes, v_tile = k_tile + kTileBytes;
    const std::int64_t t = cta.lo + static_cast<std::int64_t>(it) * KT + wk * KW;  // the warp's first key
    if (t <= warp_keys.hi && t + KW - 1 >= warp_keys.lo) {
      // S = Q K^T for the warp's KW keys.
      float s[NB][4];
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < DC; ++kc) {
        std::uint32_t a[4];
        if constexpr (kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = qf[kc][i];
        } else {
          load_q(kc, a);
        }
#pragma unroll
        for (int nb = 0; nb < NB; nb += 2) {
          // Keys of n-blocks nb, nb + 1 x dims of chunks 2kc, 2kc + 1.
          const int mat = lane >> 3;
          std::uint32_t kb[4];
          LdMatrixX4(kb, k_tile + TileOffset<H>(wk * KW + (nb + (mat >> 1)) * 8 + (lane & 7), 2 * kc + (mat & 1)));
          Mma<T>(s[nb], a, kb[0], kb[1]);
          Mma<T>(s[nb + 1], a, kb[2], kb[3]);
        }
      }
      // Scores in base-2 units, the visibility rule where the sub-tile is not
      // wholly visible to the row, the tile max per row (a row's 8 keys per
      // n-block spread over the 4 lanes of its quad).
      int vis_lo[2], vis_hi[2];  // visible key offsets from t, clamped to [-1, KW]
      bool whole[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        vis_lo[i] =
            static_cast<int>(min(max(row[i].lo - t, static_cast<std::int64_t>(-1)), static_cast<std::int64_t>(KW)));
        vis_hi[i] =
            static_cast<int>(min(max(row[i].hi - t, static_cast<std::int64_t>(-1)), static_cast<std::int64_t>(KW)));
        whole[i] = vis_lo[i] <= 0 && vis_hi[i] >= KW - 1;
      }
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e >> 1, jo = nb * 8 + tig * 2 + (e & 1);
          float x = p.softcap > 0.0f ? p.softcap * tanhf(s[nb][e] * p.scale / p.softcap) * kLog2e : s[nb][e] * scale2;
          if (!whole[i] && (jo < vis_lo[i] || jo > vis_hi[i])) x = -INFINITY;
          s[nb][e] = x;
          mx[i] = fmaxf(mx[i], x);
        }
      }
      float corr[2], base[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(kFullMask, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(kFullMask, mx[i], 2));
        const float m_new = fmaxf(m[i], mx[i]);
        base[i] = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet: every weight 0
        corr[i] = exp2f(m[i] - base[i]);
        m[i] = m_new;
        l[i] *= corr[i];
      }
#pragma unroll
      for (int d = 0; d < ND; ++d) {
        o[d][0] *= corr[0];
        o[d][1] *= corr[0];
        o[d][2] *= corr[1];
        o[d][3] *= corr[1];
      }
      // P = exp2(x - m); O += P V (the warp's HD dims), 16 keys per mma.
#pragma unroll
      for (int kc = 0; kc < KW / 16; ++kc) {
        float pr[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            pr[h][e] = exp2f(s[2 * kc + h][e] - base[e >> 1]);
            l[e >> 1] += pr[h][e];
          }
        }
        const std::uint32_t a[4] = {Pack<T>(pr[0][0], pr[0][1]), Pack<T>(pr[0][2], pr[0][3]),
                                    Pack<T>(pr[1][0], pr[1][1]), Pack<T>(pr[1][2], pr[1][3])};
#pragma unroll
        for (int d = 0; d < ND; d += 2) {
          // Keys 0-7 / 8-15 of the chunk x dims of n-blocks d, d + 1, transposed.
          const int mat = lane >> 3;
          std::uint32_t vb[4];
          LdMatrixX4Trans(vb, v_tile + TileOffset<H>(wk * KW + kc * 16 + (mat & 1) * 8 + (lane & 7),
                                                     wd * (HD / 8) + d + (mat >> 1)));
          Mma<T>(o[d], a, vb[0], vb[1]);
          Mma<T>(o[d + 1], a, vb[2], vb[3]);
        }
      }
    }
    __syncthreads();  // the stage is reloaded next iteration
  }
  CpAsyncWait<0>();
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(kFullMask, l[i], 1);
    l[i] += __shfl_xor_sync(kFullMask, l[i], 2);
  }

  // Warps along the keys (WK > 1, then WD = WM = 1) merge in warp order
  // through shared memory (the K/V stages are free now): warps 1.. leave
  // (m, l, acc) per row, warp 0 folds them into its own.
  if constexpr (WK > 1) {
    static_assert(WM == 1, "key warps share their rows");
    float* merge = reinterpret_cast<float*>(smem + WM * 16 * H * 2);  // [WK - 1][16][2 + H]
    if (wk > 0) {
      float* mine_slot = merge + (wk - 1) * 16 * (2 + H);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float* r = mine_slot + (gid + 8 * i) * (2 + H);
        if (tig == 0 && wd == 0) {
          r[0] = m[i];
          r[1] = l[i];
        }
#pragma unroll
        for (int d = 0; d < ND; ++d) {
          r[2 + wd * HD + d * 8 + tig * 2] = o[d][2 * i];
          r[2 + wd * HD + d * 8 + tig * 2 + 1] = o[d][2 * i + 1];
        }
      }
    }
    __syncthreads();
    if (wk > 0) return;
    for (int w = 1; w < WK; ++w) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float* r = merge + ((w - 1) * 16 + gid + 8 * i) * (2 + H);
        const float m2 = r[0], l2 = r[1], M = fmaxf(m[i], m2);
        if (M == -INFINITY) continue;  // both empty
        const float a = exp2f(m[i] - M), c = exp2f(m2 - M);
        l[i] = l[i] * a + l2 * c;
#pragma unroll
        for (int d = 0; d < ND; ++d) {
          o[d][2 * i] = o[d][2 * i] * a + r[2 + wd * HD + d * 8 + tig * 2] * c;
          o[d][2 * i + 1] = o[d][2 * i + 1] * a + r[2 + wd * HD + d * 8 + tig * 2 + 1] * c;
        }
        m[i] = M;
      }
    }
  }

  // (m, l, acc) per row into the split's slot (m back in natural units; the
  // warps along the dims write their own slices, warp slice 0 m and l).
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (row_s[i] >= p.q_len) continue;
    const std::int64_t r = (static_cast<std::int64_t>(b) * p.num_heads + row_h[i]) * p.q_len + row_s[i];
    float* part = ws + (r * sp.key_splits + split) * (H + 2);
    if (tig == 0 && wd == 0) {
      part[0] = m[i] == -INFINITY ? -INFINITY : m[i] / kLog2e;
      part[1] = l[i];
    }
#pragma unroll
    for (int d = 0; d < ND; ++d) {
      part[2 + wd * HD + d * 8 + tig * 2] = o[d][2 * i];
      part[2 + wd * HD + d * 8 + tig * 2 + 1] = o[d][2 * i + 1];
    }
  }
}

bool DecodeShape(const AttendParams& p) {
  return static_cast<std::int64_t>(p.q_len) * (p.num_heads / p.kv_heads) <= 16;
}

// QR: Q fragments held in registers across the tiles (else reloaded from
// shared memory); MINB: blocks per multiprocessor the registers must allow.
template <typename T, int H, int WM, int WK, int WD, int KT, bool QR, int MINB>
void LaunchShape(const AttendParams& p, const MmaSplit& sp, float* ws, cudaStream_t stream) {
  const int mrows = p.q_len * (p.num_heads / p.kv_heads);
  const dim3 grid(static_cast<unsigned>(p.batch * p.kv_heads), static_cast<unsigned>(sp.key_splits),
                  static_cast<unsigned>((mrows + WM * 16 - 1) / (WM * 16)));
  const int tiles = WM * 16 * H * 2 + kStages * 2 * KT * H * 2;
  const int merge = WM * 16 * H * 2 + (WK - 1) * 16 * (2 + H) * 4;
  const int smem = tiles > merge ? tiles : merge;
  auto* kernel = MmaKernel<T, H, WM, WK, WD, KT, QR, MINB>;
  static std::atomic<std::uint64_t> smem_set{0};  // this instance's devices (SetMaxDynamicSharedMemoryOnce)
  SetMaxDynamicSharedMemoryOnce(reinterpret_cast<const void*>(kernel), smem, smem_set,
                                "GroupQueryAttention (device cuda): tensor-core kernel shared memory");
  kernel<<<grid, kThreads, smem, stream>>>(p, sp, ws);
  CudaCheck(cudaGetLastError(), "GroupQueryAttention (device cuda): tensor-core kernel launch");
}

// A block's shape: warps along the rows (16 each), the keys of a tile and the
// output dims; keys per tile; Q fragments in registers; blocks per
// multiprocessor the registers must allow (MmaKernel's WM, WK, WD, KT, QR, MINB).
struct BlockShape {
  int wm, wk, wd, kt;
  bool qr;
  int minb;
};

// The shapes, the fastest measured on an H100 (bench/cuda_bench.py):
//  H 512: 16 rows, the 4 warps split the output dims (a warp's 16 x 512
//         accumulators would not fit in registers), 16 keys per tile;
//  H 256 decode: 16 rows, 2 warps along the keys of a 32-key tile x 2 along
//         the dims;
//  decode: 16 rows, the 4 warps split each 64-key tile;
//  prefill: 64 rows (16 per warp); 32 keys per tile and at least 3 blocks per
//         multiprocessor at H <= 128, 16 keys at H = 256.
constexpr BlockShape ShapeFor(int H, bool decode) {
  if (H == 512) return {1, 1, kWarps, 16, false, 1};
  if (decode) return H == 256 ? BlockShape{1, 2, 2, 32, false, 1} : BlockShape{1, kWarps, 1, 64, true, 1};
  return H == 256 ? BlockShape{kWarps, 1, 1, 16, false, 1} : BlockShape{kWarps, 1, 1, 32, false, 3};
}

template <typename T, int H, bool kDecode>
void LaunchFor(const AttendParams& p, const MmaSplit& sp, float* ws, cudaStream_t stream) {
  constexpr BlockShape s = ShapeFor(H, kDecode);
  LaunchShape<T, H, s.wm, s.wk, s.wd, s.kt, s.qr, s.minb>(p, sp, ws, stream);
}

template <typename T, int H>
void LaunchHead(const AttendParams& p, const MmaSplit& sp, float* ws, cudaStream_t stream) {
  if (DecodeShape(p)) {
    LaunchFor<T, H, true>(p, sp, ws, stream);
  } else {
    LaunchFor<T, H, false>(p, sp, ws, stream);
  }
}

template <typename T>
void LaunchType(const AttendParams& p, const MmaSplit& sp, float* ws, cudaStream_t stream) {
  switch (p.head_size) {
    case 64: LaunchHead<T, 64>(p, sp, ws, stream); break;
    case 128: LaunchHead<T, 128>(p, sp, ws, stream); break;
    case 256: LaunchHead<T, 256>(p, sp, ws, stream); break;
    default: LaunchHead<T, 512>(p, sp, ws, stream); break;
  }
}

int SmCount() {
  static const int count = [] {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return 132;
    }
    return sms;
  }();
  return count;
}

}  // namespace

bool MmaKernelApplies(const AttendParams& p) {
  return !CudaPlainKernelsOnly() && p.qk_mode == 0 && p.bias.data == nullptr && HalfKvSlices(p);
}

MmaSplit MmaSplitFor(const AttendParams& p, std::int64_t max_kv_len) {
  MmaSplit s;
  const BlockShape shape = ShapeFor(p.head_size, DecodeShape(p));
  const std::int64_t wm = shape.wm;
  const std::int64_t mrows = static_cast<std::int64_t>(p.q_len) * (p.num_heads / p.kv_heads);
  const std::int64_t blocks = static_cast<std::int64_t>(p.batch) * p.kv_heads * CeilDiv(mrows, wm * 16);
  // Enough blocks for several waves over the multiprocessors, splits of at
  // least 4 tiles, at most kCudaMaxKeySplits.
  const std::int64_t want = CeilDiv(8LL * SmCount(), blocks);
  const std::int64_t by_keys = std::max<std::int64_t>(1, CeilDiv(max_kv_len, 4LL * shape.kt));
  s.key_splits = static_cast<int>(std::clamp<std::int64_t>(std::min(want, by_keys), 1, kCudaMaxKeySplits));
  s.per_split = std::max<std::int64_t>(1, CeilDiv(max_kv_len, s.key_splits));
  return s;
}

void AttendMmaCuda(const AttendParams& p, const MmaSplit& s, float* ws, cudaStream_t stream) {
  if (p.k.dtype == DType::kBFloat16) {
    LaunchType<__nv_bfloat16>(p, s, ws, stream);
  } else {
    LaunchType<__half>(p, s, ws, stream);
  }
}

}  // namespace kvshare::detail
