// Decode attention on the GPU (one query per row, S = 1) over fp16 / bf16
// caches: flash-decoding (split-KV). A block of 4 warps takes one (row b,
// KV head n, key split, chunk of the group's query heads): every K and V
// slice it loads serves all heads of the chunk (GQA: G = N / N_kv heads read
// the same K/V). A key's H values spread over LK = H / E lanes, E = 8 (16 at
// H = 512) consecutive values per lane, one 16-byte load each; a warp holds
// 32 / LK keys at a time and its 4 warps walk the split's keys in turn.
// Per lane and head: the online softmax (m, l) and E accumulators. At the
// end the key slots of a warp merge by a butterfly (commutative rounding:
// every lane ends with the same bits), the 4 warps merge in warp order, and
// the block leaves (m, l, acc[H]) per head in the split workspace that
// attend_cuda.cu's combine kernel reduces in split order. Everything depends
// only on the shapes, so results are deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/float_convert.h"
#include "cuda/attend_decode_cuda.h"

#include "cuda/attend_cuda.h"
#include "cuda/cuda_check.h"

namespace kvshare::detail {
namespace {

constexpr int kWarp = 32;
constexpr int kWarps = 4;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename T>
__device__ void ToFloat8(const uint4& raw, float* out) {
  const auto* pairs = reinterpret_cast<const T*>(&raw);  // 4 pairs
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f;
    if constexpr (std::is_same_v<T, __half2>) {
      f = __half22float2(pairs[i]);
    } else {
      f = __bfloat1622float2(pairs[i]);
    }
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// E values of a K/V row at element offset `at` (16-byte aligned).
template <typename Pair, int E>
__device__ void LoadSlice(const void* data, std::int64_t at, float (&out)[E]) {
  const auto* src = reinterpret_cast<const uint4*>(static_cast<const unsigned short*>(data) + at);
#pragma unroll
  for (int c = 0; c < E / 8; ++c) ToFloat8<Pair>(src[c], out + 8 * c);
}

// (m, l, acc) of this lane merged with another's (exact same operations on
// both sides of a butterfly: the result is symmetric in its two inputs).
template <int E>
__device__ void Merge(float& m, float& l, float (&acc)[E], float m2, float l2, const float (&acc2)[E]) {
  const float M = fmaxf(m, m2);
  if (M == -INFINITY) return;  // both empty
  const float a = m == -INFINITY ? 0.0f : expf(m - M);
  const float c = m2 == -INFINITY ? 0.0f : expf(m2 - M);
  l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(l2, c));
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = __fadd_rn(__fmul_rn(acc[e], a), __fmul_rn(acc2[e], c));
  m = M;
}

template <typename Pair, int E, int GC>
__global__ void __launch_bounds__(kWarps* kWarp)
    DecodeKernel(AttendParams p, int splits, std::int64_t per_split, float* ws) {
  extern __shared__ float slot[];  // [GC][2 + H]: m, l, acc
  const int H = p.head_size, G = p.num_heads / p.kv_heads;
  const int LK = H / E, KPW = kWarp / LK;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int seg = lane / LK, sl = lane % LK;
  const int b = static_cast<int>(blockIdx.x) / p.kv_heads, n = static_cast<int>(blockIdx.x) % p.kv_heads;
  const int split = static_cast<int>(blockIdx.y), g0 = static_cast<int>(blockIdx.z) * GC;

  // Visible keys of the row's query [lo, hi) (hi <= lo: none), cut to this split.
  const KeyRange keys = VisibleKeys(p, b, 0);
  std::int64_t lo = keys.lo, hi = keys.hi + 1;
  if (lo < split * per_split) lo = split * per_split;
  if (hi > (split + 1) * per_split) hi = (split + 1) * per_split;

  float q[GC][E], acc[GC][E], m[GC], l[GC];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    const int h = n * G + g0 + g;
    const float* row = p.q + (static_cast<std::int64_t>(b) * p.num_heads + h) * H + sl * E;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      q[g][e] = g0 + g < G ? row[e] : 0.0f;
      acc[g][e] = 0.0f;
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }

