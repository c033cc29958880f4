#include "kvshare/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "kvshare/common/error.h"
#include "runtime/logits_scan.h"

namespace kvshare {
namespace {

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void Validate(const SamplerOptions& o) {
  if (!(o.temperature >= 0.0f) || !std::isfinite(o.temperature)) {
    throw Error("temperature must be finite and >= 0 (0 selects greedy), got " + Num(o.temperature));
  }
  if (o.top_k < 0) {
    throw Error("top_k must be >= 0 (0 disables it), got " + std::to_string(o.top_k));
  }
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) {
    throw Error("top_p must be in (0, 1], got " + Num(o.top_p));
  }
  if (!(o.min_p >= 0.0f && o.min_p <= 1.0f)) {
    throw Error("min_p must be in [0, 1], got " + Num(o.min_p));
  }
  if (!(o.repetition_penalty > 0.0f) || !std::isfinite(o.repetition_penalty)) {
    throw Error("repetition_penalty must be finite and > 0 (1 disables it), got " + Num(o.repetition_penalty));
  }
  for (const auto& [name, v] : {std::pair<const char*, float>{"presence_penalty", o.presence_penalty},
                                {"frequency_penalty", o.frequency_penalty}}) {
    if (!(v >= -2.0f && v <= 2.0f))
      throw Error(std::string(name) + " must be in [-2, 2] (0 disables it), got " + Num(v));
  }
  if (o.repeat_last_n < -1) {
    throw Error("repeat_last_n must be >= -1 (-1: whole history, 0: off), got " + std::to_string(o.repeat_last_n));
  }
}

}  // namespace

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) { Validate(options_); }

void Sampler::Reseed(uint64_t seed) {
  options_.seed = seed;
  rng_.seed(seed);
}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> history) {
  const int32_t greedy = Filter(logits, history);
  if (greedy >= 0) return greedy;
  return Draw(-1);
}

DraftVerdict Sampler::Verify(std::span<const float> logits, std::span<const int32_t> history, int32_t draft) {
  if (draft < 0 || static_cast<size_t>(draft) >= logits.size()) {
    throw Error("Sampler::Verify: draft token " + std::to_string(draft) + " is outside [0, " +
                std::to_string(logits.size()) + ")");
  }
  const int32_t greedy = Filter(logits, history);
  if (greedy >= 0) return {.accepted = greedy == draft, .token = greedy};
  // Accept with probability p(draft) = w_draft / sum (q is a point mass at draft).
  double sum = 0.0, w_draft = 0.0;
  for (const Candidate& c : candidates_) {
    sum += c.weight;
    if (c.id == draft) w_draft = c.weight;
  }
  if (NextUniform() * sum < w_draft) return {.accepted = true, .token = draft};
  // Rejected: a draw from max(0, p - q) normalized, i.e. p without the draft.
  return {.accepted = false, .token = Draw(draft)};
}

