// Internal contract between the GQA front end (validation, RoPE, cache writes)
// and the attention kernels (reference and optimized). Not a public header.
//
// By the time a kernel runs, every index has been validated: a kernel may trust
// kv_len, q_offset and valid_q without bounds checks.
#pragma once

#include <cstdint>

#include "common/host_device.h"
#include "kvshare/common/tensor.h"

namespace kvshare {
class ThreadPool;
}

namespace kvshare::detail {

// Strided K or V source. Element (b, n, j, h) — row b, KV head n, key j,
// dimension h — lives at element offset
//   b * batch_stride + n * head_stride + slot(j) * row_stride + h
// where slot(j) = j, or j mod ring_capacity when ring_capacity > 0 (circular
// static cache). BNSH: head_stride = C*H, row_stride = H. BSNH / 3-D:
// head_stride = H, row_stride = N_kv*H. dtype is float32, float16, bfloat16 or
// q8_0; for q8_0 offsets stay in elements (H, and so every stride, a multiple of
// 32) and element e lives in the 34-byte block e / 32 (tensor.h).
struct KvSource {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::int64_t batch_stride = 0;
  std::int64_t head_stride = 0;
  std::int64_t row_stride = 0;
  std::int64_t ring_capacity = 0;
};

// Strided float source (attention_bias): element (b, h, s, j) at
//   b * b_stride + h * h_stride + s * s_stride + j
// (broadcast dims have stride 0). dtype float32 / float16 / bfloat16.
struct BiasSource {
  const void* data = nullptr;  // null => no bias
  DType dtype = DType::kFloat32;
  std::int64_t b_stride = 0;
  std::int64_t h_stride = 0;
  std::int64_t s_stride = 0;
};

struct AttendParams {
  int batch = 0;      // B
  int q_len = 0;      // S
  int num_heads = 0;  // N
  int kv_heads = 0;   // N_kv; query head h reads kv head h / (N / N_kv)
  int head_size = 0;  // H

  // Queries after RoPE, before scaling: float32, dense [B, S, N, H].
  const float* q = nullptr;
  KvSource k;
  KvSource v;

  // Per row b (arrays of length B):
  //   kv_len[b]   T_b: keys with absolute position j < T_b exist.
  //   q_offset[b] off_b: query s sits at absolute position p = off_b + s
  //               (may be negative: leading queries then see nothing when causal).
  //   valid_q[b]  queries s >= valid_q[b] are padding: output zeros, no qk row.
  const std::int64_t* kv_len = nullptr;
  const std::int64_t* q_offset = nullptr;
  const std::int64_t* valid_q = nullptr;

  // Bidirectional spans (gqa.h), validated; null without them.
  //   causal_end [B, S]: replaces p + 1 in the causal rule for query s of row
  //     b (the end of p's span when p lies in one): the optimized kernel and
  //     every CUDA kernel read it through VisibleKeys (on the GPU a device
  //     copy, gqa_cuda.cu).
  //   spans [B, spans_per_row, 2]: the pairs [start, end), (0, 0) padding:
  //     the reference reads them instead (same span), so the two check each
  //     other. Host memory; null on the GPU.
  const std::int64_t* causal_end = nullptr;
  const std::int64_t* spans = nullptr;
  std::int64_t spans_per_row = 0;

  bool causal = true;    // key j visible only if j <= p (or j < causal_end)
  int window = 0;        // > 0: key j visible only if p - j < window (and j - p < window when !causal)
  float scale = 1.0f;    // x = scale * (q . k)
  float softcap = 0.0f;  // > 0: x = softcap * tanh(x / softcap), before the bias
  BiasSource bias;       // added to visible scores after softcap
  // Per-head sink logit [N] (float32), or null. Adds exp(sink - m) to the
  // softmax denominator only.
  const float* sink = nullptr;

  // Output [B, S, N, H] dense, dtype float32 / float16 / bfloat16.
  void* out = nullptr;
  DType out_dtype = DType::kFloat32;

  // Optional scores / probabilities [B, N, S, qk_cols] dense, column = absolute
  // key position j. qk_mode 1: x after scale, softcap, bias; 2: probabilities.
  // Invisible keys and padding queries get 0.
  void* qk = nullptr;
  DType qk_dtype = DType::kFloat32;
  int qk_mode = 0;
  std::int64_t qk_cols = 0;

  // Keys per block for the blocked kernel (0 => kernel's choice). Any value
  // gives the same result to fp32 rounding.
  int kv_block_size = 0;

  // The blocked kernel's score and value products in bf16 on AMX tiles
  // (amx_attend.h; GqaMatMulPrecision::kBf16 where AmxAttendUsable()).
  // K/V float32, float16 or bfloat16.
  bool bf16_tiles = false;
};

// Inclusive range of visible keys [lo, hi]; empty when lo > hi.
struct KeyRange {
  std::int64_t lo = 0;
  std::int64_t hi = -1;
  KVSHARE_HOST_DEVICE bool Empty() const { return lo > hi; }
};

// Keys visible to query s of row b (empty for padding queries): the
// visibility rule of gqa.h, for every kernel (CPU and CUDA). With spans the
// keys stay one range: only the causal bound moves (to the span's end), the
// window's bound stays p - W + 1.
KVSHARE_HOST_DEVICE inline KeyRange VisibleKeys(const AttendParams& p, int b, std::int64_t s) {
  if (s >= p.valid_q[b]) return {};
  const std::int64_t pos = p.q_offset[b] + s;
  KeyRange r{0, p.kv_len[b] - 1};
  const std::int64_t causal_hi = p.causal_end != nullptr ? p.causal_end[b * p.q_len + s] - 1 : pos;
  if (p.causal && causal_hi < r.hi) r.hi = causal_hi;
  if (p.window > 0 && pos - p.window + 1 > r.lo) r.lo = pos - p.window + 1;
  if (!p.causal && p.window > 0 && pos + p.window - 1 < r.hi) r.hi = pos + p.window - 1;  // symmetric window
  return r;
}

// Plain loops, double accumulation. The oracle.
void AttendReference(const AttendParams& p);

// Blocked online-softmax kernel: Highway SIMD with run-time dispatch, threads
// over (row, KV head, query tile) and fixed split-KV for long T. Bitwise
// identical for any thread count (pool may be null).
void AttendOptimized(const AttendParams& p, ThreadPool* pool);

}  // namespace kvshare::detail
