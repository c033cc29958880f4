// GroupQueryAttention entry point: plan (validate) → RoPE on Q → write new K/V
// rows into present / the scatter cache → attention kernel.
#include <cstring>
#include <vector>

#include "attention/amx_attend.h"
#include "attention/attend.h"
#include "attention/cpu_attend_bf16.h"
#include "attention/gqa_device.h"
#include "attention/gqa_layout.h"
#include "attention/gqa_plan.h"
#include "attention/store_rows.h"
#include "common/float_convert.h"
#include "kvshare/attention/gqa.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare {
namespace {

using detail::Bnsh;
using detail::CacheDst;
using detail::GqaPlan;
using detail::KvSource;
using detail::LoadAsFloat;
using detail::TokenSource;

struct Rope {
  const ConstTensorView* cos = nullptr;
  const ConstTensorView* sin = nullptr;
  int half = 0;
  bool interleaved = false;

  // Rotates x[0, 2*half) in place at position pos (GPT-NeoX half split or GPT-J pairs).
  void Apply(float* x, std::int64_t pos) const {
    const std::int64_t base = pos * half;
    if (cos->dtype == DType::kFloat32 && sin->dtype == DType::kFloat32 && !interleaved) {
      // The same products and differences on float tables, in a loop the
      // compiler vectorizes (the common case: the models' tables).
      const float* c = cos->As<float>() + base;
      const float* s = sin->As<float>() + base;
      float* x0 = x;
      float* x1 = x + half;
      for (int i = 0; i < half; ++i) {
        const float a = x0[i], b = x1[i];
        x0[i] = a * c[i] - b * s[i];
        x1[i] = b * c[i] + a * s[i];
      }
      return;
    }
    for (int i = 0; i < half; ++i) {
      const float c = LoadAsFloat(cos->data, cos->dtype, base + i);
      const float s = LoadAsFloat(sin->data, sin->dtype, base + i);
      const int i0 = interleaved ? 2 * i : i;
      const int i1 = interleaved ? 2 * i + 1 : i + half;
      const float x0 = x[i0], x1 = x[i1];
      x[i0] = x0 * c - x1 * s;
      x[i1] = x1 * c + x0 * s;
    }
  }
};

// Loads H values of head n of token (b, s) from a token-major source as float.
void LoadHead(const TokenSource& src, std::int64_t b, std::int64_t s, std::int64_t n, int H, float* dst) {
  const std::int64_t base = b * src.batch_stride + s * src.token_stride + src.offset + n * H;
  if (src.dtype == DType::kFloat32) {
    std::memcpy(dst, static_cast<const float*>(src.data) + base, static_cast<std::size_t>(H) * sizeof(float));
    return;
  }
  for (int d = 0; d < H; ++d) dst[d] = LoadAsFloat(src.data, src.dtype, base + d);
}

// Byte address of element `elem` of a cache of dtype (for q8_0, elem is a
// multiple of 32: the start of a block).
char* ElemAddress(void* data, DType dtype, std::int64_t elem) {
  return static_cast<char*>(data) + DTypeBytes(dtype, elem);
}

// Stores x[0, H) as row `row` of head n of batch row b of cache c (a q8_0 row
// is quantized per block).
void StoreRow(const CacheDst& c, std::int64_t b, std::int64_t n, std::int64_t row, const float* x, int H) {
  detail::StoreRowFromFloat(c.data, c.dtype, b * c.bs + n * c.hs + row * c.rs, x, H);
}

// Writes the new K (rotated unless no rope) and V rows of every row b into k/v
// at rows slot(write_at[b] + s), s < n_write[b].
void WriteNewRows(const GqaPlan& p, const Rope* rope, const CacheDst& k, const CacheDst& v, std::int64_t ring) {
  const int H = p.head_size;
  std::vector<float> buf(static_cast<std::size_t>(H));
  for (int b = 0; b < p.batch; ++b) {
    const auto bi = static_cast<std::size_t>(b);
    for (std::int64_t s = 0; s < p.n_write[bi]; ++s) {
      std::int64_t row = p.write_at[bi] + s;
      if (ring > 0) row %= ring;
      for (int n = 0; n < p.kv_heads; ++n) {
        LoadHead(p.k_src, b, s, n, H, buf.data());
        if (rope != nullptr) rope->Apply(buf.data(), p.rope_pos[bi * static_cast<std::size_t>(p.q_len) + s]);
        StoreRow(k, b, n, row, buf.data(), H);
        LoadHead(p.v_src, b, s, n, H, buf.data());
        StoreRow(v, b, n, row, buf.data(), H);
      }
    }
  }
}

// present (B, N_kv, C, H) = zeros, then rows [0, past_rows[b]) copied from past.
// (Byte counts through DTypeBytes: whole rows of H elements, q8_0 included.)
void CopyPastIntoPresent(const GqaPlan& p, const ConstTensorView& past, void* present, std::int64_t capacity) {
  const DType dt = p.cache_dtype;
  const std::int64_t H = p.head_size;
  std::memset(present, 0, DTypeBytes(dt, p.batch * p.kv_heads * capacity * H));
  for (int b = 0; b < p.batch; ++b) {
    const std::int64_t rows = p.past_rows[static_cast<std::size_t>(b)];
    if (rows == 0) continue;
    for (int n = 0; n < p.kv_heads; ++n) {
      const std::int64_t bn = static_cast<std::int64_t>(b) * p.kv_heads + n;
      std::memcpy(static_cast<char*>(present) + DTypeBytes(dt, bn * capacity * H),
                  static_cast<const char*>(past.data) + DTypeBytes(dt, bn * p.past_len * H), DTypeBytes(dt, rows * H));
    }
  }
}

// The new K or V rows of a token-major source as the kernels' KvSource.
KvSource InPlace(const TokenSource& t, int H) {
  KvSource s;
  s.data = static_cast<const char*>(t.data) + DTypeBytes(t.dtype, t.offset);
  s.dtype = t.dtype;
  s.batch_stride = t.batch_stride;
  s.head_stride = H;
  s.row_stride = t.token_stride;
  return s;
}

}  // namespace

