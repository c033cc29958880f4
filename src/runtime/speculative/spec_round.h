// The parts of a speculative round (kvshare/runtime/speculative.h) that the
// generator and the scheduler share: the adaptive draft length, and the
// acceptance of a verify step's drafts. Internal to src/runtime.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvshare/runtime/sampler.h"
#include "kvshare/runtime/speculative.h"

namespace kvshare::detail {

// k for each round of one row (SpeculativeOptions::adaptive).
class DraftLength {
 public:
  explicit DraftLength(const SpeculativeOptions& options) : o_(options) {}
  // Drafts to ask for in the next round, in [1, draft_max].
  int Next() const;
  // A verify step took `drafted` drafts and accepted the first `accepted`.
  void Observe(int drafted, int accepted);
  // The running acceptance rate: the probability that a draft is accepted
  // after the one before it was.
  double alpha() const;

 private:
  SpeculativeOptions o_;
  // Decaying counts; the prior (2 accepted, 1 rejected) starts alpha at 2/3.
  double accepted_ = 2.0, rejected_ = 1.0;
};

// One decoding row's drafts in a batched step (AllocateDrafts).
struct RowDrafts {
  double alpha = 0;   // DraftLength::alpha() of the row
  int available = 0;  // drafts it proposed
  int keep = 0;       // out: how many of them the step verifies
};

// Picks the drafts a step of rows.size() decoding rows verifies: draft i of a
// row is worth alpha^i expected tokens and costs `cost` (a one-row step = 1);
// drafts are taken best first while each adds more tokens per unit of time
// than the step makes without it, and at most `budget` in all. With one row
// this is DraftLength::Next's choice; in a larger step each draft must be
// likelier to pay off, as the step's tokens already come cheaper.
void AllocateDrafts(std::span<RowDrafts> rows, double cost, std::int64_t budget);

// The tokens one row emits from a verify step: `rows` holds the target's
// logits [drafts.size() + 1, V] for the pending token and each draft. Row i
// decides token i: while i < drafts.size() by sampler.Verify against
// drafts[i], and the row after the last accepted draft by sampler.Sample.
// Each emitted token is appended to `history` (the sampler's penalty window
// sees the tokens before it) and passed to `emit` with its logits row, which
// returns false to stop (a stop token, the token limit): no further row is
// used then.
struct Accepted {
  int emitted = 0;   // tokens passed to emit
  int accepted = 0;  // drafts accepted (the first `accepted` of them)
};
template <typename Emit>
Accepted AcceptDrafts(Sampler& sampler, std::span<const float> rows, std::size_t V,
                      std::span<const std::int32_t> drafts, std::vector<std::int32_t>& history, Emit&& emit) {
  Accepted a;
  for (std::size_t i = 0; i <= drafts.size(); ++i) {
    const std::span<const float> row = rows.subspan(i * V, V);
    bool accepted = false;
    std::int32_t token = 0;
    if (i < drafts.size()) {
      const DraftVerdict v = sampler.Verify(row, history, drafts[i]);
      accepted = v.accepted;
      token = v.token;
    } else {
      token = sampler.Sample(row, history);
    }
    history.push_back(token);
    ++a.emitted;
    if (accepted) ++a.accepted;
    if (!emit(token, row) || !accepted) break;
  }
  return a;
}

}  // namespace kvshare::detail
