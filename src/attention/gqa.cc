// GroupQueryAttention entry point: plan (validate) → RoPE on Q → write new K/V
// rows into present / the scatter cache → attention kernel.
#include <cstring>
#include <vector>

#include "attention/attend.h"
#include "attention/gqa_plan.h"
#include "attention/store_rows.h"
#include "common/float_convert.h"
#include "kvshare/attention.h"
#include "kvshare/error.h"

namespace kvshare {
namespace {

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
  for (int d = 0; d < H; ++d) dst[d] = LoadAsFloat(src.data, src.dtype, base + d);
}

// Byte address of element `elem` of a cache of dtype (for q8_0, elem is a
// multiple of 32: the start of a block).
char* ElemAddress(void* data, DType dtype, std::int64_t elem) {
  return static_cast<char*>(data) + DTypeBytes(dtype, elem);
}

// A writable strided cache: element (b, n, row, h) at b*bs + n*hs + row*rs + h.
// A q8_0 row (H a multiple of 32, strides multiples of H) is quantized per
// block (StoreRowFromFloat).
struct CacheDst {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::int64_t bs = 0, hs = 0, rs = 0;

  void StoreRow(std::int64_t b, std::int64_t n, std::int64_t row, const float* x, int H) const {
    detail::StoreRowFromFloat(data, dtype, b * bs + n * hs + row * rs, x, H);
  }
  KvSource AsSource() const { return KvSource{data, dtype, bs, hs, rs, 0}; }
};

CacheDst Bnsh(void* data, DType dtype, const GqaPlan& p, std::int64_t capacity) {
  const std::int64_t H = p.head_size;
  return CacheDst{data, dtype, p.kv_heads * capacity * H, capacity * H, H};
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
        k.StoreRow(b, n, row, buf.data(), H);
        LoadHead(p.v_src, b, s, n, H, buf.data());
        v.StoreRow(b, n, row, buf.data(), H);
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
  const GqaPlan p = detail::PlanGqa(attrs, in, out);
  const int B = p.batch, S = p.q_len, N = p.num_heads, H = p.head_size;

  Rope rope_storage;
  const Rope* rope = nullptr;
  if (attrs.do_rotary == 1) {
    rope_storage = Rope{&*in.cos_cache, &*in.sin_cache, p.rotary_half_dim, attrs.rotary_interleaved == 1};
    rope = &rope_storage;
  }

  // Q as float32 [B, S, N, H], rotated at its absolute positions.
  std::vector<float> q(static_cast<std::size_t>(B) * S * N * H);
  for (int b = 0; b < B; ++b) {
    for (int s = 0; s < S; ++s) {
      const bool valid = s < p.valid_q[static_cast<std::size_t>(b)];
      for (int h = 0; h < N; ++h) {
        float* dst = q.data() + ((static_cast<std::size_t>(b) * S + s) * N + h) * H;
        LoadHead(p.q_src, b, s, h, H, dst);
        if (rope != nullptr && valid) rope->Apply(dst, p.rope_pos[static_cast<std::size_t>(b) * S + s]);
      }
    }
  }

  // Where K/V live for the kernel; write the new rows there first.
  KvSource k_src, v_src;
  std::vector<unsigned char> scratch_k, scratch_v;
  switch (p.mode) {
    case KvMode::kAppend: {
      void* pk;
      void* pv;
      if (out.present_key) {
        pk = out.present_key->data;
        pv = out.present_value->data;
      } else {
        const std::size_t bytes = DTypeBytes(p.cache_dtype, static_cast<std::int64_t>(B) * p.kv_heads * p.present_len * H);
        scratch_k.resize(bytes);
        scratch_v.resize(bytes);
        pk = scratch_k.data();
        pv = scratch_v.data();
      }
      if (in.past_key) {
        CopyPastIntoPresent(p, *in.past_key, pk, p.present_len);
        CopyPastIntoPresent(p, *in.past_value, pv, p.present_len);
      } else {
        const std::size_t bytes = DTypeBytes(p.cache_dtype, static_cast<std::int64_t>(B) * p.kv_heads * p.present_len * H);
        std::memset(pk, 0, bytes);
        std::memset(pv, 0, bytes);
      }
      const CacheDst kd = Bnsh(pk, p.cache_dtype, p, p.present_len), vd = Bnsh(pv, p.cache_dtype, p, p.present_len);
      WriteNewRows(p, rope, kd, vd, 0);
      k_src = kd.AsSource();
      v_src = vd.AsSource();
      break;
    }
    case KvMode::kShareBuffer: {
      const CacheDst kd = Bnsh(out.present_key->data, p.cache_dtype, p, p.present_len);
      const CacheDst vd = Bnsh(out.present_value->data, p.cache_dtype, p, p.present_len);
      WriteNewRows(p, rope, kd, vd, 0);
      k_src = kd.AsSource();
      v_src = vd.AsSource();
      break;
    }
    case KvMode::kBorrowedEmptyKv:
    case KvMode::kBorrowedOmittedKv: {
      if (out.present_key && !p.present_aliases_past) {
        std::memcpy(out.present_key->data, in.past_key->data, in.past_key->NumBytes());
        std::memcpy(out.present_value->data, in.past_value->data, in.past_value->NumBytes());
      }
      k_src = Bnsh(const_cast<void*>(in.past_key->data), p.cache_dtype, p, p.past_len).AsSource();
      v_src = Bnsh(const_cast<void*>(in.past_value->data), p.cache_dtype, p, p.past_len).AsSource();
      break;
    }
    case KvMode::kExternalKv: {
      const std::int64_t kv_hidden = static_cast<std::int64_t>(p.kv_heads) * H;
      k_src = KvSource{p.k_src.data, p.k_src.dtype, p.ext_kv_len * kv_hidden, H, kv_hidden, 0};
      v_src = KvSource{p.v_src.data, p.v_src.dtype, p.ext_kv_len * kv_hidden, H, kv_hidden, 0};
      if (out.present_key) {
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
          dst.StoreRow(b, n, j, buf.data(), H);
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
      break;
    }
    case KvMode::kStaticScatter: {
      const std::int64_t C = p.present_len;
      const std::int64_t kv_hidden = static_cast<std::int64_t>(p.kv_heads) * H;
      CacheDst kd, vd;
      if (p.scatter_bnsh) {
        kd = Bnsh(out.present_key->data, p.cache_dtype, p, C);
        vd = Bnsh(out.present_value->data, p.cache_dtype, p, C);
      } else {
        kd = CacheDst{out.present_key->data, p.cache_dtype, C * kv_hidden, H, kv_hidden};
        vd = CacheDst{out.present_value->data, p.cache_dtype, C * kv_hidden, H, kv_hidden};
      }
      const bool circular = attrs.scatter_mode == GqaAttributes::ScatterMode::kCircular;
      WriteNewRows(p, rope, kd, vd, circular ? C : 0);
      k_src = kd.AsSource();
      v_src = vd.AsSource();
      if (circular) {
        k_src.ring_capacity = C;
        v_src.ring_capacity = C;
      }
      break;
    }
  }

  std::vector<float> sink;
  if (in.head_sink) {
    sink.resize(static_cast<std::size_t>(N));
    for (int h = 0; h < N; ++h) sink[static_cast<std::size_t>(h)] = LoadAsFloat(in.head_sink->data, in.head_sink->dtype, h);
  } else if (attrs.smooth_softmax == 1) {
    sink.assign(static_cast<std::size_t>(N), 0.0f);
  }

  detail::AttendParams ap;
  ap.batch = B;
  ap.q_len = S;
  ap.num_heads = N;
  ap.kv_heads = p.kv_heads;
  ap.head_size = H;
  ap.q = q.data();
  ap.k = k_src;
  ap.v = v_src;
  ap.kv_len = p.kv_len.data();
  ap.q_offset = p.q_offset.data();
  ap.valid_q = p.valid_q.data();
  ap.causal = attrs.causal == 1;
  ap.window = attrs.local_window_size > 0 ? attrs.local_window_size : 0;
  ap.scale = p.scale;
  ap.softcap = attrs.softcap;
  if (in.attention_bias) {
    const Shape& bs = in.attention_bias->shape;
    ap.bias.data = in.attention_bias->data;
    ap.bias.dtype = in.attention_bias->dtype;
    ap.bias.s_stride = bs[3];
    ap.bias.h_stride = bs[1] == 1 ? 0 : bs[2] * bs[3];
    ap.bias.b_stride = bs[0] == 1 ? 0 : bs[1] * bs[2] * bs[3];
  }
  ap.sink = sink.empty() ? nullptr : sink.data();
  ap.out = out.output.data;
  ap.out_dtype = out.output.dtype;
  if (attrs.qk_output != 0) {
    ap.qk = out.output_qk->data;
    ap.qk_dtype = out.output_qk->dtype;
    ap.qk_mode = attrs.qk_output;
    ap.qk_cols = p.qk_cols;
  }
  ap.kv_block_size = p.kv_block_size;

  if (options.kernel == GqaKernel::kReference) {
    detail::AttendReference(ap);
  } else {
    detail::AttendOptimized(ap, options.pool);
  }
}

}  // namespace kvshare
