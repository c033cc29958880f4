// Attention on the GPU over AttendParams in device memory (attend_cuda.h).
//
// One warp per query row (b, h, s); the head's H values spread over the lanes
// (lane i holds dims i, i + 32, ...; H <= 512). A row's visible keys
// (attention.h: j < T_b, j <= p when causal, p - j < W with a window) are cut
// into fixed splits of the key axis; each (row, split) warp runs the online
// softmax (Milakov & Gimelshein 2018) over its keys in order and leaves
// (m, l, acc[H]) in a workspace; the combine kernel merges the splits in split
// order, adds the sink (exp(sink - M) in the denominator only) and writes the
// output. Splits depend only on the shapes, so results are deterministic.
// Scores: x = scale * (q . k), softcap * tanh(x / softcap), + bias; the dot
// product's lane partials are summed by a fixed shuffle tree (fp32 FMA in the
// lanes), and every lane gets lane 0's sum.
//
// This is the plain, general kernel every mode and option runs on (K/V in
// f32 / f16 / bf16 / q8_0, rings, bias, sinks, output_qk). Decode over fp16 /
// bf16 caches takes attend_decode_cuda.cu's kernel instead (all G heads of a
// group per K/V load) into the same workspace and combine when the
// tensor-core kernel (attend_mma_cuda.cu: fp16 / bf16 K/V, H 64 - 512, no bias,
// no output_qk; prefill on Hopper attend_wgmma_cuda.cu's) does not take the call.
#include "cuda/attend_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "common/float_convert.h"
#include "cuda/attend_decode_cuda.h"
#include "cuda/attend_mma_cuda.h"
#include "cuda/attend_wgmma_cuda.h"
#include "cuda/cuda_check.h"

namespace kvshare::detail {
namespace {

constexpr int kWarp = 32;
constexpr int kPerLane = kCudaMaxHeadSize / kWarp;
constexpr int kWarpsPerBlock = 4;
constexpr std::int64_t kKeysPerSplit = 256;
constexpr std::int64_t kMaxSplits = kCudaMaxKeySplits;
// Warps the split count aims for (rows x splits): enough to fill a large GPU.
constexpr std::int64_t kTargetWarps = 16384;
constexpr unsigned kFullMask = 0xffffffffu;

// Query row r = (b * N + h) * S + s and its visible keys [lo, hi) (none when
// hi <= lo).
struct QueryRow {
  int b = 0, h = 0, s = 0, n = 0;  // n: the KV head of h
  std::int64_t lo = 0, hi = 0;
};

__device__ QueryRow Locate(const AttendParams& p, std::int64_t r) {
  QueryRow q;
  q.s = static_cast<int>(r % p.q_len);
  q.h = static_cast<int>((r / p.q_len) % p.num_heads);
  q.b = static_cast<int>(r / (static_cast<std::int64_t>(p.q_len) * p.num_heads));
  q.n = q.h / (p.num_heads / p.kv_heads);
  const KeyRange keys = VisibleKeys(p, q.b, q.s);
  q.lo = keys.lo;
  q.hi = keys.hi + 1;  // hi <= lo: no visible key
  return q;
}

// Lane 0's tree sum of v over the warp, returned to every lane.
__device__ float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_down_sync(kFullMask, v, o);
  return __shfl_sync(kFullMask, v, 0);
}

__device__ void LoadQuery(const AttendParams& p, const QueryRow& q, int lane, float (&qv)[kPerLane]) {
  const float* row = p.q + ((static_cast<std::int64_t>(q.b) * p.q_len + q.s) * p.num_heads + q.h) * p.head_size;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    qv[i] = d < p.head_size ? row[d] : 0.0f;
  }
}

// Score x of key j (every lane gets the same value).
__device__ float Score(const AttendParams& p, const QueryRow& q, const float (&qv)[kPerLane], std::int64_t j,
                       int lane) {
  const std::int64_t base = KvOffset(p.k, q.b, q.n, j);
  float part = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    if (d < p.head_size) part = fmaf(qv[i], LoadAsFloat(p.k.data, p.k.dtype, base + d), part);
  }
  float x = p.scale * WarpSum(part);
  if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
  if (p.bias.data != nullptr) {
    x += LoadAsFloat(p.bias.data, p.bias.dtype,
                     q.b * p.bias.b_stride + q.h * p.bias.h_stride + q.s * p.bias.s_stride + j);
  }
  return x;
}

__device__ void StoreQk(const AttendParams& p, const QueryRow& q, std::int64_t j, float v) {
  const std::int64_t row = (static_cast<std::int64_t>(q.b) * p.num_heads + q.h) * p.q_len + q.s;
  StoreFloatElement(p.qk, p.qk_dtype, row * p.qk_cols + j, v);
}

