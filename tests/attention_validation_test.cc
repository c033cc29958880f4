// Every validation error of the op is triggered and its message checked; no
// value of seqlens_k, write_indices, nonpad_kv_seqlen or position_ids reads
// out of bounds (the sanitizer run checks the latter).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "attention_gqa_case.h"
#include "kvshare/common/error.h"

namespace kvshare::testing {
namespace {

using ::testing::HasSubstr;

constexpr int B = 2, S = 1, N = 4, Nkv = 2, H = 16, P = 8;

// A valid decode step (append mode, every optional input present).
GqaCase ValidDecode() {
  std::mt19937_64 rng(1);
  GqaCase c;
  c.attrs.num_heads = N;
  c.attrs.kv_num_heads = Nkv;
  c.query = RandomBuffer(DType::kFloat32, {B, S, N * H}, rng);
  c.key = RandomBuffer(DType::kFloat32, {B, S, Nkv * H}, rng);
  c.value = RandomBuffer(DType::kFloat32, {B, S, Nkv * H}, rng);
  c.has_key = true;
  c.past_key = RandomBuffer(DType::kFloat32, {B, Nkv, P, H}, rng);
  c.past_value = RandomBuffer(DType::kFloat32, {B, Nkv, P, H}, rng);
  c.has_past = true;
  c.seqlens_k = Int32Buffer({5, 8}, {B});
  c.total_len = Int32Buffer({9}, {1});
  c.has_seqlens = true;
  c.present_key = Buffer(DType::kFloat32, {B, Nkv, 9, H});
  c.present_value = Buffer(DType::kFloat32, {B, Nkv, 9, H});
  c.has_present = true;
  c.output = Buffer(DType::kFloat32, {B, S, N * H});
  return c;
}

GqaCase WithRope(GqaCase c) {
  std::mt19937_64 rng(2);
  c.attrs.do_rotary = 1;
  c.cos = RandomBuffer(DType::kFloat32, {32, H / 2}, rng);
  c.sin = RandomBuffer(DType::kFloat32, {32, H / 2}, rng);
  c.has_rope = true;
  return c;
}

// `s` new tokens per row: query, key and value drawn from `rng`, an output
// to match.
void SetNewTokens(GqaCase& c, std::int64_t s, std::mt19937_64& rng) {
  c.query = RandomBuffer(DType::kFloat32, {B, s, N * H}, rng);
  c.key = RandomBuffer(DType::kFloat32, {B, s, Nkv * H}, rng);
  c.value = RandomBuffer(DType::kFloat32, {B, s, Nkv * H}, rng);
  c.output = Buffer(DType::kFloat32, {B, s, N * H});
}

// A first prompt of 4 tokens per row with RoPE by position_ids [B, 4] over a
// cos/sin cache of `cos_rows` rows.
GqaCase FirstPromptWithPositions(std::vector<std::int64_t> position_ids, std::int64_t cos_rows) {
  GqaCase c = WithRope(ValidDecode());
  std::mt19937_64 rng(6);
  c.has_past = c.has_present = false;
  SetNewTokens(c, 4, rng);
  c.total_len = Int32Buffer({4}, {1});
  c.seqlens_k = Int32Buffer({3, 3}, {B});
  c.has_pos = true;
  c.position_ids = Int64Buffer(std::move(position_ids), {B, 4});
  c.cos = RandomBuffer(DType::kFloat32, {cos_rows, H / 2}, rng);
  c.sin = RandomBuffer(DType::kFloat32, {cos_rows, H / 2}, rng);
  return c;
}

GqaCase ValidScatter() {
  GqaCase c = ValidDecode();
  c.has_past = false;
  c.has_seqlens = false;
  c.present_key = Buffer(DType::kFloat32, {B, 10, Nkv * H});
  c.present_value = Buffer(DType::kFloat32, {B, 10, Nkv * H});
  c.write_indices = Int64Buffer({3, 0}, {B});
  c.nonpad = Int64Buffer({4, 1}, {B});
  c.has_scatter = true;
  return c;
}

struct Bad {
  const char* name;
  std::function<GqaCase()> make;
  const char* message;
};

std::vector<Bad> Cases() {
  auto mut = [](std::function<void(GqaCase&)> f, std::function<GqaCase()> base = ValidDecode) {
    return [f, base] {
      GqaCase c = base();
      f(c);
      return c;
    };
  };
  auto seqlens = [&](std::vector<std::int32_t> v) {
    return mut([v](GqaCase& c) { c.seqlens_k = Int32Buffer(v, {B}); });
  };
  return {
      {"num_heads", mut([](GqaCase& c) { c.attrs.num_heads = 0; }), "num_heads must be > 0, got 0"},
      {"kv_num_heads", mut([](GqaCase& c) { c.attrs.kv_num_heads = -1; }), "kv_num_heads must be > 0, got -1"},
      {"heads_multiple", mut([](GqaCase& c) { c.attrs.kv_num_heads = 3; }),
       "num_heads must be a multiple of kv_num_heads. Got num_heads % kv_num_heads == 1"},
      {"causal", mut([](GqaCase& c) { c.attrs.causal = 2; }), "causal must be 0 or 1, got 2"},
      {"window_zero", mut([](GqaCase& c) { c.attrs.local_window_size = 0; }),
       "local_window_size must be -1 (off) or > 0, got 0"},
      {"scale", mut([](GqaCase& c) { c.attrs.scale = -1.f; }), "scale must be finite and >= 0"},
      {"softcap", mut([](GqaCase& c) { c.attrs.softcap = -2.f; }), "softcap must be finite and >= 0"},
      {"do_rotary", mut([](GqaCase& c) { c.attrs.do_rotary = 3; }), "do_rotary must be 0 or 1, got 3"},
      {"interleaved", mut([](GqaCase& c) { c.attrs.rotary_interleaved = 2; }),
       "rotary_interleaved must be 0 or 1, got 2"},
      {"qk_output", mut([](GqaCase& c) { c.attrs.qk_output = 3; }), "qk_output attribute received unsupported value 3"},
      {"kv_block_size", mut([](GqaCase& c) { c.attrs.kv_block_size = -1; }), "kv_block_size must be >= 0"},
      {"num_kv_blocks", mut([](GqaCase& c) { c.attrs.num_kv_blocks = -1; }), "num_kv_blocks must be >= 0"},
      {"both_blocks", mut([](GqaCase& c) {
         c.attrs.kv_block_size = 4;
         c.attrs.num_kv_blocks = 2;
       }),
       "are alternatives: set at most one"},
      {"query_rank", mut([](GqaCase& c) {
         c.query.shape = {B * S, N * H};
       }),
       "Input 'query' is expected to have 3 dimensions, got 2"},
      {"query_dtype", mut([](GqaCase& c) { c.query.dtype = DType::kInt32; }),
       "Input 'query' must be float32, float16 or bfloat16, got int32"},
      {"query_null", mut([](GqaCase& c) {
         c.query.bytes.clear();
         c.query.bytes.shrink_to_fit();
       }),
       "Input 'query' has a null data pointer"},
      {"query_batch0", mut([](GqaCase& c) {
         c.query.shape = {0, S, N * H};
       }),
       "dimension 0 (batch_size) must be >= 1, got 0"},
      {"query_seq0", mut([](GqaCase& c) {
         c.query.shape = {B, 0, N * H};
       }),
       "dimension 1 (sequence_length) must be >= 1, got 0"},
      {"key_without_value", mut([](GqaCase& c) { c.drop_value = true; }),
       "Input 'key' and 'value' shall be both present, or both absent in the case of packed qkv."},
      {"past_half", mut([](GqaCase& c) { c.drop_past_value = true; }),
       "Input 'past_key' and 'past_value' shall be both present or both absent."},
      {"past_dtypes", mut([](GqaCase& c) { c.past_value.dtype = DType::kFloat16; }),
       "Input 'past_key' and 'past_value' must have the same dtype, got float32 and float16"},
      {"past_rank", mut([](GqaCase& c) {
         c.past_key.shape = {B, Nkv * P, H};
         c.past_value.shape = {B, Nkv * P, H};
       }),
       "Input 'past_key' is expected to have 4 dimensions, got 3"},
      {"past_dim0", mut([](GqaCase& c) {
         c.past_key.shape = {1, Nkv, P, H};
         c.past_value.shape = {1, Nkv, P, H};
       }),
       "Input 'past_key' dimension 0 should be batch_size, got 1 expected 2"},
      {"past_dim1", mut([](GqaCase& c) {
         c.past_key.shape = {B, 1, P * 2, H};
         c.past_value.shape = {B, 1, P * 2, H};
       }),
       "Input 'past_key' shall have kv_num_heads (2), got 1"},
      {"past_dim3", mut([](GqaCase& c) {
         c.past_key.shape = {B, Nkv, P / 2, H * 2};
         c.past_value.shape = {B, Nkv, P / 2, H * 2};
       }),
       "Input 'past_key' dimension 3 should be same as head_size, got 32 expected 16"},
      {"past_dim2", mut([](GqaCase& c) {
         c.past_value.shape = {B, Nkv, P - 1, H};
       }),
       "BNSH Input 'past_key' and 'past_value' should have same dimension 2 (max sequencelength or past sequence "
       "length), got 8 and 7"},
      {"past_dtype", mut([](GqaCase& c) { c.past_key.dtype = c.past_value.dtype = DType::kInt64; }),
       "Input 'past_key' must be float32, float16, bfloat16 or q8_0 (a KV cache dtype), got int64"},
      {"present_dtype", mut([](GqaCase& c) { c.present_key.dtype = DType::kFloat16; }),
       "Output 'present_key' and 'present_value' must share one KV cache dtype (float32, float16, bfloat16 or q8_0), "
       "got float16 and float32"},
      {"present_vs_past_dtype", mut([](GqaCase& c) { c.present_key.dtype = c.present_value.dtype = DType::kFloat16; }),
       "Output 'present_key' must have the dtype of 'past_key' (float32), got float16"},
      {"present_half", mut([](GqaCase& c) { c.drop_present_value = true; }),
       "Output 'present_key' and 'present_value' shall be both present or both absent."},
      {"query_hidden", mut([](GqaCase& c) {
         c.query.shape = {B, S, N * H + 2};
         c.query.bytes.resize(4096);
       }),
       "Input 'query' dimension 2 (66) must be a multiple of num_heads (4)"},
      {"head_size_8", mut([](GqaCase& c) {
         c.query.shape = {B, S, N * 12};
         c.key.shape = c.value.shape = {B, S, Nkv * 12};
       }),
       "head_size must be a multiple of 8. Got head_size % 8 == 4"},
      {"key_rank", mut([](GqaCase& c) {
         c.key.shape = {B, S, Nkv, H};
       }),
       "Input 'key' is expected to have 3 dimensions, got 4"},
      {"key_dtype", mut([](GqaCase& c) { c.key.dtype = DType::kFloat16; }),
       "Input 'key' must have the dtype of 'query' (float32), got float16"},
      {"value_dtype", mut([](GqaCase& c) { c.value.dtype = DType::kBFloat16; }),
       "Input 'value' must have the dtype of 'query' (float32), got bfloat16"},
      {"key_batch", mut([](GqaCase& c) {
         c.key.shape = {1, S, Nkv * H};
       }),
       "Input 'query' and 'key' shall have same dim 0 (batch size)"},
      {"value_batch", mut([](GqaCase& c) {
         c.value.shape = {1, S, Nkv * H};
       }),
       "Input 'query' and 'value' shall have same dim 0 (batch size)"},
      {"key_seq", mut([](GqaCase& c) {
         c.key.shape = c.value.shape = {B, 2, Nkv * H / 2};
       }),
       "Input 'query' and 'key' shall have same dim 1 (sequence length)"},
      {"value_seq", mut([](GqaCase& c) {
         c.value.shape = {B, 2, Nkv * H / 2};
       }),
       "Input 'query' and 'value' shall have same dim 1 (sequence length)"},
      {"kv_hidden_multiple", mut([](GqaCase& c) {
         c.key.shape = c.value.shape = {B, S, 31};
       }),
       "kv_hidden_size must be a multiple of kv_num_heads. Got kv_hidden_size % kv_num_heads == 1"},
      {"kv_hidden_head", mut([](GqaCase& c) {
         c.key.shape = c.value.shape = {B, S, 16};
       }),
       "kv_hidden_size / kv_num_heads must be equal to head_size. Got 8 expected 16"},
      {"value_hidden", mut([](GqaCase& c) {
         c.value.shape = {B, S, 64};
         c.value.bytes.resize(4096);
       }),
       "Input 'value' is expected to have same hidden size as key."},
      {"empty_key_no_past", mut([](GqaCase& c) {
         c.has_past = false;
         c.has_present = false;
         c.key.shape = c.value.shape = {B, 0, Nkv * H};
       }),
       "query and key must have the same sequence length"},
      {"packed_hidden", mut([](GqaCase& c) {
         c.has_key = false;
         c.has_past = false;
         c.has_present = false;
         c.query.shape = {B, S, 70};
         c.query.bytes.resize(4096);
       }),
       "of packed QKV must be a multiple of num_heads + 2 * kv_num_heads (8)"},
      {"tsl_missing", mut([](GqaCase& c) { c.has_seqlens = false; }), "Input 'total_sequence_length' is required"},
      {"tsl_dtype", mut([](GqaCase& c) { c.total_len = Int64Buffer({9}, {1}); }),
       "Input 'total_sequence_length' must be int32, got int64"},
      {"tsl_elements", mut([](GqaCase& c) {
         c.total_len = Int32Buffer({9, 9}, {2});
       }),
       "total_sequence_length tensor must be of one element."},
      {"tsl_positive", mut([](GqaCase& c) { c.total_len = Int32Buffer({0}, {1}); }),
       "total_sequence_length must be positive, got 0"},
      {"seqlens_dtype", mut([](GqaCase& c) {
         c.seqlens_k = Int64Buffer({5, 8}, {B});
       }),
       "Input 'seqlens_k' must be int32, got int64"},
      {"seqlens_rank", mut([](GqaCase& c) { c.seqlens_k.shape = {}; }), "seqlens_k must be at least 1D"},
      {"seqlens_shape", mut([](GqaCase& c) {
         c.seqlens_k = Int32Buffer({5, 8, 1}, {3});
       }),
       "seqlens_k has unexpected shape [3]: expected [2], [2, 1] or [1, 2]"},
      {"seqlens_negative", seqlens({-1, 8}), "seqlens_k[0] = -1 is out of range: must be >= 0"},
      {"seqlens_over_total", seqlens({5, 9}), "seqlens_k[1] = 9 is out of range [0, total_sequence_length = 9)"},
      {"seqlens_huge", seqlens({5, 2147483646}),
       "seqlens_k[1] = 2147483646 is out of range [0, total_sequence_length = 9)"},
      {"first_prompt", mut([](GqaCase& c) {
         c.total_len = Int32Buffer({1}, {1});
         c.seqlens_k = Int32Buffer({1, 0}, {B});
       }),
       "seqlens_k[0] = 1 is out of range [0, total_sequence_length = 1)"},
      {"first_prompt_rows", mut([](GqaCase& c) {
         std::mt19937_64 rng(3);
         SetNewTokens(c, 2, rng);
         c.total_len = Int32Buffer({2}, {1});
         c.seqlens_k = Int32Buffer({1, 1}, {B});
         c.has_past = c.has_present = false;
         c.seqlens_k = Int32Buffer({2, 1}, {B});
       }),
       "seqlens_k[0] = 2 is out of range [0, total_sequence_length = 2)"},
      {"too_small", mut([](GqaCase& c) {
         std::mt19937_64 rng(3);
         SetNewTokens(c, 3, rng);
         c.seqlens_k = Int32Buffer({1, 8}, {B});
       }),
       "seqlens_k[0] = 1 is too small for sequence_length 3"},
      {"past_rows", mut([](GqaCase& c) {
         c.past_key.shape = c.past_value.shape = {B, Nkv, 4, H};
       }),
       "seqlens_k[0] = 5 requires 5 past KV rows, which exceeds the past buffer sequence length 4."},
      {"present_shape", mut([](GqaCase& c) {
         c.present_key.shape = c.present_value.shape = {B, Nkv, 8, H};
       }),
       "Output 'present_key'/'present_value' must have shape [2, 2, 9, 16]"},
      {"share_buffer_overflow", mut([](GqaCase& c) {
         c.has_present = false;
         c.alias_present = true;
         c.total_len = Int32Buffer({9}, {1});
         c.seqlens_k = Int32Buffer({8, 5}, {B});
       }),
       "seqlens_k[0] = 8 is out of range [0, 8): the shared past/present buffer holds 8 rows"},
      {"borrowed_overflow", mut([](GqaCase& c) {
         c.has_key = false;
         c.has_present = false;
       }),
       "total_seqlen (9) exceeds past buffer size (8) in shared KV mode"},
      {"borrowed_present_shape", mut([](GqaCase& c) {
         c.has_key = false;
         c.seqlens_k = Int32Buffer({5, 7}, {B});
       }),
       "must have the shape of past_key [2, 2, 8, 16] in the borrowed KV modes"},
      {"external_overflow", mut([](GqaCase& c) {
         std::mt19937_64 rng(4);
         c.has_past = c.has_present = false;
         c.key = RandomBuffer(DType::kFloat32, {B, 6, Nkv * H}, rng);
         c.value = RandomBuffer(DType::kFloat32, {B, 6, Nkv * H}, rng);
       }),
       "seqlens_k[1] = 8 is out of range [0, 6): key/value hold 6 rows (external K/V mode)"},
      {"external_present", mut([](GqaCase& c) {
         std::mt19937_64 rng(4);
         c.has_past = false;
         c.key = RandomBuffer(DType::kFloat32, {B, 10, Nkv * H}, rng);
         c.value = RandomBuffer(DType::kFloat32, {B, 10, Nkv * H}, rng);
       }),
       "(a BNSH copy of key/value) in external K/V mode"},
      {"alias_half", mut([](GqaCase& c) {
         c.alias_key_only = true;
         c.present_value.shape = c.past_value.shape;
       }),
       "must both alias (share buffer) or both be distinct"},
      // Rotary.
      {"cos_only", mut([](GqaCase& c) { c.drop_sin = true; }, [] { return WithRope(ValidDecode()); }),
       "Input 'cos_cache' and 'sin_cache' shall be both present or both absent."},
      {"rotary_no_cache", mut([](GqaCase& c) { c.attrs.do_rotary = 1; }),
       "do_rotary = 1 requires cos_cache and sin_cache"},
      {"rotary_head16",
       mut(
           [](GqaCase& c) {
             std::mt19937_64 rng(5);
             c.query = RandomBuffer(DType::kFloat32, {B, S, N * 24}, rng);
             c.key = RandomBuffer(DType::kFloat32, {B, S, Nkv * 24}, rng);
             c.value = RandomBuffer(DType::kFloat32, {B, S, Nkv * 24}, rng);
             c.past_key = RandomBuffer(DType::kFloat32, {B, Nkv, P, 24}, rng);
             c.past_value = RandomBuffer(DType::kFloat32, {B, Nkv, P, 24}, rng);
             c.present_key = Buffer(DType::kFloat32, {B, Nkv, 9, 24});
             c.present_value = Buffer(DType::kFloat32, {B, Nkv, 9, 24});
             c.output = Buffer(DType::kFloat32, {B, S, N * 24});
           },
           [] { return WithRope(ValidDecode()); }),
       "head_size shall be a multiple of 16. Got head_size % 16 == 8"},
      {"cos_rank",
       mut(
           [](GqaCase& c) {
             c.cos.shape = {32, H / 2, 1};
           },
           [] { return WithRope(ValidDecode()); }),
       "Input 'cos_cache' is expected to have 2 dimensions, got 3"},
      {"cos_sin_dim1",
       mut(
           [](GqaCase& c) {
             c.sin.shape = {64, H / 4};
           },
           [] { return WithRope(ValidDecode()); }),
       "cos_cache and sin_cache dimension 1 must be the same."},
      {"cos_sin_dim0",
       mut(
           [](GqaCase& c) {
             c.sin.shape = {16, H / 2};
           },
           [] { return WithRope(ValidDecode()); }),
       "cos_cache and sin_cache dimension 0 must be the same, got 32 and 16"},
      {"cos_dim1",
       mut(
           [](GqaCase& c) {
             c.cos.shape = c.sin.shape = {16, H};
           },
           [] { return WithRope(ValidDecode()); }),
       "cos_cache dimension 1 must be <= head_size / 2 and a multiple of 8. Got 16 with head_size 16"},
      {"cos_dim0",
       mut(
           [](GqaCase& c) {
             c.cos.shape = c.sin.shape = {8, H / 2};
           },
           [] { return WithRope(ValidDecode()); }),
       "cos_cache dimension 0 shall not be less than total_sequence_length. Got 8 < 9"},
      {"cos_dtype", mut([](GqaCase& c) { c.cos.dtype = DType::kInt32; }, [] { return WithRope(ValidDecode()); }),
       "Input 'cos_cache' must be float32, float16 or bfloat16, got int32"},
      {"pos_dtype",
       mut(
           [](GqaCase& c) {
             c.has_pos = true;
             c.position_ids = Int32Buffer({1, 2}, {B, S});
           },
           [] { return WithRope(ValidDecode()); }),
       "Input 'position_ids' must be int64, got int32"},
      {"pos_rank",
       mut(
           [](GqaCase& c) {
             c.has_pos = true;
             c.position_ids = Int64Buffer({1, 2}, {B});
           },
           [] { return WithRope(ValidDecode()); }),
       "Input 'position_ids' is expected to have 2 dimensions, got 1"},
      {"pos_dim0",
       mut(
           [](GqaCase& c) {
             c.has_pos = true;
             c.position_ids = Int64Buffer({1}, {1, S});
           },
           [] { return WithRope(ValidDecode()); }),
       "position_ids dimension 0 must be equal to the batch size, got 1"},
      {"pos_dim1",
       mut(
           [](GqaCase& c) {
             c.has_pos = true;
             c.position_ids = Int64Buffer({}, {B, 0});
           },
           [] { return WithRope(ValidDecode()); }),
       "position_ids dimension 1 must be atleast sequence length, got 0"},
      {"pos_value",
       mut(
           [](GqaCase& c) {
             c.has_pos = true;
             c.position_ids = Int64Buffer({3, 32}, {B, S});
           },
           [] { return WithRope(ValidDecode()); }),
       "position_ids value out of range: position 32 (row 1, query 0) is outside [0, 32)"},
      {"pos_negative",
       mut(
           [](GqaCase& c) {
             c.has_pos = true;
             c.position_ids = Int64Buffer({-1, 3}, {B, S});
           },
           [] { return WithRope(ValidDecode()); }),
       "position_ids value out of range: position -1 (row 0, query 0)"},
      {"pos_base",
       [] {
         return FirstPromptWithPositions({29, 0, 0, 0, 0, 0, 0, 0}, 32);
       },
       "position_ids base value out of cos/sin cache range: position_ids[0, 0] = 29, allowed [0, 28]"},
      {"pos_cache_shorter_than_prompt", [] { return FirstPromptWithPositions(std::vector<std::int64_t>(8, 0), 2); },
       "cos_cache dimension 0 = 2 is shorter than sequence_length 4: the prompt's positions position_ids[0, 0] + "
       "[0, 4) cannot all fit in it"},
      // Bias, sinks, outputs.
      {"bias_dtype", mut([](GqaCase& c) {
         c.has_bias = true;
         c.bias = Int32Buffer(std::vector<std::int32_t>(18), {B, 1, S, 9});
       }),
       "Input 'attention_bias' must be float32, float16 or bfloat16, got int32"},
      {"bias_rank", mut([](GqaCase& c) {
         c.has_bias = true;
         c.bias = Buffer(DType::kFloat32, {B, S, 9});
       }),
       "Input 'attention_bias' is expected to have 4 dimensions, got 3"},
      {"bias_dim0", mut([](GqaCase& c) {
         c.has_bias = true;
         c.bias = Buffer(DType::kFloat32, {3, 1, S, 9});
       }),
       "attention_bias dimension 0 must be equal to the batch size or 1, got 3"},
      {"bias_dim1", mut([](GqaCase& c) {
         c.has_bias = true;
         c.bias = Buffer(DType::kFloat32, {1, 2, S, 9});
       }),
       "attention_bias dimension 1 must be equal to the num heads or 1, got 2"},
      {"bias_dim2", mut([](GqaCase& c) {
         c.has_bias = true;
         c.bias = Buffer(DType::kFloat32, {1, 1, 2, 9});
       }),
       "attention_bias dimension 2 must be equal to the sequence length, got 2"},
      {"bias_dim3", mut([](GqaCase& c) {
         c.has_bias = true;
         c.bias = Buffer(DType::kFloat32, {1, 1, S, 8});
       }),
       "attention_bias dimension 3 must be equal to total_sequence_length = 9, got 8"},
      {"sink_smooth", mut([](GqaCase& c) {
         c.has_sink = true;
         c.sink = Buffer(DType::kFloat32, {N});
         c.attrs.smooth_softmax = 1;
       }),
       "head_sink should not be provided when use_smooth_softmax is true."},
      {"sink_rank", mut([](GqaCase& c) {
         c.has_sink = true;
         c.sink = Buffer(DType::kFloat32, {1, N});
       }),
       "head_sink must be a 1D tensor, got rank 2"},
      {"sink_dim", mut([](GqaCase& c) {
         c.has_sink = true;
         c.sink = Buffer(DType::kFloat32, {N + 1});
       }),
       "head_sink dimension 0 must be equal to the num heads, got 5"},
      {"sink_dtype", mut([](GqaCase& c) {
         c.has_sink = true;
         c.sink = Int64Buffer({0, 0, 0, 0}, {N});
       }),
       "Input 'head_sink' must be float32, float16 or bfloat16, got int64"},
      {"output_shape", mut([](GqaCase& c) {
         c.output.shape = {B, S, N * H * 2};
       }),
       "Output 'output' must have shape [2, 1, 64], got [2, 1, 128]"},
      {"output_dtype", mut([](GqaCase& c) { c.output.dtype = DType::kFloat16; }),
       "Output 'output' must have the dtype of 'query' (float32), got float16"},
      {"qk_missing", mut([](GqaCase& c) { c.attrs.qk_output = 1; }),
       "qk_output attribute was configured but output buffer was not provided"},
      {"qk_unconfigured", mut([](GqaCase& c) {
         c.has_qk = true;
         c.qk = Buffer(DType::kFloat32, {B, N, S, 9});
       }),
       "Output QK buffer was provided but qk_output attribute was not configured"},
      {"qk_shape", mut([](GqaCase& c) {
         c.attrs.qk_output = 2;
         c.has_qk = true;
         c.qk = Buffer(DType::kFloat32, {B, N, S, 8});
       }),
       "Output 'output_qk' must have shape [2, 4, 1, 9], got [2, 4, 1, 8]"},
      {"qk_dtype", mut([](GqaCase& c) {
         c.attrs.qk_output = 2;
         c.has_qk = true;
         c.qk = Buffer(DType::kInt32, {B, N, S, 9});
       }),
       "Output 'output_qk' must be float32 or the dtype of 'query', got int32"},
      // Static scatter.
      {"scatter_half", mut([](GqaCase& c) { c.drop_nonpad = true; }, ValidScatter),
       "Input 'write_indices' and 'nonpad_kv_seqlen' shall be both present (static scatter mode) or both absent."},
      {"scatter_seqlens", mut([](GqaCase& c) { c.has_seqlens = true; }, ValidScatter),
       "static scatter mode (write_indices / nonpad_kv_seqlen) takes no seqlens_k or total_sequence_length"},
      {"scatter_past", mut([](GqaCase& c) { c.has_past = true; }, ValidScatter),
       "past_key/past_value must be absent or alias present_key/present_value"},
      {"scatter_no_cache", mut([](GqaCase& c) { c.has_present = false; }, ValidScatter),
       "static scatter mode needs the cache buffers as present_key/present_value"},
      {"scatter_kv_shapes",
       mut(
           [](GqaCase& c) {
             c.present_value.shape = {B, 9, Nkv * H};
           },
           ValidScatter),
       "static scatter mode: present_key shape [2, 10, 32] and present_value shape [2, 9, 32] must be equal"},
      {"scatter_3d",
       mut(
           [](GqaCase& c) {
             c.present_key.shape = c.present_value.shape = {B, 10, 16};
           },
           ValidScatter),
       "3-D cache must be [batch_size, C, kv_hidden] = [2, C, 32], got [2, 10, 16]"},
      {"scatter_rank",
       mut(
           [](GqaCase& c) {
             c.present_key.shape = c.present_value.shape = {B, 320};
           },
           ValidScatter),
       "cache must be 3-D [B, C, kv_hidden] or 4-D BNSH [B, N_kv, C, H], got rank 2"},
      {"scatter_capacity0",
       mut(
           [](GqaCase& c) {
             c.present_key.shape = c.present_value.shape = {B, 0, Nkv * H};
           },
           ValidScatter),
       "cache capacity C must be >= 1, got 0"},
      {"scatter_dtype",
       mut(
           [](GqaCase& c) {
             c.write_indices = Int32Buffer({3, 0}, {B});
           },
           ValidScatter),
       "Input 'write_indices' must be int64, got int32"},
      {"scatter_shape",
       mut(
           [](GqaCase& c) {
             c.nonpad = Int64Buffer({4, 1, 1}, {3});
           },
           ValidScatter),
       "Input 'nonpad_kv_seqlen' must have shape [batch_size] = [2], got [3]"},
      {"scatter_negative",
       mut(
           [](GqaCase& c) {
             c.write_indices = Int64Buffer({-1, 0}, {B});
           },
           ValidScatter),
       "write_indices[0] = -1 must be >= 0 and < 2^48"},
      {"scatter_n_range",
       mut(
           [](GqaCase& c) {
             c.nonpad = Int64Buffer({5, 1}, {B});
           },
           ValidScatter),
       "nonpad_kv_seqlen[0] = 5 must be in [write_indices[0], write_indices[0] + sequence_length] = [3, 4]"},
      {"scatter_below",
       mut(
           [](GqaCase& c) {
             c.nonpad = Int64Buffer({2, 1}, {B});
           },
           ValidScatter),
       "nonpad_kv_seqlen[0] = 2 must be in"},
      {"scatter_capacity",
       mut(
           [](GqaCase& c) {
             c.write_indices = Int64Buffer({10, 0}, {B});
             c.nonpad = Int64Buffer({11, 1}, {B});
           },
           ValidScatter),
       "static scatter (linear): row 0 writes rows [10, 11) past the cache capacity C = 10"},
      {"scatter_read_only_capacity",
       mut(
           [](GqaCase& c) {
             c.has_key = false;  // query alone, N * H wide: the read-only form
             c.write_indices = Int64Buffer({10, 0}, {B});
             c.nonpad = Int64Buffer({11, 1}, {B});
           },
           ValidScatter),
       "static scatter (linear, read-only): row 0 reads keys [0, 11) past the cache capacity C = 10"},
      {"scatter_huge",
       mut(
           [](GqaCase& c) {
             c.write_indices = Int64Buffer({INT64_MAX - 1, 0}, {B});
             c.nonpad = Int64Buffer({INT64_MAX, 1}, {B});
           },
           ValidScatter),
       "write_indices[0] = 9223372036854775806 must be >= 0 and < 2^48"},
      {"scatter_nonpad_min",
       mut(
           [](GqaCase& c) {
             c.nonpad = Int64Buffer({INT64_MIN, 1}, {B});
           },
           ValidScatter),
       "nonpad_kv_seqlen[0] = -9223372036854775808 must be in"},
      {"pos_huge",
       mut(
           [](GqaCase& c) {
             c.has_pos = true;
             c.position_ids = Int64Buffer({INT64_MAX, 3}, {B, S});
           },
           [] { return WithRope(ValidDecode()); }),
       "position_ids value out of range: position 9223372036854775807"},
      {"circular_attrs",
       mut([](GqaCase& c) { c.attrs.scatter_mode = GqaAttributes::ScatterMode::kCircular; }, ValidScatter),
       "circular scatter mode needs causal = 1 and local_window_size > 0"},
      {"circular_capacity",
       mut(
           [](GqaCase& c) {
             c.attrs.scatter_mode = GqaAttributes::ScatterMode::kCircular;
             c.attrs.local_window_size = 11;
           },
           ValidScatter),
       "cache capacity C = 10 is too small for local_window_size W = 11 and sequence_length S = 1: need C >= W + S - 1 "
       "= 11"},
      {"circular_bias",
       mut(
           [](GqaCase& c) {
             c.attrs.scatter_mode = GqaAttributes::ScatterMode::kCircular;
             c.attrs.local_window_size = 4;
             c.has_bias = true;
             c.bias = Buffer(DType::kFloat32, {1, 1, S, 10});
           },
           ValidScatter),
       "attention_bias is not supported with the circular scatter cache"},
      {"circular_qk",
       mut(
           [](GqaCase& c) {
             c.attrs.scatter_mode = GqaAttributes::ScatterMode::kCircular;
             c.attrs.local_window_size = 4;
             c.attrs.qk_output = 1;
             c.has_qk = true;
             c.qk = Buffer(DType::kFloat32, {B, N, S, 10});
           },
           ValidScatter),
       "qk_output is not supported with the circular scatter cache"},
      {"scatter_bias_dim3",
       mut(
           [](GqaCase& c) {
             c.has_bias = true;
             c.bias = Buffer(DType::kFloat32, {1, 1, S, 9});
           },
           ValidScatter),
       "attention_bias dimension 3 must be equal to the cache capacity C = 10, got 9"},
  };
}

TEST(GqaValidation, ValidBaselinesRun) {
  for (auto make : {ValidDecode, ValidScatter}) {
    GqaCase c = make();
    EXPECT_NO_THROW(c.Run());
  }
  GqaCase r = WithRope(ValidDecode());
  EXPECT_NO_THROW(r.Run());
}

TEST(GqaValidation, EveryErrorNamesTheProblem) {
  for (const Bad& bad : Cases()) {
    SCOPED_TRACE(bad.name);
    GqaCase c = bad.make();
    const auto before_key = c.present_key.bytes;
    const auto before_past = c.past_key.bytes;
    const auto before_out = c.output.bytes;
    try {
      c.Run();
      ADD_FAILURE() << bad.name << ": no error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(bad.message)) << bad.name;
      EXPECT_THAT(e.what(), HasSubstr("GroupQueryAttention: "));
    }
    // Validation finishes before anything is written.
    EXPECT_EQ(c.present_key.bytes, before_key);
    EXPECT_EQ(c.past_key.bytes, before_past);
    EXPECT_EQ(c.output.bytes, before_out);
  }
}

}  // namespace
}  // namespace kvshare::testing