const char* KvModeName(KvMode mode) {
  switch (mode) {
    case KvMode::kAppend: return "append";
    case KvMode::kShareBuffer: return "share_buffer";
    case KvMode::kBorrowedEmptyKv: return "borrowed_empty_kv";
    case KvMode::kBorrowedOmittedKv: return "borrowed_omitted_kv";
    case KvMode::kExternalKv: return "external_kv";
    case KvMode::kStaticScatter: return "static_scatter";
  }
  return "unknown";
}

KvMode DetectKvMode(const GqaAttributes& attrs, const GqaInputs& inputs, const GqaOutputs& outputs) {
  return detail::PlanGqa(attrs, inputs, outputs).mode;
}

void GroupQueryAttention(const GqaAttributes& attrs, const GqaInputs& in, const GqaOutputs& out,
                         const GqaRunOptions& options) {
  if (options.device == Device::kCuda) {
    if (options.kernel == GqaKernel::kReference) {
      throw Error(
          "GroupQueryAttention: the reference kernel (GqaKernel::kReference) runs on the CPU only; "
          "with device cuda use kAuto or kOptimized");
    }
    if (options.matmul_precision != GqaMatMulPrecision::kF32) {
      throw Error(
          "GroupQueryAttention: matmul_precision bf16 (GqaMatMulPrecision::kBf16) is a CPU kernel option; "
          "with device cuda use kF32 (the CUDA kernels' fp16 / bf16 path is chosen by the K/V dtype)");
    }
#if KVSHARE_HAVE_CUDA
    // Where every tensor lives first (index inputs must be host-readable),
    // then the same validation as on the CPU, then the device work.
    detail::CheckCudaCall(in, out, options);
    detail::GroupQueryAttentionCuda(attrs, in, out, detail::PlanGqa(attrs, in, out), options);
    return;
#else
    throw Error(
        "GroupQueryAttention: device cuda requested, but this kvshare was built without CUDA "
        "(configure with -DKVSHARE_CUDA=ON and nvcc on PATH)");
#endif
  }
  if (options.device != Device::kCpu) throw Error("GroupQueryAttention: unknown device in GqaRunOptions");
  const GqaPlan p = detail::PlanGqa(attrs, in, out);
  const bool bf16 = options.matmul_precision == GqaMatMulPrecision::kBf16;
  if (bf16) detail::CheckAttendBf16(attrs, in, out, options);
  const int B = p.batch, S = p.q_len, N = p.num_heads, H = p.head_size;

  Rope rope_storage;
  const Rope* rope = nullptr;
  if (attrs.do_rotary == 1) {
    rope_storage = Rope{&*in.cos_cache, &*in.sin_cache, p.rotary_half_dim, attrs.rotary_interleaved == 1};
    rope = &rope_storage;
  }

  // Q as float32 [B, S, N, H], rotated at its absolute positions. Up to
  // kKeptQueryFloats it lives in a buffer this thread keeps between calls, so
  // a batched step's padded query (8 rows x a 256-token chunk: 8 MB per layer
  // for Gemma 3 270M) is neither allocated nor zeroed on every call; a larger
  // one is allocated for the call alone. Padding queries (s >= valid_q[b])
  // are left unwritten: no kernel reads them (the tile plans and the
  // reference skip them).
  constexpr std::size_t kKeptQueryFloats = std::size_t{16} << 20;  // 64 MiB
  thread_local std::vector<float> kept_q;
  std::vector<float> call_q;
  const std::size_t q_floats = static_cast<std::size_t>(B) * S * N * H;
  std::vector<float>& q = q_floats <= kKeptQueryFloats ? kept_q : call_q;
  if (q.size() < q_floats) q.resize(q_floats);
  // Query rows (b, s) are independent: ranges of them on the pool.
  const std::int64_t q_rows = static_cast<std::int64_t>(B) * S;
  ParallelForRanges(options.pool, q_rows, RowGrain(options.pool, q_rows, static_cast<std::int64_t>(N) * H),
                    [&](std::int64_t r0, std::int64_t r1) {
                      for (std::int64_t r = r0; r < r1; ++r) {
                        const int b = static_cast<int>(r / S), s = static_cast<int>(r % S);
                        if (s >= p.valid_q[static_cast<std::size_t>(b)]) continue;
                        for (int h = 0; h < N; ++h) {
                          float* dst = q.data() + (static_cast<std::size_t>(r) * N + h) * H;
                          LoadHead(p.q_src, b, s, h, H, dst);
                          if (rope != nullptr) rope->Apply(dst, p.rope_pos[static_cast<std::size_t>(r)]);
                        }
                      }
                    });

  // Where K/V live for the kernel; write the new rows there first. The bf16
  // products read the new K/V where they are when nothing keeps them (no
  // past, no present, no RoPE on K): the rows a scratch copy would hold.
  const bool kv_in_place = bf16 && p.mode == KvMode::kAppend && !in.past_key && !out.present_key && rope == nullptr &&
                           p.cache_dtype == p.k_src.dtype && p.cache_dtype == p.v_src.dtype;
  std::vector<unsigned char> scratch_k, scratch_v;
  void* append_k = nullptr;
  void* append_v = nullptr;
  if (p.mode == KvMode::kAppend && !kv_in_place) {  // present = past rows, zeros, then the new rows
    const std::size_t bytes = DTypeBytes(p.cache_dtype, static_cast<std::int64_t>(B) * p.kv_heads * p.present_len * H);
    if (out.present_key) {
      append_k = out.present_key->data;
      append_v = out.present_value->data;
    } else {
      scratch_k.resize(bytes);
      scratch_v.resize(bytes);
      append_k = scratch_k.data();
      append_v = scratch_v.data();
    }
    if (in.past_key) {
      CopyPastIntoPresent(p, *in.past_key, append_k, p.present_len);
      CopyPastIntoPresent(p, *in.past_value, append_v, p.present_len);
    } else {
      std::memset(append_k, 0, bytes);
      std::memset(append_v, 0, bytes);
    }
  }
  const detail::KvPlace place = detail::PlaceKv(attrs, in, out, p, append_k, append_v);
  if (p.mode == KvMode::kBorrowedEmptyKv || p.mode == KvMode::kBorrowedOmittedKv) {
    if (out.present_key && !p.present_aliases_past) {
      std::memcpy(out.present_key->data, in.past_key->data, in.past_key->NumBytes());
      std::memcpy(out.present_value->data, in.past_value->data, in.past_value->NumBytes());
    }
  }
  if (p.mode == KvMode::kExternalKv && out.present_key) {
    const CacheDst kd = Bnsh(out.present_key->data, out.present_key->dtype, p, p.ext_kv_len);
    const CacheDst vd = Bnsh(out.present_value->data, out.present_value->dtype, p, p.ext_kv_len);
    // Same dtype: the rows' bytes (exact, q8_0 blocks included); else converted.
    const bool same = out.present_key->dtype == p.k_src.dtype;
    const std::size_t row_bytes = same ? DTypeBytes(p.k_src.dtype, H) : 0;
    std::vector<float> buf(static_cast<std::size_t>(H));
    auto copy_row = [&](const TokenSource& src, const CacheDst& dst, int b, std::int64_t j, int n) {
      if (same) {
        const std::int64_t from = b * src.batch_stride + j * src.token_stride + src.offset + n * H;
        std::memcpy(ElemAddress(dst.data, dst.dtype, b * dst.bs + n * dst.hs + j * dst.rs),
                    ElemAddress(const_cast<void*>(src.data), src.dtype, from), row_bytes);
        return;
      }
      LoadHead(src, b, j, n, H, buf.data());
      StoreRow(dst, b, n, j, buf.data(), H);
    };
    for (int b = 0; b < B; ++b) {
      for (std::int64_t j = 0; j < p.ext_kv_len; ++j) {
        for (int n = 0; n < p.kv_heads; ++n) {
          copy_row(p.k_src, kd, b, j, n);
          copy_row(p.v_src, vd, b, j, n);
        }
      }
    }
  }
  if (place.write && !kv_in_place) WriteNewRows(p, rope, place.k, place.v, place.ring);
  const KvSource k_src = kv_in_place ? InPlace(p.k_src, H) : place.Source(place.k);
  const KvSource v_src = kv_in_place ? InPlace(p.v_src, H) : place.Source(place.v);

  std::vector<float> sink;
  if (in.head_sink) {
    sink.resize(static_cast<std::size_t>(N));
    for (int h = 0; h < N; ++h)
      sink[static_cast<std::size_t>(h)] = LoadAsFloat(in.head_sink->data, in.head_sink->dtype, h);
  } else if (attrs.smooth_softmax == 1) {
    sink.assign(static_cast<std::size_t>(N), 0.0f);
  }

  const detail::AttendParams ap =
      detail::MakeAttendParams(attrs, in, out, p, q.data(), k_src, v_src,
                               detail::AttendRows{p.kv_len.data(), p.q_offset.data(), p.valid_q.data(),
                                                  p.causal_end.empty() ? nullptr : p.causal_end.data()},
                               sink.empty() ? nullptr : sink.data());
  if (options.kernel == GqaKernel::kReference) {
    detail::AttendReference(ap);
  } else if (bf16 && detail::AmxAttendUsable()) {
    detail::AttendParams tiles = ap;
    tiles.bf16_tiles = true;
    detail::AttendOptimized(tiles, options.pool);
  } else if (bf16) {
    detail::AttendBf16(ap, options.pool);
  } else {
    detail::AttendOptimized(ap, options.pool);
  }
}

}  // namespace kvshare
