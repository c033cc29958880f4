// A negative lookahead at the start of a pattern, ^(?!X)C{lo,hi}$ with X a
// literal and C one class (json_regex.h ExpandNegativeLookahead): the
// strings of C{lo,hi} that do not start with X, as alternatives without it.
// CloudFormation's tag keys are written so: ^(?!aws:)[a-zA-Z+-=._:/]+$.
#include <string>
#include <utility>
#include <vector>

#include "grammar/json_regex.h"

namespace kvshare::detail {
namespace {

RegexNode Point(char32_t c) {
  RegexNode n{RegexNode::kSet};
  n.set = {{c, c}};
  return n;
}

bool Holds(const CodeRanges& set, char32_t c) {
  for (const auto& [lo, hi] : set) {
    if (c >= lo && c <= hi) return true;
  }
  return false;
}

CodeRanges Without(const CodeRanges& set, char32_t c) {
  CodeRanges out;
  for (const auto& [lo, hi] : set) {
    if (c < lo || c > hi) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < c) out.emplace_back(lo, c - 1);
    if (c < hi) out.emplace_back(c + 1, hi);
  }
  return out;
}

[[noreturn]] void Unsupported() {
  throw RegexError("lookaround (?=, ?!, ?<=, ?<!) other than ^(?!literal) before one repeated class and $");
}

}  // namespace

std::vector<std::vector<RegexNode>> ExpandNegativeLookahead(const std::vector<RegexNode>& kids) {
  // kids: (?!X), then C or C{lo,hi}.
  if (kids.size() != 2 || kids[0].kind != RegexNode::kNotAhead) Unsupported();
  std::u32string x;
  const RegexNode& look = kids[0].kids[0];
  for (const RegexNode& k : look.kind == RegexNode::kSeq ? look.kids : std::vector<RegexNode>{look}) {
    if (k.kind != RegexNode::kSet || k.set.size() != 1 || k.set[0].first != k.set[0].second) Unsupported();
    x += k.set[0].first;
  }
  const RegexNode& rest = kids[1];
  const RegexNode* cls = rest.kind == RegexNode::kSet ? &rest : nullptr;
  int lo = 1, hi = 1;
  if (rest.kind == RegexNode::kRepeat && rest.kids[0].kind == RegexNode::kSet) {
    cls = &rest.kids[0];
    lo = rest.min, hi = rest.max;
  }
  if (cls == nullptr || x.empty()) Unsupported();
  // A string of C{lo,hi} not starting with X is a proper prefix of X, or
  // X's first i characters, then a character of C other than X's next, then
  // more of C.
  std::vector<std::vector<RegexNode>> out;
  std::vector<RegexNode> prefix;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const int n = static_cast<int>(i);
    if (n >= lo && (hi < 0 || n <= hi)) out.push_back(prefix);
    const CodeRanges other = Without(cls->set, x[i]);
    if ((hi < 0 || hi > n) && !other.empty()) {
      std::vector<RegexNode> alt = prefix;
      RegexNode first{RegexNode::kSet};
      first.set = other;
      alt.push_back(std::move(first));
      RegexNode more{RegexNode::kRepeat};
      more.min = std::max(lo - n - 1, 0);
      more.max = hi < 0 ? -1 : hi - n - 1;
      more.kids.push_back(*cls);
      if (more.max != 0) alt.push_back(std::move(more));
      out.push_back(std::move(alt));
    }
    if (!Holds(cls->set, x[i])) break;  // no string of C goes on with X
    prefix.push_back(Point(x[i]));
  }
  return out;
}

}  // namespace kvshare::detail