int32_t Sampler::Filter(std::span<const float> logits, std::span<const int32_t> history) {
  const size_t n = logits.size();
  if (n == 0) throw Error("Sampler::Sample: logits must not be empty");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw Error("Sampler::Sample: logits has more than 2^31-1 entries");
  }
  const detail::LogitsScan scan = detail::ScanLogits(logits.data(), static_cast<std::int64_t>(n));
  if (scan.invalid >= 0) {
    throw Error("Sampler::Sample: logits[" + std::to_string(scan.invalid) + "] must be finite or -inf, got " +
                Num(logits[static_cast<size_t>(scan.invalid)]));
  }
  if (scan.max == -std::numeric_limits<float>::infinity()) throw Error("Sampler::Sample: all logits are -inf");
  for (size_t i = 0; i < history.size(); ++i) {
    if (history[i] < 0 || static_cast<size_t>(history[i]) >= n) {
      throw Error("Sampler::Sample: history[" + std::to_string(i) + "] must be in [0, " + std::to_string(n) +
                  "), got " + std::to_string(history[i]));
    }
  }

  // 1. Repetition penalty on a copy.
  std::span<const float> x = logits;
  const size_t window = options_.repeat_last_n < 0
                            ? history.size()
                            : std::min(history.size(), static_cast<size_t>(options_.repeat_last_n));
  if (options_.repetition_penalty != 1.0f && window > 0) {
    scratch_.assign(logits.begin(), logits.end());
    // Each distinct id is penalized once: mark by applying to the original value.
    for (int32_t id : history.subspan(history.size() - window)) {
      const float v = logits[id];
      scratch_[id] = v > 0.0f ? v / options_.repetition_penalty : v * options_.repetition_penalty;
    }
    x = scratch_;
  }
  // 1b. Frequency and presence penalties over the generated ids, on a copy.
  if ((options_.frequency_penalty != 0.0f || options_.presence_penalty != 0.0f) && history.size() > prompt_length_) {
    if (x.data() == logits.data()) scratch_.assign(logits.begin(), logits.end());
    ApplyOpenAiPenalties(history);
    x = scratch_;
  }

  // max over x: the validity scan's, unless the penalty made a copy.
  const float top =
      x.data() == logits.data() ? scan.max : detail::ScanLogits(x.data(), static_cast<std::int64_t>(n)).max;

  // 2. Greedy: argmax, lowest id on ties.
  if (options_.temperature == 0.0f) {
    return static_cast<int32_t>(detail::FindFirstEqual(x.data(), static_cast<std::int64_t>(n), top));
  }

  // 3. Weights w = exp((x - max) / T), so the most likely token has w = 1.
  const double inv_t = 1.0 / static_cast<double>(options_.temperature);
  auto weight = [&](float v) { return std::exp((static_cast<double>(v) - top) * inv_t); };
  auto before = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  candidates_.clear();
  for (size_t i = 0; i < n; ++i) {
    if (x[i] != kNegInf) candidates_.push_back({x[i], static_cast<int32_t>(i), 0.0});
  }
  // Prefix of candidates_ known to be in `before` order.
  size_t sorted = 0;
  if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < candidates_.size()) {
    const auto k = static_cast<size_t>(options_.top_k);
    std::nth_element(candidates_.begin(), candidates_.begin() + k, candidates_.end(), before);
    candidates_.resize(k);
    std::sort(candidates_.begin(), candidates_.end(), before);
    sorted = k;
  }
  double total = 0.0;  // mass before top_p / min_p, summed in candidate order
  for (Candidate& c : candidates_) total += c.weight = weight(c.logit);

  // min_p: keep w >= min_p · w_max (= min_p). Keeps the order; the max survives.
  if (options_.min_p > 0.0f) {
    const double threshold = static_cast<double>(options_.min_p);
    std::erase_if(candidates_, [&](const Candidate& c) { return c.weight < threshold; });
    sorted = std::min(sorted, candidates_.size());
  }

  // top_p: the smallest most-likely prefix whose mass reaches top_p · total. Sorts
  // only as much of the candidates as the walk needs.
  if (options_.top_p < 1.0f) {
    const double target = static_cast<double>(options_.top_p) * total;
    size_t k = std::min<size_t>(candidates_.size(), 1024);
    while (true) {
      if (sorted < k) {  // the k most likely, in order (nth_element + sort: O(n + k log k))
        if (k < candidates_.size()) {
          std::nth_element(candidates_.begin(), candidates_.begin() + k, candidates_.end(), before);
        }
        std::sort(candidates_.begin(), candidates_.begin() + k, before);
        sorted = k;
      }
      double acc = 0.0;
      size_t cut = 0;
      for (size_t i = 0; i < k; ++i) {
        acc += candidates_[i].weight;
        if (acc >= target) {
          cut = i + 1;
          break;
        }
      }
      if (cut > 0) {
        candidates_.resize(cut);
        break;
      }
      if (k == candidates_.size()) break;  // rounding: keep everything
      k = std::min(candidates_.size(), k * 8);
    }
  }

  return -1;
}

void Sampler::ApplyOpenAiPenalties(std::span<const int32_t> history) {
  counted_.assign(history.begin() + static_cast<std::ptrdiff_t>(prompt_length_), history.end());
  std::sort(counted_.begin(), counted_.end());
  for (size_t i = 0; i < counted_.size();) {
    size_t j = i;
    while (j < counted_.size() && counted_[j] == counted_[i]) ++j;
    float& v = scratch_[static_cast<size_t>(counted_[i])];
    v -= static_cast<float>(j - i) * options_.frequency_penalty + options_.presence_penalty;
    i = j;
  }
}

int32_t Sampler::Draw(int32_t exclude) {
  // 4. One draw from the kept candidates, in their current order.
  double sum = 0.0;
  for (const Candidate& c : candidates_) {
    if (c.id != exclude) sum += c.weight;
  }
  const double r = NextUniform() * sum;
  double acc = 0.0;
  int32_t last = -1;
  for (const Candidate& c : candidates_) {
    if (c.id == exclude) continue;
    acc += c.weight;
    last = c.id;
    if (r < acc) return c.id;
  }
  return last;  // rounding: r == sum
}

}  // namespace kvshare
