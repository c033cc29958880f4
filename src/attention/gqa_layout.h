// Where the GQA op's K/V live, shared by the CPU front end (gqa.cc) and the
// CUDA one (src/cuda/gqa_cuda.cu): the strided cache destinations of new rows
// and the kernel parameters built from a plan. Pointers are host or device
// memory alike (nothing here dereferences them). Internal header.
#pragma once

#include <cstdint>

#include "attention/attend.h"
#include "attention/gqa_plan.h"
#include "kvshare/attention/gqa.h"

namespace kvshare::detail {

// A writable strided cache: element (b, n, row, h) at b*bs + n*hs + row*rs + h
// (elements; for q8_0, H and every stride a multiple of 32).
struct CacheDst {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::int64_t bs = 0, hs = 0, rs = 0;

  KvSource AsSource() const { return KvSource{data, dtype, bs, hs, rs, 0}; }
};

// A BNSH cache (B, N_kv, capacity, H).
inline CacheDst Bnsh(void* data, DType dtype, const GqaPlan& p, std::int64_t capacity) {
  const std::int64_t H = p.head_size;
  return CacheDst{data, dtype, p.kv_heads * capacity * H, capacity * H, H};
}

// The static scatter cache of the plan (BNSH or 3-D [B, C, kv_hidden]).
inline CacheDst ScatterCache(void* data, const GqaPlan& p) {
  if (p.scatter_bnsh) return Bnsh(data, p.cache_dtype, p, p.present_len);
  const std::int64_t kv_hidden = static_cast<std::int64_t>(p.kv_heads) * p.head_size;
  return CacheDst{data, p.cache_dtype, p.present_len * kv_hidden, p.head_size, kv_hidden};
}

// Where the attention kernel reads K / V (ring > 0: slot of key j is j mod
// ring) and whether the step's new K/V rows are written there first:
//   kAppend       the present buffers append_k / append_v (present, or the
//                 caller's scratch when present is omitted), new rows written;
//   kShareBuffer  present (= past), new rows written;
//   kBorrowed*    past, nothing written;
//   kExternalKv   key / value (BSNH), nothing written;
//   kStaticScatter  the cache (present), new rows written (none in the
//                 read-only form: n_write = 0), a ring when circular.
struct KvPlace {
  CacheDst k, v;
  std::int64_t ring = 0;
  bool write = false;

  KvSource Source(const CacheDst& c) const {
    KvSource s = c.AsSource();
    s.ring_capacity = ring;
    return s;
  }
};

inline KvPlace PlaceKv(const GqaAttributes& attrs, const GqaInputs& in, const GqaOutputs& out, const GqaPlan& p,
                       void* append_k, void* append_v) {
  KvPlace place;
  switch (p.mode) {
    case KvMode::kAppend:
      place.k = Bnsh(append_k, p.cache_dtype, p, p.present_len);
      place.v = Bnsh(append_v, p.cache_dtype, p, p.present_len);
      place.write = true;
      break;
    case KvMode::kShareBuffer:
      place.k = Bnsh(out.present_key->data, p.cache_dtype, p, p.present_len);
      place.v = Bnsh(out.present_value->data, p.cache_dtype, p, p.present_len);
      place.write = true;
      break;
    case KvMode::kBorrowedEmptyKv:
    case KvMode::kBorrowedOmittedKv:
      place.k = Bnsh(const_cast<void*>(in.past_key->data), p.cache_dtype, p, p.past_len);
      place.v = Bnsh(const_cast<void*>(in.past_value->data), p.cache_dtype, p, p.past_len);
      break;
    case KvMode::kExternalKv: {
      const std::int64_t kv_hidden = static_cast<std::int64_t>(p.kv_heads) * p.head_size;
      place.k =
          CacheDst{const_cast<void*>(p.k_src.data), p.k_src.dtype, p.ext_kv_len * kv_hidden, p.head_size, kv_hidden};
      place.v =
          CacheDst{const_cast<void*>(p.v_src.data), p.v_src.dtype, p.ext_kv_len * kv_hidden, p.head_size, kv_hidden};
      break;
    }
    case KvMode::kStaticScatter:
      place.k = ScatterCache(out.present_key->data, p);
      place.v = ScatterCache(out.present_value->data, p);
      place.ring = attrs.scatter_mode == GqaAttributes::ScatterMode::kCircular ? p.present_len : 0;
      place.write = true;
      break;
  }
  return place;
}

// Row arrays of the kernel parameters (host or device copies of the plan's).
struct AttendRows {
  const std::int64_t* kv_len = nullptr;
  const std::int64_t* q_offset = nullptr;
  const std::int64_t* valid_q = nullptr;
  const std::int64_t* causal_end = nullptr;  // [B, S] or null (no bidirectional spans)
};

// The attention kernel's parameters for plan p: q (float32 [B, S, N, H], after
// RoPE), K / V where they live, the row arrays, sink (float32 [N] or null), and
// the bias / output / output_qk views of in / out.
inline AttendParams MakeAttendParams(const GqaAttributes& attrs, const GqaInputs& in, const GqaOutputs& out,
                                     const GqaPlan& p, const float* q, const KvSource& k, const KvSource& v,
                                     const AttendRows& rows, const float* sink) {
  AttendParams ap;
  ap.batch = p.batch;
  ap.q_len = p.q_len;
  ap.num_heads = p.num_heads;
  ap.kv_heads = p.kv_heads;
  ap.head_size = p.head_size;
  ap.q = q;
  ap.k = k;
  ap.v = v;
  ap.kv_len = rows.kv_len;
  ap.q_offset = rows.q_offset;
  ap.valid_q = rows.valid_q;
  ap.causal_end = rows.causal_end;
  ap.spans = p.spans;
  ap.spans_per_row = p.spans_per_row;
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
  ap.sink = sink;
  ap.out = out.output.data;
  ap.out_dtype = out.output.dtype;
  if (attrs.qk_output != 0) {
    ap.qk = out.output_qk->data;
    ap.qk_dtype = out.output_qk->dtype;
    ap.qk_mode = attrs.qk_output;
    ap.qk_cols = p.qk_cols;
  }
  ap.kv_block_size = p.kv_block_size;
  return ap;
}

}  // namespace kvshare::detail
