// The host side of a batched forward (batch_steps.h).
#include "model/batch_steps.h"

#include <algorithm>

#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {

BatchSteps::BatchSteps(const ModelState& st, const ModelConfig& c, std::span<const BatchEntry> entries, int max_step,
                       bool bidirectional)
    : entries_(entries), max_step_(max_step), bidi_(bidirectional), n_embd_(c.n_embd) {
  std::vector<bool> seen(static_cast<std::size_t>(st.max_batch()), false);
  for (const BatchEntry& e : entries) {
    CheckBatchEntry(st, c, e, entries.size());
    CheckEmbeddings(e, max_step, bidirectional);
    if (seen[static_cast<std::size_t>(e.row)]) throw Error(Str("ForwardBatch: row ", e.row, " appears twice"));
    seen[static_cast<std::size_t>(e.row)] = true;
    const std::int64_t S = static_cast<std::int64_t>(e.tokens.size());
    start_.push_back(st.length(e.row));
    first_logit_.push_back(S - e.num_logits);  // token index of the entry's first returned row
    out_at_.push_back(total_logits_);
    total_logits_ += e.num_logits;
  }
  pos_.assign(entries.size(), 0);
}

bool BatchSteps::Next(Step& step, std::vector<std::vector<std::int64_t>>& step_spans) {
  step.tokens.clear();
  step.rows.clear();
  step.embeddings.clear();
  dest_.clear();
  contiguous_ = true;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const BatchEntry& e = entries_[i];
    const std::int64_t S = static_cast<std::int64_t>(e.tokens.size());
    if (pos_[i] >= S) continue;
    // Chunks are cut per entry: an image's tokens stay in one step.
    const std::int64_t n = ChunkLength(e, pos_[i], max_step_, bidi_);
    const std::int64_t lo = std::max(pos_[i], first_logit_[i]), hi = pos_[i] + n;  // rows whose logits are asked for
    step.rows.push_back(StepRow{.row = e.row,
                                .begin = static_cast<std::int64_t>(step.tokens.size()),
                                .n = n,
                                .keep = std::max<std::int64_t>(0, hi - lo)});
    AddStepInputs(e, pos_[i], n, start_[i], n_embd_, bidi_, step, step_spans[static_cast<std::size_t>(e.row)]);
    dest_.push_back(out_at_[i] + std::max(pos_[i], first_logit_[i]) - first_logit_[i]);
    const std::size_t r = dest_.size() - 1;
    if (r > 0 && dest_[r] != dest_[r - 1] + step.rows[r - 1].keep) contiguous_ = false;
    pos_[i] += n;
  }
  return !step.rows.empty();
}

void BatchSteps::Restore(ModelState& st) const {
  for (std::size_t i = 0; i < entries_.size() && i < start_.size(); ++i) {
    try {
      st.Rewind(entries_[i].row, start_[i]);
    } catch (const Error&) {
      st.Reset(entries_[i].row);  // a ring no longer holds `start`
    }
  }
}

}  // namespace kvshare::detail
