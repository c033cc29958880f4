// Drafting and keeping accepted drafts in the scheduler (scheduler/drafts.h).
#include "runtime/scheduler/drafts.h"

#include <algorithm>
#include <span>

#include "runtime/speculative/spec_round.h"

namespace kvshare::detail {

DraftCounts DraftRows(const SchedulerOptions& opt, const ModelState& state, SlotTable& rows,
                      const std::vector<int>& decode_rows) {
  const std::int64_t max_step = state.kv_cache().Options().max_step;
  std::int64_t budget = opt.step_tokens - static_cast<std::int64_t>(decode_rows.size());
  std::vector<RowDrafts> bids;
  std::vector<std::int32_t> seq;
  for (int i : decode_rows) {
    Slot& s = rows.at(i);
    Request& r = *s.req;
    std::int64_t k = 0;
    if (r.opt.speculative && !r.matcher && r.opt.logit_bias.empty()) {
      k = std::min<std::int64_t>({r.draft_length.Next(), r.opt.max_tokens - r.generated - 1, max_step - 1,
                                  state.max_context() - state.length(i) - 1, budget});
    }
    if (k > 0) {
      seq.assign(s.tokens.begin(), s.tokens.end());
      seq.push_back(r.next_token);
      const DraftContext ctx{.row = i, .tokens = seq, .target_state = &state, .target_hidden = r.hidden};
      opt.drafter->Draft(ctx, static_cast<int>(k), r.feed);
      r.feed.resize(std::min<std::size_t>(r.feed.size(), static_cast<std::size_t>(k + 1)));
    }
    bids.push_back({.alpha = r.draft_length.alpha(), .available = static_cast<int>(r.feed.size()) - 1});
  }
  if (opt.speculative.adaptive) {
    AllocateDrafts(bids, opt.speculative.verify_cost, budget);
  } else {
    for (RowDrafts& b : bids) {
      b.keep = static_cast<int>(std::min<std::int64_t>(b.available, budget));
      budget -= b.keep;
    }
  }
  DraftCounts n;
  for (std::size_t j = 0; j < decode_rows.size(); ++j) {
    Request& r = *rows.at(decode_rows[j]).req;
    r.feed.resize(1 + static_cast<std::size_t>(bids[j].keep));
    n.drafted += bids[j].keep;
    if (bids[j].keep > 0) ++n.verify_rows;
  }
  return n;
}

void KeepAccepted(ModelState& state, Slot& s, int row, std::int64_t fed_at, int drafted, const RowOutcome& o) {
  const std::int64_t keep = fed_at + static_cast<std::int64_t>(std::max<std::size_t>(1, o.tokens.size()));
  state.Rewind(row, keep);
  s.tokens.resize(static_cast<std::size_t>(keep));
  s.req->draft_length.Observe(drafted, o.accepted);
}

void KeepHidden(const ModelState& state, std::size_t n_embd, std::size_t logits_row, Request& r) {
  const std::span<const float> h = state.hidden();
  const std::size_t E = n_embd;
  if (h.size() >= (logits_row + 1) * E) {
    r.hidden.assign(h.begin() + static_cast<std::ptrdiff_t>(logits_row * E),
                    h.begin() + static_cast<std::ptrdiff_t>((logits_row + 1) * E));
  }
}

}  // namespace kvshare::detail
