#include "runtime/spec_round.h"

#include <algorithm>
#include <cmath>

namespace kvshare::detail {
namespace {
// Per round, older rounds weigh this much less: about the last 20 rounds count.
constexpr double kDecay = 0.95;
constexpr double kMaxAlpha = 0.999;
}  // namespace

int DraftLength::Next() const {
  if (!o_.adaptive) return o_.draft_max;
  const double alpha = std::min(kMaxAlpha, accepted_ / (accepted_ + rejected_));
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

}  // namespace kvshare::detail
