// GroupQueryAttention on the GPU (gqa_device.h): the CPU front end's steps
// (attention/gqa.cc) over device memory, for a plan validated by the shared
// PlanGqa: Q to fp32 with RoPE, past rows into present, the new K/V rows into
// present / the scatter cache (RoPE on K; fp16 / bf16 / q8_0 with the CPU's
// rounding, common/float_convert.h and common/q8_0.h, shared as device code),
// then the attention kernel (attend_cuda.cu). RoPE uses explicit fp32 roundings
// (__fmul_rn, __fsub_rn, __fadd_rn: no contraction into FMA), the same
// operations as gqa.cc's, so cache rows are bitwise the CPU's.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "attention/gqa_device.h"
#include "attention/gqa_layout.h"
#include "common/float_convert.h"
#include "common/q8_0.h"
#include "cuda/attend_cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/gqa_workspace.h"
#include "cuda/pinned_staging.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {
namespace {

constexpr int kThreads = 128;

// RoPE tables (cos / sin, (max_pos, half), any float dtype) in device memory;
// half = 0: no rotation.
struct RopeArgs {
  const void* cos = nullptr;
  const void* sin = nullptr;
  DType cos_dtype = DType::kFloat32;
  DType sin_dtype = DType::kFloat32;
  int half = 0;
  bool interleaved = false;
};

// Rotates x[0, 2 * half) in shared memory at position pos (GPT-NeoX pairs
// (i, i + half) or GPT-J pairs (2i, 2i + 1)); every thread of the block calls it.
__device__ void Rotate(float* x, const RopeArgs& r, std::int64_t pos) {
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < r.half; i += static_cast<int>(blockDim.x)) {
    const float c = LoadAsFloat(r.cos, r.cos_dtype, pos * r.half + i);
    const float s = LoadAsFloat(r.sin, r.sin_dtype, pos * r.half + i);
    const int i0 = r.interleaved ? 2 * i : i;
    const int i1 = r.interleaved ? 2 * i + 1 : i + r.half;
    const float x0 = x[i0], x1 = x[i1];
    x[i0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    x[i1] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
  }
  __syncthreads();
}

// x[0, H) = head n of token (b, s) of a token-major source, as float.
__device__ void LoadHead(const TokenSource& src, std::int64_t b, std::int64_t s, std::int64_t n, int H, float* x) {
  const std::int64_t base = b * src.batch_stride + s * src.token_stride + src.offset + n * H;
  for (int d = static_cast<int>(threadIdx.x); d < H; d += static_cast<int>(blockDim.x)) {
    x[d] = LoadAsFloat(src.data, src.dtype, base + d);
  }
}

// Byte address of element e (a block start for q8_0) of an array of dtype.
__device__ unsigned char* ElemAddress(void* data, DType dtype, std::int64_t e) {
  auto* bytes = static_cast<unsigned char*>(data);
  switch (dtype) {
    case DType::kQ8_0: return bytes + e / kQ8_0BlockSize * kQ8_0BlockBytes;
    case DType::kFloat16:
    case DType::kBFloat16: return bytes + e * 2;
    default: return bytes + e * 4;
  }
}

// Row `row` of head n of batch row b of cache c = x[0, H) (shared memory;
// q8_0 quantized per block, one block per thread).
__device__ void StoreRow(const CacheDst& c, std::int64_t b, std::int64_t n, std::int64_t row, const float* x, int H) {
  __syncthreads();
  const std::int64_t base = b * c.bs + n * c.hs + row * c.rs;
  if (c.dtype == DType::kQ8_0) {
    unsigned char* dst = ElemAddress(c.data, c.dtype, base);
    for (int k = static_cast<int>(threadIdx.x); k < H / kQ8_0BlockSize; k += static_cast<int>(blockDim.x)) {
      QuantizeBlockQ8_0(x + k * kQ8_0BlockSize, dst + k * kQ8_0BlockBytes);
    }
  } else {
    for (int d = static_cast<int>(threadIdx.x); d < H; d += static_cast<int>(blockDim.x)) {
      StoreFloatElement(c.data, c.dtype, base + d, x[d]);
    }
  }
  __syncthreads();
}

// q [B, S, N, H] fp32 = the query heads, rotated at rope_pos unless padding.
// One block per (b, s, h).
__global__ void QueryKernel(TokenSource src, int S, int N, int H, RopeArgs rope, const std::int64_t* valid_q,
                            const std::int64_t* rope_pos, float* q) {
  extern __shared__ float x[];
  const std::int64_t r = blockIdx.x;
  const std::int64_t h = r % N, s = (r / N) % S, b = r / (static_cast<std::int64_t>(N) * S);
  LoadHead(src, b, s, h, H, x);
  if (rope.half > 0 && s < valid_q[b]) Rotate(x, rope, rope_pos[b * S + s]);
  __syncthreads();
  for (int d = static_cast<int>(threadIdx.x); d < H; d += static_cast<int>(blockDim.x)) q[r * H + d] = x[d];
}

// The new K (rotated) and V rows of token (b, s), s < n_write[b], head n, into
// rows slot(write_at[b] + s) of k / v (mod ring when ring > 0). One block per
// (b, s, n).
__global__ void WriteRowsKernel(TokenSource ksrc, TokenSource vsrc, CacheDst kd, CacheDst vd, int S, int Nkv, int H,
                                std::int64_t ring, RopeArgs rope, const std::int64_t* write_at,
                                const std::int64_t* n_write, const std::int64_t* rope_pos) {
  extern __shared__ float x[];
  const std::int64_t r = blockIdx.x;
  const std::int64_t n = r % Nkv, s = (r / Nkv) % S, b = r / (static_cast<std::int64_t>(Nkv) * S);
  if (s >= n_write[b]) return;  // the whole block
  std::int64_t row = write_at[b] + s;
  if (ring > 0) row %= ring;
  LoadHead(ksrc, b, s, n, H, x);
  if (rope.half > 0) Rotate(x, rope, rope_pos[b * S + s]);
  StoreRow(kd, b, n, row, x, H);
  LoadHead(vsrc, b, s, n, H, x);
  StoreRow(vd, b, n, row, x, H);
}

// present (BNSH) row j of head n of batch row b = the external cache's (BSNH):
// the same row_bytes bytes when the dtypes match, else converted. One block
// per (b, j, n).
__global__ void CopyExternalKernel(TokenSource src, CacheDst dst, std::int64_t T, int Nkv, int H, int row_bytes) {
  extern __shared__ float x[];
  const std::int64_t r = blockIdx.x;
  const std::int64_t n = r % Nkv, j = (r / Nkv) % T, b = r / (static_cast<std::int64_t>(Nkv) * T);
  const std::int64_t from = b * src.batch_stride + j * src.token_stride + src.offset + n * H;
  const std::int64_t to = b * dst.bs + n * dst.hs + j * dst.rs;
  if (src.dtype == dst.dtype) {
    const unsigned char* a = ElemAddress(const_cast<void*>(src.data), src.dtype, from);
    unsigned char* z = ElemAddress(dst.data, dst.dtype, to);
    for (int i = static_cast<int>(threadIdx.x); i < row_bytes; i += static_cast<int>(blockDim.x)) z[i] = a[i];
    return;
  }
  LoadHead(src, b, j, n, H, x);
  StoreRow(dst, b, n, j, x, H);
}

// out[0, n) = fp32 of a float tensor of any dtype.
__global__ void ToFloatKernel(const void* data, DType dtype, int n, float* out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = LoadAsFloat(data, dtype, i);
}

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  CudaCheck(e, (std::string("GroupQueryAttention (device cuda): ") + what).c_str());
}

