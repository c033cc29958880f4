// The normalizer of a log-softmax over a row of logits, in double: shared by
// the perplexity tool and the server's logprobs.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>

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

}  // namespace kvshare::detail