// Workspace of (row, split): [m, l, acc[0 .. H)].
template <typename F>
__device__ F* Partial(F* ws, const AttendParams& p, std::int64_t r, int splits, int k) {
  return ws + (r * splits + k) * (p.head_size + 2);
}

__global__ void SplitKernel(AttendParams p, std::int64_t rows, int splits, std::int64_t per_split, float* ws) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;  // whole warps leave together
  const int k = static_cast<int>(blockIdx.y);
  const QueryRow q = Locate(p, r);
  float qv[kPerLane], acc[kPerLane];
  LoadQuery(p, q, lane, qv);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const std::int64_t lo = max(q.lo, k * per_split), hi = min(q.hi, (k + 1) * per_split);
  for (std::int64_t j = lo; j < hi; ++j) {
    const float x = Score(p, q, qv, j, lane);
    if (p.qk_mode == 1 && lane == 0) StoreQk(p, q, j, x);
    if (x == -INFINITY) continue;  // weight 0
    const float m_new = fmaxf(m, x);
    const float corr = expf(m - m_new), e = expf(x - m_new);
    l = l * corr + e;
    const std::int64_t vb = KvOffset(p.v, q.b, q.n, j);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + i * kWarp;
      if (d < p.head_size) acc[i] = fmaf(e, LoadAsFloat(p.v.data, p.v.dtype, vb + d), acc[i] * corr);
    }
    m = m_new;
  }
  float* part = Partial(ws, p, r, splits, k);
  if (lane == 0) {
    part[0] = m;
    part[1] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    if (d < p.head_size) part[2 + d] = acc[i];
  }
}

// Merges the splits of each row (one block of kCombineThreads per row): warp
// 0 finds the row's max M over the splits and the sink and the denominator L
// (lane partials over strided splits, a fixed shuffle tree), every thread then
// the weights exp(m_k - M) of strided splits into shared memory, and each
// output element sums its splits' accumulators in split order; ml (qk_mode 2)
// receives (M, L) for the probabilities. Fixed orders: deterministic.
constexpr int kCombineThreads = 128;

__global__ void __launch_bounds__(kCombineThreads)
    CombineKernel(AttendParams p, int splits, const float* ws, float2* ml) {
  __shared__ float weight[kMaxSplits];
  __shared__ float row_ml[2];
  const std::int64_t r = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const QueryRow q = Locate(p, r);
  const int H = p.head_size;
  const std::int64_t out_base = ((static_cast<std::int64_t>(q.b) * p.q_len + q.s) * p.num_heads + q.h) * H;
  if (tid < kWarp) {
    float M = -INFINITY, L = 0.0f;
    if (q.hi > q.lo) {  // a query with no visible key outputs zeros
      for (int k = tid; k < splits; k += kWarp) M = fmaxf(M, Partial(ws, p, r, splits, k)[0]);
      for (int o = kWarp / 2; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(kFullMask, M, o));
      if (p.sink != nullptr) M = fmaxf(M, p.sink[q.h]);
      for (int k = tid; k < splits; k += kWarp) {
        const float* part = Partial(ws, p, r, splits, k);
        if (part[0] != -INFINITY) L += part[1] * expf(part[0] - M);
      }
      L = WarpSum(L);
      if (p.sink != nullptr) L += expf(p.sink[q.h] - M);
    }
    if (tid == 0) {
      row_ml[0] = M;
      row_ml[1] = L;
      if (ml != nullptr) ml[r] = make_float2(M, L);
    }
  }
  __syncthreads();
  const float M = row_ml[0], L = row_ml[1];
  for (int k = tid; k < splits; k += kCombineThreads) {
    const float m = Partial(ws, p, r, splits, k)[0];
    weight[k] = L > 0.0f && m != -INFINITY ? expf(m - M) : 0.0f;
  }
  __syncthreads();
  for (int d = tid; d < H; d += kCombineThreads) {
    float o = 0.0f;
    if (L > 0.0f) {
      const float* part = ws + r * splits * (H + 2) + 2 + d;
      for (int k = 0; k < splits; ++k) o = fmaf(part[static_cast<std::int64_t>(k) * (H + 2)], weight[k], o);
      o /= L;
    }
    StoreFloatElement(p.out, p.out_dtype, out_base + d, o);
  }
}

// output_qk = probabilities exp(x - M) / L of the visible keys (qk_mode 2).
__global__ void ProbsKernel(AttendParams p, std::int64_t rows, const float2* ml) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const QueryRow q = Locate(p, r);
  if (q.hi <= q.lo) return;
  const float2 f = ml[r];
  float qv[kPerLane];
  LoadQuery(p, q, lane, qv);
  for (std::int64_t j = q.lo; j < q.hi; ++j) {
    const float x = Score(p, q, qv, j, lane);
    if (lane == 0) StoreQk(p, q, j, f.y > 0.0f && x != -INFINITY ? expf(x - f.x) / f.y : 0.0f);
  }
}

}  // namespace

