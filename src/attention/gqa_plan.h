// GQA front end: validation of every input, and the resolved plan the op runs.
// Internal header.
#pragma once

#include <cstdint>
#include <vector>

#include "kvshare/attention/gqa.h"

namespace kvshare::detail {

// A token-major (BSNH) source of new K or V rows: element (b, s, n, h) at
//   b * batch_stride + s * token_stride + offset + n * H + h.
struct TokenSource {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::int64_t batch_stride = 0;
  std::int64_t token_stride = 0;
  std::int64_t offset = 0;
};

struct GqaPlan {
  KvMode mode = KvMode::kAppend;
  int batch = 0, q_len = 0, num_heads = 0, kv_heads = 0, head_size = 0;
  bool packed = false;
  bool first_prompt = false;
  DType dtype = DType::kFloat32;        // query / key / value / output
  DType cache_dtype = DType::kFloat32;  // past / present / scatter cache
  std::int64_t total_len = 0;           // total_sequence_length (0 in scatter mode)
  std::int64_t past_len = 0;            // past_key dim 2 (0 when absent)
  std::int64_t present_len = 0;         // present / scatter cache capacity C (0 when none)
  std::int64_t ext_kv_len = 0;          // key dim 1 in kExternalKv
  bool scatter_bnsh = false;            // scatter cache layout: BNSH (true) or 3-D (false)
  bool scatter_read_only = false;       // static scatter without key/value: nothing is written
  bool present_aliases_past = false;

  TokenSource q_src, k_src, v_src;  // k_src / v_src unused when there are no new rows

  // Per row b.
  std::vector<std::int64_t> kv_len;     // T_b
  std::vector<std::int64_t> q_offset;   // off_b: query s at absolute position off_b + s
  std::vector<std::int64_t> valid_q;    // rows s >= valid_q[b] are padding
  std::vector<std::int64_t> past_rows;  // rows copied from past into present (kAppend)
  std::vector<std::int64_t> write_at;   // first cache row (slot) of the new rows
  std::vector<std::int64_t> n_write;    // new rows written for row b

  // Bidirectional spans (gqa.h), validated; empty / null without them.
  //   causal_end [B * S]: the first key the causal rule hides from query s of
  //     row b at position p: the end of p's span when p lies in one, else p + 1.
  //   spans: the input's data, int64 [B, spans_per_row, 2].
  std::vector<std::int64_t> causal_end;
  const std::int64_t* spans = nullptr;
  std::int64_t spans_per_row = 0;

  // RoPE positions [B * S] (only when do_rotary).
  std::vector<std::int64_t> rope_pos;
  int rotary_half_dim = 0;  // cos_cache dim 1

  float scale = 1.0f;
  std::int64_t qk_cols = 0;
  int kv_block_size = 0;
};

// Validates bidirectional_spans against the rows of p (kv_len, q_offset, set
// by the row planning) and fills p.causal_end and p.spans (gqa_spans.cc).
void PlanSpans(const GqaAttributes& attrs, const GqaInputs& in, GqaPlan& p);

// Validates attrs, inputs and outputs together and resolves the plan.
// Throws kvshare::Error on any problem; touches no output.
GqaPlan PlanGqa(const GqaAttributes& attrs, const GqaInputs& in, const GqaOutputs& out);

}  // namespace kvshare::detail
