// Lengths of what a parsed expression matches, and the narrowing that fits
// one into a minLength / maxLength bound (json_regex.h).
#include <algorithm>
#include <utility>
#include <vector>

#include "grammar/json_regex.h"

namespace kvshare::detail {
namespace {

// Elements the emitted grammar of n holds, about (bounded repetitions are
// written out, json_regex.h), for the bound FitLengths keeps to.
long long Size(const RegexNode& n) {
  long long t = 1;
  for (const RegexNode& k : n.kids) t += Size(k);
  if (n.kind == RegexNode::kRepeat) t *= std::max(n.min, n.max) + 1LL;
  return std::min(t, 1LL << 40);
}

void CollectRepeats(RegexNode& n, std::vector<RegexNode*>& out) {
  if (n.kind == RegexNode::kRepeat) out.push_back(&n);
  for (RegexNode& k : n.kids) CollectRepeats(k, out);
}

}  // namespace

std::pair<long long, long long> Lengths(const RegexNode& n) {
  switch (n.kind) {
    case RegexNode::kSet: return {1, 1};
    case RegexNode::kSeq: {
      long long lo = 0, hi = 0;
      for (const RegexNode& k : n.kids) {
        auto [a, b] = Lengths(k);
        lo += a;
        hi = hi < 0 || b < 0 ? -1 : hi + b;
      }
      return {lo, hi};
    }
    case RegexNode::kAlt: {
      long long lo = -1, hi = 0;
      for (const RegexNode& k : n.kids) {
        auto [a, b] = Lengths(k);
        lo = lo < 0 ? a : std::min(lo, a);
        hi = hi < 0 || b < 0 ? -1 : std::max(hi, b);
      }
      return {std::max(lo, 0LL), hi};
    }
    case RegexNode::kRepeat: {
      auto [a, b] = Lengths(n.kids[0]);
      return {a * n.min, n.max < 0 ? (b == 0 ? 0 : -1) : b < 0 ? -1 : b * n.max};
    }
    default: return {0, 0};
  }
}

// Each repetition's maximum is cut to at most
// max(its minimum, k) for the largest k that fits max, then its minimum
// raised to min(its maximum, k') for the smallest k' that reaches min. The
// language shrinks (never grows), so outputs stay valid; false when no such
// k / k' exists (a fixed part too long, an alternative too short).
bool FitLengths(RegexNode& body, int min, int max) {
  std::vector<RegexNode*> reps;
  CollectRepeats(body, reps);
  std::vector<std::pair<int, int>> orig;
  for (const RegexNode* r : reps) orig.emplace_back(r->min, r->max);
  constexpr long long kMaxSize = 40000;  // grammar elements, as RegexEmitter's budget_
  auto cap = [&](int k) {
    for (std::size_t i = 0; i < reps.size(); ++i) {
      const int m = std::max(orig[i].first, k);
      reps[i]->min = orig[i].first;
      reps[i]->max = orig[i].second < 0 ? m : std::min(orig[i].second, m);
    }
    auto [lo, hi] = Lengths(body);
    return (max < 0 || (hi >= 0 && hi <= max)) && Size(body) <= kMaxSize;
  };
  // Largest cap that fits; with max < 0 only the size bounds it.
  // Each repetition at most 256 more than its minimum: bounded repetitions
  // side by side (".{0,k}x.{0,k}") leave the matcher up to k states per byte.
  constexpr int kMaxCap = 256;
  int lo_k = -1, hi_k = std::min(max < 0 ? std::max(min, 1) * 4 : max, std::max(min, kMaxCap));
  while (lo_k < hi_k) {
    const int mid = lo_k + (hi_k - lo_k + 1) / 2;
    if (cap(mid)) {
      lo_k = mid;
    } else {
      hi_k = mid - 1;
    }
  }
  if (lo_k < 0 || !cap(lo_k)) return false;
  std::vector<int> capped;
  for (const RegexNode* r : reps) capped.push_back(r->max);
  auto raise = [&](int k) {
    for (std::size_t i = 0; i < reps.size(); ++i) reps[i]->min = std::min(capped[i], std::max(orig[i].first, k));
    return Lengths(body).first >= min;
  };
  int a = 0, b = std::max(min, 0);
  if (!raise(b)) return false;
  while (a < b) {
    const int mid = a + (b - a) / 2;
    if (raise(mid)) {
      b = mid;
    } else {
      a = mid + 1;
    }
  }
  return raise(a);
}

}  // namespace kvshare::detail