void CheckLaunch(const char* kernel) { Check(cudaGetLastError(), (std::string(kernel) + " launch").c_str()); }

// Device copies of the plan's row arrays, in one allocation (a workspace slot
// when ws is set). Without a workspace the host array they are copied from
// lives as long as the copies (a copy from pageable memory may still be
// reading it when cudaMemcpyAsync returns); with one they are copied from its
// pinned staging, valid until its Reset (also when captured into a graph).
struct DeviceRows {
  std::vector<std::int64_t> host;
  CallScratch mem;
  const std::int64_t *kv_len, *q_offset, *valid_q, *write_at, *n_write, *rope_pos;
  const std::int64_t* causal_end;  // [B * S], null without bidirectional spans

  DeviceRows(const GqaPlan& p, cudaStream_t stream, GqaCudaWorkspace* ws)
      : mem(ws, GqaCudaWorkspace::kRows, Bytes(p), stream, "GroupQueryAttention (device cuda): row arrays allocation") {
    const std::size_t B = static_cast<std::size_t>(p.batch);
    for (const auto* v : {&p.kv_len, &p.q_offset, &p.valid_q, &p.write_at, &p.n_write}) {
      host.insert(host.end(), v->begin(), v->end());
      host.resize(host.size() + B - v->size(), 0);  // write_at / n_write may be empty
    }
    host.insert(host.end(), p.rope_pos.begin(), p.rope_pos.end());
    host.insert(host.end(), p.causal_end.begin(), p.causal_end.end());
    std::int64_t* d = mem.As<std::int64_t>();
    if (!host.empty()) {
      const std::size_t bytes = host.size() * sizeof(std::int64_t);
      const void* from = host.data();
      if (ws != nullptr) {
        from = ws->staging().Put(host.data(), bytes, stream, "GroupQueryAttention (device cuda): row arrays staging");
      }
      Check(cudaMemcpyAsync(d, from, bytes, cudaMemcpyHostToDevice, stream), "row arrays upload");
    }
    kv_len = d;
    q_offset = d + B;
    valid_q = d + 2 * B;
    write_at = d + 3 * B;
    n_write = d + 4 * B;
    rope_pos = d + 5 * B;
    causal_end = p.causal_end.empty() ? nullptr : rope_pos + p.rope_pos.size();
  }
  static std::size_t Bytes(const GqaPlan& p) {
    return (5 * static_cast<std::size_t>(p.batch) + p.rope_pos.size() + p.causal_end.size()) * sizeof(std::int64_t);
  }
};