bool CudaPlainKernelsOnly() {
  static const bool plain = [] {
    const char* e = std::getenv("KVSHARE_CUDA_PLAIN");
    return e != nullptr && e[0] == '1';
  }();
  return plain;
}

bool HalfKvSlices(const AttendParams& p) {
  const auto aligned = [](const KvSource& s) {
    return reinterpret_cast<std::uintptr_t>(s.data) % 16 == 0 && s.batch_stride % 8 == 0 && s.head_stride % 8 == 0 &&
           s.row_stride % 8 == 0;
  };
  const int H = p.head_size;
  return (p.k.dtype == DType::kFloat16 || p.k.dtype == DType::kBFloat16) && p.v.dtype == p.k.dtype &&
         (H == 64 || H == 128 || H == 256 || H == 512) && aligned(p.k) && aligned(p.v);
}

void AttendCuda(const AttendParams& p, std::int64_t max_kv_len, cudaStream_t stream, GqaCudaWorkspace* wspace) {
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.num_heads * p.q_len;
  if (rows == 0) return;
  // Splits of the key axis: one per kKeysPerSplit keys, fewer when the rows
  // alone fill the GPU (prefill), at most kMaxSplits.
  const std::int64_t by_keys = std::max<std::int64_t>(1, CeilDiv(max_kv_len, kKeysPerSplit));
  const std::int64_t by_rows = std::max<std::int64_t>(1, kTargetWarps / rows);
  const int splits = static_cast<int>(std::min({by_keys, by_rows, kMaxSplits}));
  const std::int64_t per_split = std::max<std::int64_t>(1, CeilDiv(max_kv_len, splits));
  const unsigned blocks = static_cast<unsigned>(CeilDiv(rows, kWarpsPerBlock));
  // Prefill on Hopper: attend_wgmma_cuda.cu's kernel where it takes the call.
  const std::optional<WgmmaCall> hopper = PrepareWgmma(p, max_kv_len);
  if (hopper && hopper->direct_output) {  // one key split: the kernel writes the output
    AttendWgmmaCuda(p, *hopper, nullptr, stream);
    return;
  }
  if (hopper || MmaKernelApplies(p)) {  // no output_qk here
    const MmaSplit sp = hopper ? hopper->split : MmaSplitFor(p, max_kv_len);
    const CallScratch ws(wspace, GqaCudaWorkspace::kSplits,
                         static_cast<std::size_t>(rows * sp.key_splits * (p.head_size + 2)) * sizeof(float), stream,
                         "GroupQueryAttention (device cuda): workspace allocation");
    if (hopper) {
      AttendWgmmaCuda(p, *hopper, ws.As<float>(), stream);
    } else {
      AttendMmaCuda(p, sp, ws.As<float>(), stream);
    }
    CombineKernel<<<static_cast<unsigned>(rows), kCombineThreads, 0, stream>>>(p, sp.key_splits, ws.As<float>(),
                                                                               nullptr);
    CudaCheck(cudaGetLastError(), "GroupQueryAttention (device cuda): combine kernel launch");
    return;
  }
  const CallScratch ws(wspace, GqaCudaWorkspace::kSplits,
                       static_cast<std::size_t>(rows * splits * (p.head_size + 2)) * sizeof(float), stream,
                       "GroupQueryAttention (device cuda): workspace allocation");
  const CallScratch ml(wspace, GqaCudaWorkspace::kSoftmax,
                       p.qk_mode == 2 ? static_cast<std::size_t>(rows) * sizeof(float2) : 0, stream,
                       "GroupQueryAttention (device cuda): workspace allocation");
  if (DecodeKernelApplies(p)) {
    AttendDecodeCuda(p, splits, per_split, ws.As<float>(), stream);
  } else {
    SplitKernel<<<dim3(blocks, static_cast<unsigned>(splits)), kWarpsPerBlock * kWarp, 0, stream>>>(
        p, rows, splits, per_split, ws.As<float>());
    CudaCheck(cudaGetLastError(), "GroupQueryAttention (device cuda): attention kernel launch");
  }
  CombineKernel<<<static_cast<unsigned>(rows), kCombineThreads, 0, stream>>>(p, splits, ws.As<float>(),
                                                                             ml.As<float2>());
  CudaCheck(cudaGetLastError(), "GroupQueryAttention (device cuda): combine kernel launch");
  if (p.qk_mode == 2) {
    ProbsKernel<<<blocks, kWarpsPerBlock * kWarp, 0, stream>>>(p, rows, ml.As<float2>());
    CudaCheck(cudaGetLastError(), "GroupQueryAttention (device cuda): probabilities kernel launch");
  }
}

}  // namespace kvshare::detail