  for (std::int64_t j0 = lo + static_cast<std::int64_t>(warp) * KPW; j0 < hi;
       j0 += static_cast<std::int64_t>(kWarps) * KPW) {
    const std::int64_t j = j0 + seg;
    const bool live = j < hi;
    float kf[E], vf[E];
    if (live) {
      LoadSlice<Pair, E>(p.k.data, KvOffset(p.k, b, n, j) + sl * E, kf);
      LoadSlice<Pair, E>(p.v.data, KvOffset(p.v, b, n, j) + sl * E, vf);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) kf[e] = vf[e] = 0.0f;
    }
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      float part = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) part = fmaf(q[g][e], kf[e], part);
      for (int o = LK / 2; o > 0; o >>= 1) part += __shfl_xor_sync(kFullMask, part, o);
      float x = p.scale * __shfl_sync(kFullMask, part, seg * LK);  // the segment leader's sum
      if (!live || g0 + g >= G) continue;
      if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
      if (p.bias.data != nullptr) {
        const int h = n * G + g0 + g;
        x += LoadAsFloat(p.bias.data, p.bias.dtype, b * p.bias.b_stride + h * p.bias.h_stride + j);
      }
      if (x == -INFINITY) continue;  // weight 0
      const float m_new = fmaxf(m[g], x);
      const float corr = expf(m[g] - m_new), e_x = expf(x - m_new);
      l[g] = l[g] * corr + e_x;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = fmaf(e_x, vf[e], acc[g][e] * corr);
      m[g] = m_new;
    }
  }

  // Key slots of the warp: butterfly over the segments.
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    for (int o = LK; o < kWarp; o <<= 1) {
      const float m2 = __shfl_xor_sync(kFullMask, m[g], o), l2 = __shfl_xor_sync(kFullMask, l[g], o);
      float acc2[E];
#pragma unroll
      for (int e = 0; e < E; ++e) acc2[e] = __shfl_xor_sync(kFullMask, acc[g][e], o);
      Merge<E>(m[g], l[g], acc[g], m2, l2, acc2);
    }
  }

  // Warps in order into the shared slot (segment 0's lanes hold the warp's state).
  const int stride = 2 + H;
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w && seg == 0) {
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        float* s = slot + g * stride;
        if (w > 0) {
          float acc2[E];
#pragma unroll
          for (int e = 0; e < E; ++e) acc2[e] = s[2 + sl * E + e];
          Merge<E>(m[g], l[g], acc[g], s[0], s[1], acc2);
        }
#pragma unroll
        for (int e = 0; e < E; ++e) s[2 + sl * E + e] = acc[g][e];
      }
    }
    __syncthreads();
    if (warp == w && seg == 0 && sl == 0) {
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        slot[g * stride] = m[g];
        slot[g * stride + 1] = l[g];
      }
    }
    __syncthreads();
  }

  // The block's (m, l, acc) per head into the split workspace (attend_cuda.cu:
  // row r = b * N + h, slot r * splits + split, H + 2 floats).
  for (int g = 0; g < GC && g0 + g < G; ++g) {
    const std::int64_t r = static_cast<std::int64_t>(b) * p.num_heads + n * G + g0 + g;
    float* part = ws + (r * splits + split) * stride;
    for (int i = static_cast<int>(threadIdx.x); i < stride; i += kWarps * kWarp) part[i] = slot[g * stride + i];
  }
}

template <typename Pair, int E>
void Launch(const AttendParams& p, int splits, std::int64_t per_split, float* ws, cudaStream_t stream) {
  const int G = p.num_heads / p.kv_heads;
  constexpr int kMaxGc = 64 / E;  // q and accumulators of a chunk: 2 * GC * E registers
  int gc = 1;
  while (gc < G && gc < kMaxGc) gc *= 2;
  const dim3 grid(static_cast<unsigned>(p.batch * p.kv_heads), static_cast<unsigned>(splits),
                  static_cast<unsigned>((G + gc - 1) / gc));
  const std::size_t smem = static_cast<std::size_t>(gc) * (2 + p.head_size) * sizeof(float);
  switch (gc) {
    case 1: DecodeKernel<Pair, E, 1><<<grid, kWarps * kWarp, smem, stream>>>(p, splits, per_split, ws); break;
    case 2: DecodeKernel<Pair, E, 2><<<grid, kWarps * kWarp, smem, stream>>>(p, splits, per_split, ws); break;
    case 4: DecodeKernel<Pair, E, 4><<<grid, kWarps * kWarp, smem, stream>>>(p, splits, per_split, ws); break;
    default:
      if constexpr (kMaxGc >= 8)
        DecodeKernel<Pair, E, 8><<<grid, kWarps * kWarp, smem, stream>>>(p, splits, per_split, ws);
      break;
  }
  CudaCheck(cudaGetLastError(), "GroupQueryAttention (device cuda): decode kernel launch");
}

}  // namespace

bool DecodeKernelApplies(const AttendParams& p) {
  return !CudaPlainKernelsOnly() && p.q_len == 1 && p.qk_mode == 0 && HalfKvSlices(p);
}

void AttendDecodeCuda(const AttendParams& p, int splits, std::int64_t per_split, float* ws, cudaStream_t stream) {
  const bool bf16 = p.k.dtype == DType::kBFloat16;
  if (p.head_size == 512) {
    bf16 ? Launch<__nv_bfloat162, 16>(p, splits, per_split, ws, stream)
         : Launch<__half2, 16>(p, splits, per_split, ws, stream);
  } else {
    bf16 ? Launch<__nv_bfloat162, 8>(p, splits, per_split, ws, stream)
         : Launch<__half2, 8>(p, splits, per_split, ws, stream);
  }
}

}  // namespace kvshare::detail
