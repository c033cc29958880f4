#include "runtime/speculative/spec_round.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <utility>

namespace kvshare::detail {
namespace {
// Per round, older rounds weigh this much less: about the last 20 rounds count.
constexpr double kDecay = 0.95;
constexpr double kMaxAlpha = 0.999;
}  // namespace

double DraftLength::alpha() const { return std::min(kMaxAlpha, accepted_ / (accepted_ + rejected_)); }

int DraftLength::Next() const {
  if (!o_.adaptive) return o_.draft_max;
  const double alpha = this->alpha();
  // Expected tokens of a round with k drafts, each accepted with probability
  // alpha after an accepted one (Leviathan et al. 2023, eq. 1), per unit cost.
  int best = 1;
  double best_rate = 0.0;
  for (int k = 1; k <= o_.draft_max; ++k) {
    const double rate = (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha) / (1.0 + o_.verify_cost * k);
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

void DraftLength::Observe(int drafted, int accepted) {
  if (drafted <= 0) return;
  accepted_ = kDecay * accepted_ + accepted;
  rejected_ = kDecay * rejected_ + (accepted < drafted ? 1.0 : 0.0);
}

void AllocateDrafts(std::span<RowDrafts> rows, double cost, std::int64_t budget) {
  // Expected tokens and time of the step so far: every row's pending token.
  double tokens = static_cast<double>(rows.size());
  double time = 1.0 + cost * (tokens - 1.0);
  std::priority_queue<std::pair<double, std::size_t>> next;  // (value of the row's next draft, row)
  for (std::size_t r = 0; r < rows.size(); ++r) {
    rows[r].keep = 0;
    if (rows[r].available > 0) next.emplace(rows[r].alpha, r);
  }
  while (budget > 0 && !next.empty()) {
    const auto [value, r] = next.top();
    if (value * time <= cost * tokens) break;  // value / cost <= tokens / time: not worth its time
    next.pop();
    tokens += value;
    time += cost;
    --budget;
    if (++rows[r].keep < rows[r].available) next.emplace(value * rows[r].alpha, r);
  }
}

}  // namespace kvshare::detail