// present (B, N_kv, C, H) = zeros, then rows [0, past_rows[b]) from past
// (B, N_kv, P, H): one 2-D copy per batch row.
void CopyPastIntoPresent(const GqaPlan& p, const void* past, void* present, cudaStream_t stream) {
  const DType dt = p.cache_dtype;
  const std::int64_t H = p.head_size, C = p.present_len, P = p.past_len, Nkv = p.kv_heads;
  Check(cudaMemsetAsync(present, 0, DTypeBytes(dt, p.batch * Nkv * C * H), stream), "present zero fill");
  for (int b = 0; b < p.batch; ++b) {
    const std::int64_t rows = p.past_rows[static_cast<std::size_t>(b)];
    if (rows == 0) continue;
    Check(cudaMemcpy2DAsync(static_cast<char*>(present) + DTypeBytes(dt, b * Nkv * C * H), DTypeBytes(dt, C * H),
                            static_cast<const char*>(past) + DTypeBytes(dt, b * Nkv * P * H), DTypeBytes(dt, P * H),
                            DTypeBytes(dt, rows * H), static_cast<std::size_t>(Nkv), cudaMemcpyDeviceToDevice, stream),
          "past rows copy");
  }
}

}  // namespace

void CheckCudaCall(const GqaInputs& in, const GqaOutputs& out, const GqaRunOptions& options) {
  RequireCudaDevice("GroupQueryAttention");
  if (options.cuda_workspace != nullptr &&
      StreamCapturing(static_cast<cudaStream_t>(options.cuda_stream), "GroupQueryAttention (device cuda)")) {
    return;
  }
  const auto kind = [](const void* ptr, const char* name) {
    cudaPointerAttributes a{};
    Check(cudaPointerGetAttributes(&a, ptr), (std::string("cudaPointerGetAttributes(") + name + ")").c_str());
    return a.type;
  };
  const auto device = [&](const void* ptr, std::int64_t n, const char* name) {
    if (n == 0) return;
    const cudaMemoryType t = kind(ptr, name);
    if (t != cudaMemoryTypeDevice && t != cudaMemoryTypeManaged) {
      throw Error(std::string("GroupQueryAttention (device cuda): ") + name +
                  " must be in device memory (cudaMalloc or cudaMallocManaged), got a host pointer");
    }
  };
  const auto host = [&](const std::optional<ConstTensorView>& v, const char* name) {
    if (!v || v->NumElements() == 0) return;
    if (kind(v->data, name) == cudaMemoryTypeDevice) {
      throw Error(std::string("GroupQueryAttention (device cuda): ") + name +
                  " must be in host memory (the op validates it there before launching), got a device pointer");
    }
  };
  const auto optional = [&](const auto& v, const char* name) {  // an optional ConstTensorView / TensorView
    if (v) device(v->data, v->NumElements(), name);
  };
  device(in.query.data, in.query.NumElements(), "query");
  optional(in.key, "key");
  optional(in.value, "value");
  optional(in.past_key, "past_key");
  optional(in.past_value, "past_value");
  optional(in.cos_cache, "cos_cache");
  optional(in.sin_cache, "sin_cache");
  optional(in.attention_bias, "attention_bias");
  optional(in.head_sink, "head_sink");
  device(out.output.data, out.output.NumElements(), "output");
  optional(out.present_key, "present_key");
  optional(out.present_value, "present_value");
  optional(out.output_qk, "output_qk");
  host(in.seqlens_k, "seqlens_k");
  host(in.total_sequence_length, "total_sequence_length");
  host(in.position_ids, "position_ids");
  host(in.write_indices, "write_indices");
  host(in.nonpad_kv_seqlen, "nonpad_kv_seqlen");
  host(in.bidirectional_spans, "bidirectional_spans");
}

