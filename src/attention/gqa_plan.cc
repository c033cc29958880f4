// Validation of GroupQueryAttention inputs and resolution of the plan.
// Messages follow ONNX Runtime's group_query_attention_helper.h wording where
// one exists (docs/architecture.md §6), and otherwise name the input, the
// expected and the actual value.
#include <algorithm>
#include <cmath>
#include <string>

#include "attention/gqa_check.h"
#include "attention/gqa_plan.h"

namespace kvshare::detail {
namespace {

void RequireFloat(const ConstTensorView& t, const char* name) {
  KVS_CHECK(IsFloatingPoint(t.dtype), "Input '", name, "' must be float32, float16 or bfloat16, got ",
            DTypeName(t.dtype));
}

// A KV cache tensor (past / present / external K/V): float or q8_0.
void RequireKvCacheDType(DType dtype, const char* name) {
  KVS_CHECK(IsKvCacheDType(dtype), "Input '", name,
            "' must be float32, float16, bfloat16 or q8_0 (a KV cache dtype), got ", DTypeName(dtype));
}

// q8_0 stores blocks of 32 values along the head dimension.
void RequireQ8HeadSize(DType dtype, std::int64_t H, const char* name) {
  KVS_CHECK(dtype != DType::kQ8_0 || H % kQ8_0BlockSize == 0, "'", name, "' is q8_0, which stores blocks of ",
            kQ8_0BlockSize, " values along head_size: head_size must be a multiple of ", kQ8_0BlockSize, ", got ", H,
            " (use a float16 or bfloat16 cache for this head size)");
}

void RequireData(const ConstTensorView& t, const char* name) {
  KVS_CHECK(t.data != nullptr || t.NumElements() == 0, "Input '", name, "' has a null data pointer");
}

void RequireRank(const ConstTensorView& t, const char* name, int rank) {
  KVS_CHECK(t.shape.rank == rank, "Input '", name, "' is expected to have ", rank, " dimensions, got ", t.shape.rank);
}

void ValidateAttributes(const GqaAttributes& a) {
  KVS_CHECK(a.num_heads > 0, "num_heads must be > 0, got ", a.num_heads);
  KVS_CHECK(a.kv_num_heads > 0, "kv_num_heads must be > 0, got ", a.kv_num_heads);
  KVS_CHECK(
      a.num_heads % a.kv_num_heads == 0,
      "num_heads must be a multiple of kv_num_heads. Got num_heads % kv_num_heads == ", a.num_heads % a.kv_num_heads);
  KVS_CHECK(a.causal == 0 || a.causal == 1, "causal must be 0 or 1, got ", a.causal);
  KVS_CHECK(a.local_window_size == -1 || a.local_window_size > 0, "local_window_size must be -1 (off) or > 0, got ",
            a.local_window_size);
  KVS_CHECK(std::isfinite(a.scale) && a.scale >= 0.0f,
            "scale must be finite and >= 0 (0 means 1/sqrt(head_size)), got ", a.scale);
  KVS_CHECK(std::isfinite(a.softcap) && a.softcap >= 0.0f, "softcap must be finite and >= 0 (0 means off), got ",
            a.softcap);
  KVS_CHECK(a.do_rotary == 0 || a.do_rotary == 1, "do_rotary must be 0 or 1, got ", a.do_rotary);
  KVS_CHECK(a.rotary_interleaved == 0 || a.rotary_interleaved == 1, "rotary_interleaved must be 0 or 1, got ",
            a.rotary_interleaved);
  KVS_CHECK(a.qk_output >= 0 && a.qk_output <= 2, "qk_output attribute received unsupported value ", a.qk_output,
            " (expected 0 none, 1 before softmax, 2 after softmax)");
  KVS_CHECK(a.kv_block_size >= 0, "kv_block_size must be >= 0 (0 means chosen by the kernel), got ", a.kv_block_size);
  KVS_CHECK(a.num_kv_blocks >= 0, "num_kv_blocks must be >= 0 (0 means unused), got ", a.num_kv_blocks);
  KVS_CHECK(a.kv_block_size == 0 || a.num_kv_blocks == 0, "kv_block_size (", a.kv_block_size, ") and num_kv_blocks (",
            a.num_kv_blocks, ") are alternatives: set at most one");
}

// Checks a BNSH cache tensor (past or present): rank 4, batch, kv heads, head size.
void CheckBnsh(const Shape& s, const char* name, int B, int Nkv, int H) {
  KVS_CHECK(s.rank == 4, "Input '", name, "' is expected to have 4 dimensions, got ", s.rank);
  KVS_CHECK(s[0] == B, "Input '", name, "' dimension 0 should be batch_size, got ", s[0], " expected ", B);
  KVS_CHECK(s[1] == Nkv, "Input '", name, "' shall have kv_num_heads (", Nkv, "), got ", s[1]);
  KVS_CHECK(s[3] == H, "Input '", name, "' dimension 3 should be same as head_size, got ", s[3], " expected ", H);
}

std::int64_t ReadTotalSequenceLength(const GqaInputs& in) {
  KVS_CHECK(in.total_sequence_length.has_value(), "Input 'total_sequence_length' is required (int32 scalar)");
  const ConstTensorView& t = *in.total_sequence_length;
  KVS_CHECK(t.dtype == DType::kInt32, "Input 'total_sequence_length' must be int32, got ", DTypeName(t.dtype));
  KVS_CHECK(t.NumElements() == 1, "total_sequence_length tensor must be of one element.");
  RequireData(t, "total_sequence_length");
  const std::int64_t v = t.As<std::int32_t>()[0];
  KVS_CHECK(v > 0, "total_sequence_length must be positive, got ", v);
  return v;
}

std::vector<std::int64_t> ReadSeqlensK(const GqaInputs& in, int B) {
  KVS_CHECK(in.seqlens_k.has_value(), "Input 'seqlens_k' is required (int32 [batch_size])");
  const ConstTensorView& t = *in.seqlens_k;
  KVS_CHECK(t.dtype == DType::kInt32, "Input 'seqlens_k' must be int32, got ", DTypeName(t.dtype));
  KVS_CHECK(t.shape.rank >= 1, "seqlens_k must be at least 1D");
  const Shape& s = t.shape;
  const bool ok = (s.rank == 1 && s[0] == B) || (s.rank == 2 && ((s[0] == B && s[1] == 1) || (s[0] == 1 && s[1] == B)));
  KVS_CHECK(ok, "seqlens_k has unexpected shape ", s.ToString(), ": expected [", B, "], [", B, ", 1] or [1, ", B,
            "] (batch_size ", B, ")");
  RequireData(t, "seqlens_k");
  std::vector<std::int64_t> v(static_cast<std::size_t>(B));
  for (int b = 0; b < B; ++b) {
    v[static_cast<std::size_t>(b)] = t.As<std::int32_t>()[b];
    KVS_CHECK(v[static_cast<std::size_t>(b)] >= 0, "seqlens_k[", b, "] = ", v[static_cast<std::size_t>(b)],
              " is out of range: must be >= 0");
  }
  return v;
}

std::vector<std::int64_t> ReadIndexVector(const std::optional<ConstTensorView>& t, const char* name, int B) {
  KVS_CHECK(t->dtype == DType::kInt64, "Input '", name, "' must be int64, got ", DTypeName(t->dtype));
  KVS_CHECK(t->shape.rank == 1 && t->shape[0] == B, "Input '", name, "' must have shape [batch_size] = [", B, "], got ",
            t->shape.ToString());
  RequireData(*t, name);
  std::vector<std::int64_t> v(static_cast<std::size_t>(B));
  for (int b = 0; b < B; ++b) v[static_cast<std::size_t>(b)] = t->As<std::int64_t>()[b];
  return v;
}

// Resolves which KV mode the inputs select and the head size.
void ResolveModeAndShapes(const GqaAttributes& a, const GqaInputs& in, const GqaOutputs& out, GqaPlan& p) {
  const int N = a.num_heads, Nkv = a.kv_num_heads;
  const ConstTensorView& q = in.query;
  RequireRank(q, "query", 3);
  RequireFloat(q, "query");
  RequireData(q, "query");
  p.batch = static_cast<int>(q.shape[0]);
  p.q_len = static_cast<int>(q.shape[1]);
  KVS_CHECK(q.shape[0] >= 1, "Input 'query' dimension 0 (batch_size) must be >= 1, got ", q.shape[0]);
  KVS_CHECK(q.shape[1] >= 1, "Input 'query' dimension 1 (sequence_length) must be >= 1, got ", q.shape[1]);
  const std::int64_t D = q.shape[2];
  p.dtype = q.dtype;
  p.num_heads = N;
  p.kv_heads = Nkv;

  const bool has_key = in.key.has_value(), has_value = in.value.has_value();
  KVS_CHECK(has_key == has_value,
            "Input 'key' and 'value' shall be both present, or both absent in the case of packed qkv.");
  const bool has_pk = in.past_key.has_value(), has_pv = in.past_value.has_value();
  KVS_CHECK(has_pk == has_pv, "Input 'past_key' and 'past_value' shall be both present or both absent.");
  const bool has_wi = in.write_indices.has_value(), has_np = in.nonpad_kv_seqlen.has_value();
  KVS_CHECK(has_wi == has_np,
            "Input 'write_indices' and 'nonpad_kv_seqlen' shall be both present (static scatter mode) "
            "or both absent.");
  const bool has_prk = out.present_key.has_value(), has_prv = out.present_value.has_value();
  KVS_CHECK(has_prk == has_prv, "Output 'present_key' and 'present_value' shall be both present or both absent.");

  if (has_pk) {
    RequireKvCacheDType(in.past_key->dtype, "past_key");
    RequireKvCacheDType(in.past_value->dtype, "past_value");
    RequireData(*in.past_key, "past_key");
    RequireData(*in.past_value, "past_value");
    KVS_CHECK(in.past_key->dtype == in.past_value->dtype,
              "Input 'past_key' and 'past_value' must have the same dtype, got ", DTypeName(in.past_key->dtype),
              " and ", DTypeName(in.past_value->dtype));
    RequireRank(*in.past_key, "past_key", 4);
    RequireRank(*in.past_value, "past_value", 4);
  }
  if (has_prk) {
    KVS_CHECK(out.present_key->data != nullptr || out.present_key->NumElements() == 0,
              "Output 'present_key' has a null data pointer");
    KVS_CHECK(out.present_value->data != nullptr || out.present_value->NumElements() == 0,
              "Output 'present_value' has a null data pointer");
    KVS_CHECK(IsKvCacheDType(out.present_key->dtype) && out.present_key->dtype == out.present_value->dtype,
              "Output 'present_key' and 'present_value' must share one KV cache dtype (float32, float16, bfloat16 or "
              "q8_0), got ",
              DTypeName(out.present_key->dtype), " and ", DTypeName(out.present_value->dtype));
  }
  p.present_aliases_past = has_pk && has_prk && in.past_key->data == out.present_key->data &&
                           in.past_value->data == out.present_value->data && in.past_key->data != nullptr;
  if (has_pk && has_prk && !p.present_aliases_past) {
    KVS_CHECK(in.past_key->data != out.present_key->data && in.past_value->data != out.present_value->data,
              "past_key/present_key and past_value/present_value must both alias (share buffer) or both be distinct");
  }

  auto head_from_unpacked = [&]() {
    KVS_CHECK(D % N == 0, "Input 'query' dimension 2 (", D, ") must be a multiple of num_heads (", N, ")");
    return D / N;
  };
  auto head_from_packed = [&]() {
    KVS_CHECK(D % (N + 2 * Nkv) == 0, "Input 'query' dimension 2 (", D,
              ") of packed QKV must be a multiple of "
              "num_heads + 2 * kv_num_heads (",
              N + 2 * Nkv, ")");
    return D / (N + 2 * Nkv);
  };

  std::int64_t H = 0;
  if (has_wi) {
    p.mode = KvMode::kStaticScatter;
    // Read-only form: key/value absent and the query unpacked (last dim N*H,
    // H read from the cache), as in kBorrowedOmittedKv.
    std::int64_t Hc = 0;
    if (!has_key && has_prk) {
      const Shape& cs = out.present_key->shape;
      if (cs.rank == 4) Hc = cs[3];
      if (cs.rank == 3 && cs[2] % Nkv == 0) Hc = cs[2] / Nkv;
    }
    p.scatter_read_only = Hc > 0 && D == static_cast<std::int64_t>(N) * Hc;
    p.packed = !has_key && !p.scatter_read_only;
    H = p.scatter_read_only ? Hc : p.packed ? head_from_packed() : head_from_unpacked();
  } else if (has_key) {
    H = head_from_unpacked();
    const ConstTensorView& k = *in.key;
    const std::int64_t kv_seq = k.shape.rank == 3 ? k.shape[1] : -1;
    if (kv_seq == 0) {
      KVS_CHECK(has_pk,
                "query and key must have the same sequence length: Input 'key' has 0 rows but no past_key is "
                "given (the borrowed empty-K/V mode needs past_key/past_value holding the source layer's KV)");
      p.mode = KvMode::kBorrowedEmptyKv;
    } else if (!has_pk && kv_seq != p.q_len) {
      p.mode = KvMode::kExternalKv;
    } else {
      p.mode = p.present_aliases_past ? KvMode::kShareBuffer : KvMode::kAppend;
    }
  } else if (has_pk) {
    const std::int64_t Hp = in.past_key->shape[3];
    if (Hp > 0 && D == static_cast<std::int64_t>(N) * Hp) {
      p.mode = KvMode::kBorrowedOmittedKv;
      H = Hp;
    } else {
      p.packed = true;
      H = head_from_packed();
      p.mode = p.present_aliases_past ? KvMode::kShareBuffer : KvMode::kAppend;
    }
  } else {
    p.packed = true;
    H = head_from_packed();
    p.mode = KvMode::kAppend;
  }
  KVS_CHECK(H > 0, "head_size must be > 0, got ", H);
  KVS_CHECK(H % 8 == 0, "head_size must be a multiple of 8. Got head_size % 8 == ", H % 8);
  p.head_size = static_cast<int>(H);
  const std::int64_t kv_hidden = Nkv * H;

  // Token-major sources of Q and the new K / V.
  const std::int64_t row = D;
  p.q_src = {q.data, q.dtype, p.q_len * row, row, 0};
  if (p.packed) {
    p.k_src = {q.data, q.dtype, p.q_len * row, row, N * H};
    p.v_src = {q.data, q.dtype, p.q_len * row, row, (N + Nkv) * H};
  } else if (has_key) {
    const ConstTensorView& k = *in.key;
    const ConstTensorView& v = *in.value;
    RequireRank(k, "key", 3);
    RequireRank(v, "value", 3);
    RequireData(k, "key");
    RequireData(v, "value");
    // External K/V is a borrowed cache: it may also be q8_0 (both or neither).
    const bool q8_ext = p.mode == KvMode::kExternalKv && k.dtype == DType::kQ8_0;
    KVS_CHECK(k.dtype == q.dtype || q8_ext, "Input 'key' must have the dtype of 'query' (", DTypeName(q.dtype),
              p.mode == KvMode::kExternalKv ? ", or q8_0 as an external cache" : "", "), got ", DTypeName(k.dtype));
    KVS_CHECK(v.dtype == k.dtype, "Input 'value' must have the dtype of ", q8_ext ? "'key'" : "'query'", " (",
              DTypeName(k.dtype), "), got ", DTypeName(v.dtype));
    RequireQ8HeadSize(k.dtype, H, "key");
    KVS_CHECK(k.shape[0] == p.batch, "Input 'query' and 'key' shall have same dim 0 (batch size)");
    KVS_CHECK(v.shape[0] == p.batch, "Input 'query' and 'value' shall have same dim 0 (batch size)");
    if (p.mode != KvMode::kExternalKv && p.mode != KvMode::kBorrowedEmptyKv) {
      KVS_CHECK(k.shape[1] == p.q_len, "Input 'query' and 'key' shall have same dim 1 (sequence length)");
    }
    KVS_CHECK(v.shape[1] == k.shape[1], "Input 'query' and 'value' shall have same dim 1 (sequence length)");
    KVS_CHECK(k.shape[2] % Nkv == 0,
              "kv_hidden_size must be a multiple of kv_num_heads. Got kv_hidden_size % "
              "kv_num_heads == ",
              k.shape[2] % Nkv);
    KVS_CHECK(k.shape[2] / Nkv == H, "kv_hidden_size / kv_num_heads must be equal to head_size. Got ", k.shape[2] / Nkv,
              " expected ", H);
    KVS_CHECK(v.shape[2] == k.shape[2], "Input 'value' is expected to have same hidden size as key.");
    p.k_src = {k.data, k.dtype, k.shape[1] * kv_hidden, kv_hidden, 0};
    p.v_src = {v.data, v.dtype, v.shape[1] * kv_hidden, kv_hidden, 0};
    if (p.mode == KvMode::kExternalKv) p.ext_kv_len = k.shape[1];
  }

  if (has_pk) {
    KVS_CHECK(p.mode != KvMode::kExternalKv, "unreachable: external K/V with past");
    CheckBnsh(in.past_key->shape, "past_key", p.batch, Nkv, p.head_size);
    CheckBnsh(in.past_value->shape, "past_value", p.batch, Nkv, p.head_size);
    KVS_CHECK(in.past_key->shape[2] == in.past_value->shape[2],
              "BNSH Input 'past_key' and 'past_value' should have same dimension 2 (max sequencelength or past "
              "sequence length), got ",
              in.past_key->shape[2], " and ", in.past_value->shape[2]);
    p.past_len = in.past_key->shape[2];
    p.cache_dtype = in.past_key->dtype;
    RequireQ8HeadSize(p.cache_dtype, p.head_size, "past_key");
    if (has_prk) {
      KVS_CHECK(out.present_key->dtype == p.cache_dtype, "Output 'present_key' must have the dtype of 'past_key' (",
                DTypeName(p.cache_dtype), "), got ", DTypeName(out.present_key->dtype));
    }
  } else if (has_prk) {
    p.cache_dtype = out.present_key->dtype;
    RequireQ8HeadSize(p.cache_dtype, p.head_size, "present_key");
  } else {
    p.cache_dtype = p.dtype;
  }
}

void PlanRows(const GqaAttributes& a, const GqaInputs& in, const GqaOutputs& out, GqaPlan& p) {
  const int B = p.batch, S = p.q_len, Nkv = p.kv_heads, H = p.head_size;
  const auto Bs = static_cast<std::size_t>(B);
  p.kv_len.assign(Bs, 0);
  p.q_offset.assign(Bs, 0);
  p.valid_q.assign(Bs, S);
  p.past_rows.assign(Bs, 0);
  p.write_at.assign(Bs, 0);
  p.n_write.assign(Bs, 0);

  if (p.mode == KvMode::kStaticScatter) {
    KVS_CHECK(!in.seqlens_k && !in.total_sequence_length,
              "static scatter mode (write_indices / nonpad_kv_seqlen) takes no seqlens_k or total_sequence_length");
    KVS_CHECK(!in.past_key || p.present_aliases_past,
              "static scatter mode: past_key/past_value must be absent or alias present_key/present_value (the cache)");
    KVS_CHECK(out.present_key.has_value(),
              "static scatter mode needs the cache buffers as present_key/present_value "
              "([B, C, kv_hidden] or BNSH [B, N_kv, C, H])");
    const Shape& ck = out.present_key->shape;
    KVS_CHECK(ck == out.present_value->shape, "static scatter mode: present_key shape ", ck.ToString(),
              " and present_value shape ", out.present_value->shape.ToString(), " must be equal");
    if (ck.rank == 3) {
      KVS_CHECK(ck[0] == B && ck[2] == static_cast<std::int64_t>(Nkv) * H,
                "static scatter mode: 3-D cache must be [batch_size, C, kv_hidden] = [", B, ", C, ", Nkv * H, "], got ",
                ck.ToString());
      p.present_len = ck[1];
      p.scatter_bnsh = false;
    } else {
      KVS_CHECK(ck.rank == 4,
                "static scatter mode: cache must be 3-D [B, C, kv_hidden] or 4-D BNSH [B, N_kv, C, H], "
                "got rank ",
                ck.rank);
      CheckBnsh(ck, "present_key", B, Nkv, H);
      p.present_len = ck[2];
      p.scatter_bnsh = true;
    }
    const std::int64_t C = p.present_len;
    KVS_CHECK(C >= 1, "static scatter mode: cache capacity C must be >= 1, got ", C);
    p.cache_dtype = out.present_key->dtype;
    RequireQ8HeadSize(p.cache_dtype, H, "present_key");
    const bool circular = a.scatter_mode == GqaAttributes::ScatterMode::kCircular;
    if (circular) {
      KVS_CHECK(a.causal == 1 && a.local_window_size > 0,
                "circular scatter mode needs causal = 1 and local_window_size > 0 (a window-sized ring), got causal ",
                a.causal, ", local_window_size ", a.local_window_size);
      KVS_CHECK(
          C >= static_cast<std::int64_t>(a.local_window_size) + S - 1, "circular scatter mode: cache capacity C = ", C,
          " is too small for local_window_size W = ", a.local_window_size, " and sequence_length S = ", S,
          ": need C >= W + S - 1 = ", a.local_window_size + S - 1, " so every key a query needs is still resident");
    }
    const auto wi = ReadIndexVector(in.write_indices, "write_indices", B);
    const auto np = ReadIndexVector(in.nonpad_kv_seqlen, "nonpad_kv_seqlen", B);
    for (int b = 0; b < B; ++b) {
      const auto i = static_cast<std::size_t>(b);
      constexpr std::int64_t kMaxIndex = std::int64_t{1} << 48;  // keeps every position sum far from overflow
      KVS_CHECK(wi[i] >= 0 && wi[i] < kMaxIndex, "write_indices[", b, "] = ", wi[i], " must be >= 0 and < 2^48");
      KVS_CHECK(np[i] >= wi[i] && np[i] - wi[i] <= S, "nonpad_kv_seqlen[", b, "] = ", np[i],
                " must be in [write_indices[", b, "], write_indices[", b, "] + sequence_length] = [", wi[i], ", ",
                wi[i] + S, "]");
      const std::int64_t n = np[i] - wi[i];
      if (!circular) {
        // The read-only form writes nothing: what runs past C is the keys it reads.
        const std::int64_t from = p.scatter_read_only ? 0 : wi[i];
        KVS_CHECK(np[i] <= C, "static scatter (linear", p.scatter_read_only ? ", read-only" : "", "): row ", b,
                  p.scatter_read_only ? " reads keys [" : " writes rows [", from, ", ", np[i],
                  ") past the cache capacity C = ", C, "; rewind, enlarge the cache, or use circular mode");
      }
      p.kv_len[i] = np[i];
      p.q_offset[i] = wi[i];
      p.valid_q[i] = n;
      p.write_at[i] = wi[i];
      p.n_write[i] = p.scatter_read_only ? 0 : n;
    }
    p.first_prompt = false;
    p.total_len = 0;
    return;
  }

  KVS_CHECK(!in.write_indices, "unreachable");
  const std::int64_t tsl = ReadTotalSequenceLength(in);
  p.total_len = tsl;
  const auto seqlens = ReadSeqlensK(in, B);
  p.first_prompt = (S == tsl);

  for (int b = 0; b < B; ++b) {
    const auto i = static_cast<std::size_t>(b);
    const std::int64_t T = seqlens[i] + 1;
    KVS_CHECK(T <= tsl, "seqlens_k[", b, "] = ", seqlens[i], " is out of range [0, total_sequence_length = ", tsl, ")");
    p.kv_len[i] = T;
    switch (p.mode) {
      case KvMode::kAppend:
      case KvMode::kShareBuffer: {
        if (p.first_prompt) {
          KVS_CHECK(T <= S, "seqlens_k[", b, "] = ", seqlens[i], " is out of range [0, ", S,
                    ") on a first prompt (sequence_length == total_sequence_length == ", S, ")");
          p.q_offset[i] = 0;
          p.past_rows[i] = 0;
          p.write_at[i] = 0;
        } else {
          KVS_CHECK(T >= S, "seqlens_k[", b, "] = ", seqlens[i], " is too small for sequence_length ", S);
          const std::int64_t past = T - S;
          KVS_CHECK(past <= p.past_len, "seqlens_k[", b, "] = ", seqlens[i], " requires ", past,
                    " past KV rows, which exceeds the past buffer sequence length ", p.past_len, ".");
          KVS_CHECK(p.mode != KvMode::kShareBuffer || T <= p.past_len, "seqlens_k[", b, "] = ", seqlens[i],
                    " is out of range [0, ", p.past_len, "): the shared past/present buffer holds ", p.past_len,
                    " rows");
          p.q_offset[i] = past;
          p.past_rows[i] = past;
          p.write_at[i] = past;
        }
        p.n_write[i] = S;
        break;
      }
      case KvMode::kBorrowedEmptyKv:
      case KvMode::kBorrowedOmittedKv: {
        KVS_CHECK(T <= p.past_len, "total_seqlen (", T, ") exceeds past buffer size (", p.past_len,
                  ") in shared KV mode (seqlens_k[", b, "] = ", seqlens[i], ")");
        if (p.first_prompt) {
          p.q_offset[i] = 0;
        } else {
          KVS_CHECK(T >= S, "seqlens_k[", b, "] = ", seqlens[i], " is too small for sequence_length ", S);
          p.q_offset[i] = T - S;
        }
        break;
      }
      case KvMode::kExternalKv: {
        KVS_CHECK(T <= p.ext_kv_len, "seqlens_k[", b, "] = ", seqlens[i], " is out of range [0, ", p.ext_kv_len,
                  "): key/value hold ", p.ext_kv_len, " rows (external K/V mode)");
        p.q_offset[i] = T - S;
        break;
      }
      case KvMode::kStaticScatter: break;
    }
  }

  // Present buffers.
  switch (p.mode) {
    case KvMode::kAppend: {
      p.present_len = std::max(tsl, p.past_len);
      if (out.present_key) {
        const Shape want{B, Nkv, p.present_len, H};
        KVS_CHECK(out.present_key->shape == want && out.present_value->shape == want,
                  "Output 'present_key'/'present_value' must have shape ", want.ToString(),
                  " (batch_size, kv_num_heads, max(total_sequence_length, past length), head_size), got ",
                  out.present_key->shape.ToString(), " and ", out.present_value->shape.ToString());
      }
      break;
    }
    case KvMode::kShareBuffer: {
      p.present_len = p.past_len;
      KVS_CHECK(out.present_key->shape == in.past_key->shape && out.present_value->shape == in.past_value->shape,
                "share buffer: present_key/present_value must have the shapes of past_key/past_value");
      KVS_CHECK(!p.first_prompt || S <= p.past_len, "share buffer: sequence_length ", S,
                " exceeds the buffer capacity ", p.past_len);
      break;
    }
    case KvMode::kBorrowedEmptyKv:
    case KvMode::kBorrowedOmittedKv: {
      p.present_len = p.past_len;
      if (out.present_key && !p.present_aliases_past) {
        KVS_CHECK(out.present_key->shape == in.past_key->shape && out.present_value->shape == in.past_value->shape,
                  "Output 'present_key'/'present_value' must have the shape of past_key ",
                  in.past_key->shape.ToString(), " in the borrowed KV modes, got ", out.present_key->shape.ToString());
      }
      break;
    }
    case KvMode::kExternalKv: {
      p.present_len = p.ext_kv_len;
      if (out.present_key) {
        const Shape want{B, Nkv, p.ext_kv_len, H};
        KVS_CHECK(out.present_key->shape == want && out.present_value->shape == want,
                  "Output 'present_key'/'present_value' must have shape ", want.ToString(),
                  " (a BNSH copy of key/value) in external K/V mode, got ", out.present_key->shape.ToString());
      }
      break;
    }
    case KvMode::kStaticScatter: break;
  }
}

void PlanRotary(const GqaAttributes& a, const GqaInputs& in, GqaPlan& p) {
  const bool has_cos = in.cos_cache.has_value(), has_sin = in.sin_cache.has_value();
  KVS_CHECK(has_cos == has_sin, "Input 'cos_cache' and 'sin_cache' shall be both present or both absent.");
  if (a.do_rotary == 0) return;
  KVS_CHECK(has_cos, "do_rotary = 1 requires cos_cache and sin_cache");
  const ConstTensorView& c = *in.cos_cache;
  const ConstTensorView& s = *in.sin_cache;
  RequireFloat(c, "cos_cache");
  RequireFloat(s, "sin_cache");
  RequireRank(c, "cos_cache", 2);
  RequireRank(s, "sin_cache", 2);
  RequireData(c, "cos_cache");
  RequireData(s, "sin_cache");
  const int H = p.head_size;
  KVS_CHECK(H % 16 == 0, "head_size shall be a multiple of 16. Got head_size % 16 == ", H % 16);
  KVS_CHECK(c.shape[1] == s.shape[1], "cos_cache and sin_cache dimension 1 must be the same.");
  KVS_CHECK(c.shape[0] == s.shape[0], "cos_cache and sin_cache dimension 0 must be the same, got ", c.shape[0], " and ",
            s.shape[0]);
  KVS_CHECK(c.shape[1] > 0 && c.shape[1] <= H / 2 && c.shape[1] % 8 == 0,
            "cos_cache dimension 1 must be <= head_size / 2 and a multiple of 8. Got ", c.shape[1], " with head_size ",
            H);
  p.rotary_half_dim = static_cast<int>(c.shape[1]);
  const std::int64_t max_pos = c.shape[0];
  const int B = p.batch, S = p.q_len;
  p.rope_pos.assign(static_cast<std::size_t>(B) * S, 0);
  const ConstTensorView* pid = in.position_ids ? &*in.position_ids : nullptr;
  if (pid) {
    KVS_CHECK(pid->dtype == DType::kInt64, "Input 'position_ids' must be int64, got ", DTypeName(pid->dtype));
    RequireRank(*pid, "position_ids", 2);
    RequireData(*pid, "position_ids");
    KVS_CHECK(pid->shape[0] == B, "position_ids dimension 0 must be equal to the batch size, got ", pid->shape[0]);
    KVS_CHECK(pid->shape[1] >= S, "position_ids dimension 1 must be atleast sequence length, got ", pid->shape[1]);
  } else if (p.mode != KvMode::kStaticScatter) {
    KVS_CHECK(max_pos >= p.total_len, "cos_cache dimension 0 shall not be less than total_sequence_length. Got ",
              max_pos, " < ", p.total_len);
  }
  for (int b = 0; b < B; ++b) {
    for (int s = 0; s < S; ++s) {
      if (s >= p.valid_q[static_cast<std::size_t>(b)]) continue;  // padding rows are neither rotated nor written
      std::int64_t pos;
      if (pid) {
        const std::int64_t* row = pid->As<std::int64_t>() + b * pid->shape[1];
        if (p.first_prompt) {
          KVS_CHECK(max_pos >= S, "cos_cache dimension 0 = ", max_pos, " is shorter than sequence_length ", S,
                    ": the prompt's positions position_ids[", b, ", 0] + [0, ", S, ") cannot all fit in it");
          KVS_CHECK(row[0] >= 0 && row[0] <= max_pos - S,
                    "position_ids base value out of cos/sin cache range: position_ids[", b, ", 0] = ", row[0],
                    ", allowed [0, ", max_pos - S, "] for cos_cache dimension 0 = ", max_pos, " and sequence_length ",
                    S);
        }
        pos = p.first_prompt ? row[0] + s : row[s];
      } else {
        pos = p.q_offset[static_cast<std::size_t>(b)] + s;
      }
      KVS_CHECK(pos >= 0 && pos < max_pos, "position_ids value out of range: position ", pos, " (row ", b, ", query ",
                s, ") is outside [0, ", max_pos, ") of cos_cache/sin_cache");
      p.rope_pos[static_cast<std::size_t>(b) * S + s] = pos;
    }
  }
}

void PlanExtras(const GqaAttributes& a, const GqaInputs& in, const GqaOutputs& out, GqaPlan& p) {
  const int B = p.batch, S = p.q_len, N = p.num_heads;
  const bool circular = p.mode == KvMode::kStaticScatter && a.scatter_mode == GqaAttributes::ScatterMode::kCircular;
  // Columns of attention_bias and output_qk: absolute key positions.
  p.qk_cols = p.mode == KvMode::kStaticScatter ? p.present_len : p.total_len;

  if (in.attention_bias) {
    const ConstTensorView& t = *in.attention_bias;
    KVS_CHECK(!circular,
              "attention_bias is not supported with the circular scatter cache (its columns would be ring "
              "slots, not positions); use the linear mode or fold the bias into the inputs");
    RequireFloat(t, "attention_bias");
    RequireRank(t, "attention_bias", 4);
    RequireData(t, "attention_bias");
    KVS_CHECK(t.shape[0] == B || t.shape[0] == 1,
              "attention_bias dimension 0 must be equal to the batch size or 1, got ", t.shape[0]);
    KVS_CHECK(t.shape[1] == N || t.shape[1] == 1,
              "attention_bias dimension 1 must be equal to the num heads or 1, got ", t.shape[1]);
    KVS_CHECK(t.shape[2] == S, "attention_bias dimension 2 must be equal to the sequence length, got ", t.shape[2]);
    KVS_CHECK(t.shape[3] == p.qk_cols,
              p.mode == KvMode::kStaticScatter ? "attention_bias dimension 3 must be equal to the cache capacity C = "
                                               : "attention_bias dimension 3 must be equal to total_sequence_length = ",
              p.qk_cols, ", got ", t.shape[3]);
  }
  if (in.head_sink) {
    const ConstTensorView& t = *in.head_sink;
    KVS_CHECK(a.smooth_softmax != 1, "head_sink should not be provided when use_smooth_softmax is true.");
    RequireFloat(t, "head_sink");
    KVS_CHECK(t.shape.rank == 1, "head_sink must be a 1D tensor, got rank ", t.shape.rank);
    RequireData(t, "head_sink");
    KVS_CHECK(t.shape[0] == N, "head_sink dimension 0 must be equal to the num heads, got ", t.shape[0]);
  }
  // Output.
  {
    const TensorView& o = out.output;
    const Shape want{B, S, static_cast<std::int64_t>(N) * p.head_size};
    KVS_CHECK(o.shape == want, "Output 'output' must have shape ", want.ToString(), ", got ", o.shape.ToString());
    KVS_CHECK(o.dtype == p.dtype, "Output 'output' must have the dtype of 'query' (", DTypeName(p.dtype), "), got ",
              DTypeName(o.dtype));
    KVS_CHECK(o.data != nullptr, "Output 'output' has a null data pointer");
  }
  if (a.qk_output != 0) {
    KVS_CHECK(out.output_qk.has_value(), "qk_output attribute was configured but output buffer was not provided");
    KVS_CHECK(!circular, "qk_output is not supported with the circular scatter cache");
    const TensorView& t = *out.output_qk;
    const Shape want{B, N, S, p.qk_cols};
    KVS_CHECK(t.shape == want, "Output 'output_qk' must have shape ", want.ToString(), ", got ", t.shape.ToString());
    KVS_CHECK(t.dtype == DType::kFloat32 || t.dtype == p.dtype,
              "Output 'output_qk' must be float32 or the dtype of 'query', got ", DTypeName(t.dtype));
    KVS_CHECK(t.data != nullptr, "Output 'output_qk' has a null data pointer");
  } else {
    KVS_CHECK(!out.output_qk.has_value(), "Output QK buffer was provided but qk_output attribute was not configured");
  }

  p.scale = a.scale > 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(p.head_size));
  std::int64_t max_t = 1;
  for (std::int64_t t : p.kv_len) max_t = std::max(max_t, t);
  if (a.num_kv_blocks > 0) {
    p.kv_block_size = static_cast<int>((max_t + a.num_kv_blocks - 1) / a.num_kv_blocks);
  } else {
    p.kv_block_size = a.kv_block_size;
  }
}

}  // namespace

GqaPlan PlanGqa(const GqaAttributes& attrs, const GqaInputs& in, const GqaOutputs& out) {
  ValidateAttributes(attrs);
  GqaPlan p;
  ResolveModeAndShapes(attrs, in, out, p);
  PlanRows(attrs, in, out, p);
  PlanSpans(attrs, in, p);
  PlanRotary(attrs, in, p);
  PlanExtras(attrs, in, out, p);
  return p;
}

}  // namespace kvshare::detail
