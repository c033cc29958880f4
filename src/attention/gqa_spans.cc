// Validation of the bidirectional_spans input and the per-query causal bound
// the kernels read (include/kvshare/attention/gqa.h, "Bidirectional spans").
#include <cstdint>

#include "attention/gqa_check.h"
#include "attention/gqa_plan.h"

namespace kvshare::detail {

void PlanSpans(const GqaAttributes& a, const GqaInputs& in, GqaPlan& p) {
  if (!in.bidirectional_spans) return;
  const ConstTensorView& t = *in.bidirectional_spans;
  const int B = p.batch, S = p.q_len;
  KVS_CHECK(t.dtype == DType::kInt64, "Input 'bidirectional_spans' must be int64, got ", DTypeName(t.dtype));
  KVS_CHECK(t.shape.rank == 3 && t.shape[0] == B && t.shape[2] == 2,
            "Input 'bidirectional_spans' must have shape [batch_size, K, 2] = [", B,
            ", K, 2] (K [start, end) pairs per row), got ", t.shape.ToString());
  KVS_CHECK(t.data != nullptr || t.NumElements() == 0, "Input 'bidirectional_spans' has a null data pointer");
  KVS_CHECK(a.causal == 1,
            "Input 'bidirectional_spans' needs causal = 1 (a span widens the causal mask; with causal = 0 every key "
            "is visible already), got causal = ",
            a.causal);
  const std::int64_t K = t.shape[1];
  if (K == 0) return;  // no spans in any row
  const std::int64_t* spans = t.As<std::int64_t>();
  const bool scatter = p.mode == KvMode::kStaticScatter;
  for (int b = 0; b < B; ++b) {
    const std::int64_t* row = spans + static_cast<std::int64_t>(b) * K * 2;
    const std::int64_t T = p.kv_len[static_cast<std::size_t>(b)];
    std::int64_t prev_end = 0, padding_at = -1;
    for (std::int64_t k = 0; k < K; ++k) {
      const std::int64_t st = row[2 * k], en = row[2 * k + 1];
      if (st == 0 && en == 0) {
        if (padding_at < 0) padding_at = k;
        continue;
      }
      KVS_CHECK(padding_at < 0, "bidirectional_spans[", b, ", ", k, "] = [", st, ", ", en,
                ") follows the padding pair (0, 0) at [", b, ", ", padding_at,
                "]: list a row's spans first and pad after them");
      KVS_CHECK(st >= 0, "bidirectional_spans[", b, ", ", k, "] = [", st, ", ", en, "): start must be >= 0");
      KVS_CHECK(st < en, "bidirectional_spans[", b, ", ", k, "] = [", st, ", ", en,
                "): start must be < end (a span of length >= 1; (0, 0) is padding)");
      KVS_CHECK(st >= prev_end, "bidirectional_spans[", b, ", ", k, "] = [", st, ", ", en,
                ") starts before the previous span ends (", prev_end,
                "): a row's spans must be sorted by start and must not overlap (start >= the previous end)");
      KVS_CHECK(en <= T, "bidirectional_spans[", b, ", ", k, "] = [", st, ", ", en, ") must lie in row ", b,
                "'s keys [0, ", T, ") (", scatter ? "nonpad_kv_seqlen[" : "seqlens_k[", b, "]", scatter ? "" : " + 1",
                " = ", T,
                "): every key of a span must be in the cache when its queries attend; pass only the spans that end "
                "by ",
                T, " (end a chunked prefill's chunks at span boundaries)");
      prev_end = en;
    }
  }
  p.spans = spans;
  p.spans_per_row = K;
  // One walk per row: query positions increase with s, spans with k.
  p.causal_end.assign(static_cast<std::size_t>(B) * S, 0);
  for (int b = 0; b < B; ++b) {
    const std::int64_t* row = spans + static_cast<std::int64_t>(b) * K * 2;
    std::int64_t k = 0;
    for (int s = 0; s < S; ++s) {
      const std::int64_t pos = p.q_offset[static_cast<std::size_t>(b)] + s;
      while (k < K && row[2 * k + 1] <= pos && row[2 * k + 1] > row[2 * k]) ++k;
      const bool inside = k < K && row[2 * k] <= pos && pos < row[2 * k + 1];
      p.causal_end[static_cast<std::size_t>(b) * S + s] = inside ? row[2 * k + 1] : pos + 1;
    }
  }
}

}  // namespace kvshare::detail