void GroupQueryAttentionCuda(const GqaAttributes& attrs, const GqaInputs& in, const GqaOutputs& out, const GqaPlan& p,
                             const GqaRunOptions& options) {
  if (options.matmul_precision != GqaMatMulPrecision::kF32) {
    throw Error(
        "GroupQueryAttention (device cuda): matmul_precision bf16 (GqaMatMulPrecision::kBf16) is a CPU kernel "
        "option; the CUDA kernels take kF32 only (their fp16 / bf16 K/V path is chosen by the K/V dtype)");
  }
  if (p.head_size > kCudaMaxHeadSize) {
    throw Error("GroupQueryAttention (device cuda): head_size " + std::to_string(p.head_size) +
                " is above the CUDA kernels' limit of " + std::to_string(kCudaMaxHeadSize));
  }
  auto stream = static_cast<cudaStream_t>(options.cuda_stream);
  const int B = p.batch, S = p.q_len, N = p.num_heads, H = p.head_size, Nkv = p.kv_heads;
  const std::size_t smem = static_cast<std::size_t>(H) * sizeof(float);
  auto* ws = static_cast<GqaCudaWorkspace*>(options.cuda_workspace);
  const DeviceRows rows(p, stream, ws);

  RopeArgs rope;
  if (attrs.do_rotary == 1) {
    rope = RopeArgs{in.cos_cache->data,  in.sin_cache->data, in.cos_cache->dtype,
                    in.sin_cache->dtype, p.rotary_half_dim,  attrs.rotary_interleaved == 1};
  }

  // Q as fp32 [B, S, N, H], rotated at its absolute positions.
  const std::int64_t q_heads = static_cast<std::int64_t>(B) * S * N;
  const CallScratch q(ws, GqaCudaWorkspace::kQuery, static_cast<std::size_t>(q_heads * H) * sizeof(float), stream,
                      "GroupQueryAttention (device cuda): query scratch allocation");
  if (q_heads > 0) {
    QueryKernel<<<static_cast<unsigned>(q_heads), kThreads, smem, stream>>>(p.q_src, S, N, H, rope, rows.valid_q,
                                                                            rows.rope_pos, q.As<float>());
    CheckLaunch("query kernel");
  }

  // Where K/V live for the kernel; the new rows are written there first.
  const std::size_t present_bytes = DTypeBytes(p.cache_dtype, static_cast<std::int64_t>(B) * Nkv * p.present_len * H);
  const bool scratch_present = p.mode == KvMode::kAppend && !out.present_key;
  const CallScratch scratch_k(ws, GqaCudaWorkspace::kPresentK, scratch_present ? present_bytes : 0, stream,
                              "GroupQueryAttention (device cuda): present scratch allocation");
  const CallScratch scratch_v(ws, GqaCudaWorkspace::kPresentV, scratch_present ? present_bytes : 0, stream,
                              "GroupQueryAttention (device cuda): present scratch allocation");
  void* append_k = nullptr;
  void* append_v = nullptr;
  if (p.mode == KvMode::kAppend) {  // present = past rows, zeros, then the new rows
    append_k = scratch_present ? scratch_k.As<void>() : out.present_key->data;
    append_v = scratch_present ? scratch_v.As<void>() : out.present_value->data;
    if (in.past_key) {
      CopyPastIntoPresent(p, in.past_key->data, append_k, stream);
      CopyPastIntoPresent(p, in.past_value->data, append_v, stream);
    } else if (present_bytes > 0) {
      Check(cudaMemsetAsync(append_k, 0, present_bytes, stream), "present zero fill");
      Check(cudaMemsetAsync(append_v, 0, present_bytes, stream), "present zero fill");
    }
  }
  const KvPlace place = PlaceKv(attrs, in, out, p, append_k, append_v);
  if ((p.mode == KvMode::kBorrowedEmptyKv || p.mode == KvMode::kBorrowedOmittedKv) && out.present_key &&
      !p.present_aliases_past) {
    Check(cudaMemcpyAsync(out.present_key->data, in.past_key->data, in.past_key->NumBytes(), cudaMemcpyDeviceToDevice,
                          stream),
          "present copy");
    Check(cudaMemcpyAsync(out.present_value->data, in.past_value->data, in.past_value->NumBytes(),
                          cudaMemcpyDeviceToDevice, stream),
          "present copy");
  }
  const std::int64_t ext_blocks = static_cast<std::int64_t>(B) * p.ext_kv_len * Nkv;
  if (p.mode == KvMode::kExternalKv && out.present_key && ext_blocks > 0) {
    const CacheDst kd = Bnsh(out.present_key->data, out.present_key->dtype, p, p.ext_kv_len);
    const CacheDst vd = Bnsh(out.present_value->data, out.present_value->dtype, p, p.ext_kv_len);
    const int row_bytes = static_cast<int>(DTypeBytes(p.k_src.dtype, H));
    for (const auto& [src, dst] : {std::pair{p.k_src, kd}, std::pair{p.v_src, vd}}) {
      CopyExternalKernel<<<static_cast<unsigned>(ext_blocks), kThreads, smem, stream>>>(src, dst, p.ext_kv_len, Nkv, H,
                                                                                        row_bytes);
      CheckLaunch("present copy kernel");
    }
  }
  const std::int64_t write_blocks = static_cast<std::int64_t>(B) * S * Nkv;
  if (place.write && write_blocks > 0) {
    WriteRowsKernel<<<static_cast<unsigned>(write_blocks), kThreads, smem, stream>>>(
        p.k_src, p.v_src, place.k, place.v, S, Nkv, H, place.ring, rope, rows.write_at, rows.n_write, rows.rope_pos);
    CheckLaunch("cache write kernel");
  }
  const KvSource k_src = place.Source(place.k), v_src = place.Source(place.v);

  // Sink logits as fp32 [N] (head_sink, or zeros for smooth_softmax = 1).
  const bool has_sink = in.head_sink.has_value() || attrs.smooth_softmax == 1;
  const CallScratch sink(ws, GqaCudaWorkspace::kSink, has_sink ? static_cast<std::size_t>(N) * sizeof(float) : 0,
                         stream, "GroupQueryAttention (device cuda): sink allocation");
  if (in.head_sink) {
    ToFloatKernel<<<static_cast<unsigned>((N + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        in.head_sink->data, in.head_sink->dtype, N, sink.As<float>());
    CheckLaunch("sink conversion kernel");
  } else if (has_sink) {
    Check(cudaMemsetAsync(sink.As<void>(), 0, static_cast<std::size_t>(N) * sizeof(float), stream), "sink zero fill");
  }

  // Bidirectional spans reach the kernels as the per-query causal bound
  // (causal_end, which VisibleKeys reads in every kernel); the pairs
  // themselves are the reference kernel's only, and stay on the host.
  AttendParams ap = MakeAttendParams(attrs, in, out, p, q.As<float>(), k_src, v_src,
                                     AttendRows{rows.kv_len, rows.q_offset, rows.valid_q, rows.causal_end},
                                     has_sink ? sink.As<float>() : nullptr);
  ap.spans = nullptr;
  ap.spans_per_row = 0;
  if (ap.qk != nullptr) Check(cudaMemsetAsync(ap.qk, 0, out.output_qk->NumBytes(), stream), "output_qk zero fill");
  const std::int64_t max_kv = p.kv_len.empty() ? 0 : *std::max_element(p.kv_len.begin(), p.kv_len.end());
  AttendCuda(ap, max_kv, stream, ws);
  // Async calls (a workspace holds what the queued work reads) return now,
  // so that a caller may capture them into a CUDA graph.
  if (ws == nullptr || !options.cuda_async) Check(cudaStreamSynchronize(stream), "kernel execution");
}

}  // namespace kvshare::detail
