// The normalizer of a log-softmax over a row of logits, in double: shared by
// the perplexity tool and the server's logprobs; and the row's k largest
// logits (the server's top_logprobs).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kvshare::detail {

// log(sum_i exp(logits[i])), computed as max + log(sum_i exp(logits[i] - max))
// in double, so log p(i) = logits[i] - LogSumExp(logits). logits must not be
// empty.
inline double LogSumExp(std::span<const float> logits) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return mx + std::log(sum);
}

// The min(k, n) largest logits as (id, logit), logit descending, the lower id
// first on equal logits (std::partial_sort's order with that comparison), in
// one pass with a sorted list of at most k: ids come in increasing order, so
// a later id enters only with a logit strictly above the current k-th and
// goes after the equal ones. Logits must not be NaN. k <= 0: empty.
inline std::vector<std::pair<std::int32_t, float>> TopLogits(std::span<const float> logits, int k) {
  std::vector<std::pair<std::int32_t, float>> top;
  if (k <= 0) return top;
  const std::size_t kk = std::min<std::size_t>(static_cast<std::size_t>(k), logits.size());
  top.reserve(kk + 1);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (top.size() == kk && !(v > top.back().second)) continue;
    const auto at = std::upper_bound(top.begin(), top.end(), v, [](float x, const auto& t) { return x > t.second; });
    top.insert(at, {static_cast<std::int32_t>(i), v});
    if (top.size() > kk) top.pop_back();
  }
  return top;
}

}  // namespace kvshare::detail
