// What a scheduler step feeds, and what it did to the rows (scheduler/step.h).
#include "runtime/scheduler/step.h"

#include <algorithm>

#include "runtime/scheduler/image_spans.h"

namespace kvshare::detail {

StepRows SplitRows(SlotTable& rows) {
  StepRows split;
  for (int i = 0; i < static_cast<int>(rows.slots.size()); ++i) {
    Slot& s = rows.at(i);
    if (!s.req) continue;
    if (s.req->decoding()) {
      split.decode.push_back(i);
      s.req->feed.assign(1, s.req->next_token);
    } else {
      split.prefill.push_back(i);
    }
  }
  return split;
}

StepBatch PlanBatch(SlotTable& rows, const StepRows& split, std::int64_t step_tokens) {
  StepBatch batch;
  for (int i : split.decode) {
    Request& r = *rows.at(i).req;
    batch.entries.push_back({.row = i, .tokens = r.feed, .num_logits = static_cast<std::int64_t>(r.feed.size())});
    batch.n_decode += static_cast<std::int64_t>(r.feed.size());
  }
  std::vector<int> prefill = split.prefill;
  std::sort(prefill.begin(), prefill.end(),
            [&](int a, int b) { return rows.at(a).req->admit_seq < rows.at(b).req->admit_seq; });
  std::int64_t budget = step_tokens - batch.n_decode;
  for (int i : prefill) {
    if (budget <= 0) break;
    Request& r = *rows.at(i).req;
    std::int64_t n = std::min<std::int64_t>(budget, static_cast<std::int64_t>(r.opt.prompt.size()) - r.prefilled);
    if (r.opt.prompt_logprobs >= 0) n = std::min(n, kPromptLogprobsChunk);
    // An image that does not fit waits for the next step, keeping admission order.
    n = ChunkTokens(r.opt, r.prefilled, n, r.chunk_spans);
    if (n == 0) break;
    batch.entries.push_back({.row = i,
                             .tokens = std::span<const std::int32_t>(r.opt.prompt)
                                           .subspan(static_cast<std::size_t>(r.prefilled), static_cast<std::size_t>(n)),
                             .num_logits = r.opt.prompt_logprobs >= 0 ? n : 1,
                             .embeddings = r.chunk_spans});
    budget -= n;
    batch.n_prefill += n;
  }
  return batch;
}

std::vector<SampleEntry> RecordFed(SlotTable& rows, const std::vector<BatchEntry>& entries) {
  std::vector<SampleEntry> to_sample;
  std::size_t at = 0;
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const BatchEntry& b = entries[k];
    const std::size_t first_row = at;
    at += static_cast<std::size_t>(b.num_logits);
    Slot& s = rows.at(b.row);
    const std::int64_t fed_at = static_cast<std::int64_t>(s.tokens.size());
    s.tokens.insert(s.tokens.end(), b.tokens.begin(), b.tokens.end());
    Request& r = *s.req;
    if (!r.decoding()) r.prefilled += static_cast<std::int64_t>(b.tokens.size());
    if (!r.decoding()) continue;
    // A decode entry samples from all its rows; a prompt's last chunk from its last row.
    const bool decode = fed_at >= static_cast<std::int64_t>(r.opt.prompt.size());
    to_sample.push_back({.entry = k,
                         .first_row = decode ? first_row : at - 1,
                         .rows = decode ? static_cast<std::size_t>(b.num_logits) : 1,
                         .fed_at = fed_at});
  }
  return to_sample;
}

void TraceStep(const SchedulerOptions& opt, const SlotTable& rows, const ModelState& state,
               const std::vector<BatchEntry>& entries, std::span<const float> logits) {
  StepTrace t;
  t.logits = logits;
  for (const BatchEntry& b : entries) {
    const Request& r = *rows.at(b.row).req;
    const bool decode = r.decoding();
    const std::int64_t n = static_cast<std::int64_t>(b.tokens.size());
    t.entries.push_back({.slot = b.row,
                         .request = r.handle->id(),
                         .tokens = static_cast<int>(n),
                         .decode = decode,
                         .sampled = decode || r.prefilled + n == static_cast<std::int64_t>(r.opt.prompt.size()),
                         .logits_rows = static_cast<int>(b.num_logits),
                         .position = state.length(b.row) - n});
  }
  opt.on_step(t);
}

}  // namespace kvshare::detail
