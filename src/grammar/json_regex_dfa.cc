// Regular expressions as deterministic automata over code points
// (json_regex.h RegexEmitter::Automaton), for what the rule-per-node
// emitter cannot say: a lookahead at the start of an alternative,
// (?=X)Y as L(X Σ*) ∩ L(Y) and (?!X)Y as L(Y) minus L(X Σ*), and two
// expressions at once (a `pattern` next to a `format`, patterns merged by
// allOf) as the intersection of their languages, `not` of a pattern as the
// complement. Exact: subset construction, products and complements
// of whole-string languages, then one grammar rule per live state (a state
// from which no accepting state is reached is left out, so every prefix the
// grammar takes can still end a string). Bounded: states and NFA size are
// capped, past which the expression is refused (RegexError).
#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "grammar/json_regex.h"

namespace kvshare::detail {
namespace {

constexpr char32_t kMaxCode = 0x10FFFF;
constexpr std::size_t kMaxNfa = 200000;   // NFA states (bounded repetitions written out)
constexpr std::size_t kMaxStates = 20000;  // DFA states, after each step

// The code points split into atoms no set of the expressions tells apart;
// surrogates (which JSON text cannot hold) in none.
struct Atoms {
  std::vector<std::pair<char32_t, char32_t>> ranges;
  void Collect(const RegexNode& n, std::set<char32_t>& cuts) const {
    for (const auto& [lo, hi] : n.set) cuts.insert(lo), cuts.insert(hi + 1);
    for (const RegexNode& k : n.kids) Collect(k, cuts);
  }
  explicit Atoms(const std::vector<const RegexNode*>& roots) {
    std::set<char32_t> cuts = {0, '\n', '\n' + 1, 0xD800, 0xE000, kMaxCode + 1};
    for (const RegexNode* r : roots) Collect(*r, cuts);
    char32_t prev = 0;
    for (char32_t c : cuts) {
      if (c > prev && !(prev >= 0xD800 && prev < 0xE000)) ranges.emplace_back(prev, c - 1);
      prev = c;
    }
  }
  int Count() const { return static_cast<int>(ranges.size()); }
  std::vector<int> Of(const CodeRanges& set) const {
    std::vector<int> out;
    for (int a = 0; a < Count(); ++a) {
      for (const auto& [lo, hi] : set) {
        if (ranges[a].first >= lo && ranges[a].second <= hi) {
          out.push_back(a);
          break;
        }
      }
    }
    return out;
  }
};

struct Nfa {
  std::vector<std::vector<std::pair<int, int>>> edges;  // (atom, to); atom -1: empty move
  int New() {
    if (edges.size() >= kMaxNfa) throw RegexError("an expression too large for an automaton");
    edges.emplace_back();
    return static_cast<int>(edges.size()) - 1;
  }
  // A fragment for n from `from`; returns its end state.
  int Build(const RegexNode& n, int from, const Atoms& atoms) {
    switch (n.kind) {
      case RegexNode::kSet: {
        const int to = New();
        for (int a : atoms.Of(n.set)) edges[from].emplace_back(a, to);
        return to;
      }
      case RegexNode::kSeq: {
        for (const RegexNode& k : n.kids) from = Build(k, from, atoms);
        return from;
      }
      case RegexNode::kAlt: {
        const int to = New();
        for (const RegexNode& k : n.kids) {
          const int s = New();
          edges[from].emplace_back(-1, s);
          edges[Build(k, s, atoms)].emplace_back(-1, to);
        }
        return to;
      }
      case RegexNode::kRepeat: {
        for (int i = 0; i < n.min; ++i) from = Build(n.kids[0], from, atoms);
        if (n.max < 0) {
          const int loop = New();
          edges[from].emplace_back(-1, loop);
          edges[Build(n.kids[0], loop, atoms)].emplace_back(-1, loop);
          return loop;
        }
        const int to = New();
        for (int i = n.min; i < n.max; ++i) {
          edges[from].emplace_back(-1, to);
          from = Build(n.kids[0], from, atoms);
        }
        edges[from].emplace_back(-1, to);
        return to;
      }
      case RegexNode::kNotAhead:
      case RegexNode::kAhead: throw RegexError("lookaround (?=, ?!) other than at the start of an alternative");
      default: throw RegexError("an anchor (^, $) inside a group");
    }
  }
};

// Complete: state 0 is the dead state (all moves to itself, not accepting).
struct Dfa {
  int atoms = 0;
  std::vector<int> next;  // state * atoms + atom
  std::vector<bool> accept;
  int start = 0;
  int Size() const { return static_cast<int>(accept.size()); }
  int Add(bool acc) {
    if (accept.size() >= kMaxStates) throw RegexError("an expression whose automaton has too many states");
    accept.push_back(acc);
    next.resize(next.size() + static_cast<std::size_t>(atoms), 0);
    return Size() - 1;
  }
  explicit Dfa(int n) : atoms(n) { Add(false); }
};

Dfa Determinize(const Nfa& nfa, int start, int end, int natoms) {
  Dfa d(natoms);
  std::vector<int> seen(nfa.edges.size(), -1);  // the closure a state was last added to
  int generation = 0;
  auto closure = [&](std::vector<int> s) {
    ++generation;
    for (int x : s) seen[x] = generation;
    for (std::size_t i = 0; i < s.size(); ++i) {
      for (auto [a, t] : nfa.edges[s[i]]) {
        if (a < 0 && seen[t] != generation) seen[t] = generation, s.push_back(t);
      }
    }
    std::sort(s.begin(), s.end());
    return s;
  };
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> work;
  auto id = [&](std::vector<int> s) {
    if (s.empty()) return 0;
    auto [it, fresh] = ids.emplace(s, 0);
    if (fresh) {
      it->second = d.Add(std::binary_search(s.begin(), s.end(), end));
      work.push_back(std::move(s));
    }
    return it->second;
  };
  d.start = id(closure({start}));
  for (std::size_t w = 0; w < work.size(); ++w) {
    const std::vector<int> s = work[w];
    const int from = ids[s];
    std::vector<std::vector<int>> by_atom(static_cast<std::size_t>(natoms));
    for (int x : s) {
      for (auto [a, t] : nfa.edges[x]) {
        if (a >= 0) by_atom[a].push_back(t);
      }
    }
    for (int a = 0; a < natoms; ++a) {
      if (by_atom[a].empty()) continue;
      std::sort(by_atom[a].begin(), by_atom[a].end());
      by_atom[a].erase(std::unique(by_atom[a].begin(), by_atom[a].end()), by_atom[a].end());
      const int t = id(closure(by_atom[a]));
      d.next[static_cast<std::size_t>(from) * natoms + a] = t;
    }
  }
  return d;
}

// Intersection (both) or union of two automata over the same atoms.
Dfa Product(const Dfa& x, const Dfa& y, bool both) {
  Dfa d(x.atoms);
  std::map<std::pair<int, int>, int> ids = {{{0, 0}, 0}};
  std::vector<std::pair<int, int>> work;
  auto id = [&](int p, int q) {
    auto [it, fresh] = ids.emplace(std::make_pair(p, q), 0);
    if (fresh) {
      it->second = d.Add(both ? x.accept[p] && y.accept[q] : x.accept[p] || y.accept[q]);
      work.emplace_back(p, q);
    }
    return it->second;
  };
  d.start = id(x.start, y.start);
  for (std::size_t w = 0; w < work.size(); ++w) {
    const auto [p, q] = work[w];
    const int from = ids[{p, q}];
    for (int a = 0; a < x.atoms; ++a) {
      const int np = x.next[static_cast<std::size_t>(p) * x.atoms + a];
      const int nq = y.next[static_cast<std::size_t>(q) * y.atoms + a];
      if (both ? (np == 0 || nq == 0) : (np == 0 && nq == 0)) continue;
      d.next[static_cast<std::size_t>(from) * x.atoms + a] = id(np, nq);
    }
  }
  return d;
}

// The strings x does not take: the dead state becomes an accepting sink.
Dfa Complement(const Dfa& x) {
  Dfa d(x.atoms);
  const int sink = d.Add(true);
  for (int a = 0; a < x.atoms; ++a) d.next[static_cast<std::size_t>(sink) * x.atoms + a] = sink;
  for (int s = 1; s < x.Size(); ++s) d.Add(!x.accept[s]);
  auto map = [&](int s) { return s == 0 ? sink : s + 1; };
  for (int s = 1; s < x.Size(); ++s) {
    for (int a = 0; a < x.atoms; ++a) {
      d.next[static_cast<std::size_t>(s + 1) * x.atoms + a] = map(x.next[static_cast<std::size_t>(s) * x.atoms + a]);
    }
  }
  d.start = map(x.start);
  return d;
}

Dfa FromNode(const RegexNode& n, const Atoms& atoms) {
  Nfa nfa;
  const int s = nfa.New();
  const int e = nfa.Build(n, s, atoms);
  return Determinize(nfa, s, e, atoms.Count());
}

RegexNode AnyString() {
  RegexNode c{RegexNode::kSet};
  c.set = {{0, kMaxCode}};
  RegexNode any{RegexNode::kRepeat};
  any.min = 0, any.max = -1;
  any.kids.push_back(c);
  return any;
}

// The whole strings `re` finds (unanchored sides take any characters);
// `at_start`: matched at the start of the string (a lookahead's content).
// `wide_eol`: $ also before a final line feed, as Python's re reads it
// (the jsonschema package's engine): taken where the language is
// complemented, so that what is written is valid in both engines.
Dfa Whole(const RegexNode& re, const Atoms& atoms, bool at_start, bool wide_eol) {
  std::vector<const RegexNode*> alts;
  if (re.kind == RegexNode::kAlt) {
    for (const RegexNode& k : re.kids) alts.push_back(&k);
  } else {
    alts.push_back(&re);
  }
  Dfa out(atoms.Count());
  for (const RegexNode* a : alts) {
    std::vector<RegexNode> kids = a->kind == RegexNode::kSeq ? a->kids : std::vector<RegexNode>{*a};
    bool bol = at_start;
    std::vector<const RegexNode*> looks;
    std::size_t k = 0;
    // ^ and lookaheads before anything is read.
    for (; k < kids.size(); ++k) {
      if (kids[k].kind == RegexNode::kBol) {
        bol = true;
      } else if ((kids[k].kind == RegexNode::kNotAhead || kids[k].kind == RegexNode::kAhead) && bol) {
        looks.push_back(&kids[k]);
      } else {
        break;
      }
    }
    std::size_t end = kids.size();
    bool eol = false;
    while (end > k && kids[end - 1].kind == RegexNode::kEol) eol = true, --end;
    RegexNode body{RegexNode::kSeq};
    if (!bol) body.kids.push_back(AnyString());
    body.kids.insert(body.kids.end(), kids.begin() + static_cast<std::ptrdiff_t>(k),
                     kids.begin() + static_cast<std::ptrdiff_t>(end));
    if (!eol) body.kids.push_back(AnyString());
    if (eol && wide_eol) {
      RegexNode nl{RegexNode::kRepeat};
      nl.min = 0, nl.max = 1;
      nl.kids.push_back(RegexNode{RegexNode::kSet});
      nl.kids[0].set = {{'\n', '\n'}};
      body.kids.push_back(std::move(nl));
    }
    Dfa d = FromNode(body, atoms);
    for (const RegexNode* look : looks) {
      const bool negated = look->kind == RegexNode::kNotAhead;
      const Dfa l = Whole(look->kids[0], atoms, true, negated != wide_eol);
      d = Product(d, negated ? Complement(l) : l, true);
    }
    out = Product(out, d, false);
  }
  return out;
}

}  // namespace

std::uint32_t RegexEmitter::Automaton(const std::vector<const RegexNode*>& all, int min, int max,
                                      const std::vector<bool>& negated) {
  const Atoms atoms(all);
  auto language = [&](std::size_t i) {
    const bool no = i < negated.size() && negated[i];
    Dfa w = Whole(*all[i], atoms, false, no);
    return no ? Complement(w) : w;
  };
  Dfa d = language(0);
  for (std::size_t i = 1; i < all.size(); ++i) d = Product(d, language(i), true);
  if (min > 0 || max >= 0) {
    RegexNode len{RegexNode::kRepeat};
    len.min = min, len.max = max;
    len.kids.push_back(AnyString().kids[0]);
    d = Product(d, FromNode(len, atoms), true);
  }
  // Live states: those from which an accepting one is reached.
  std::vector<bool> live(static_cast<std::size_t>(d.Size()));
  for (bool changed = true; changed;) {
    changed = false;
    for (int s = 1; s < d.Size(); ++s) {
      bool l = d.accept[s];
      for (int a = 0; a < d.atoms && !l; ++a) l = live[d.next[static_cast<std::size_t>(s) * d.atoms + a]];
      if (l && !live[s]) live[s] = true, changed = true;
    }
  }
  if (!live[d.start]) throw RegexEmpty("a pattern that no string of the length bounds (and format) matches");
  std::vector<std::uint32_t> rule(static_cast<std::size_t>(d.Size()));
  for (int s = 1; s < d.Size(); ++s) {
    if (live[s]) rule[s] = b_.NewRule();
  }
  for (int s = 1; s < d.Size(); ++s) {
    if (!live[s]) continue;
    std::map<int, CodeRanges> by_target;
    for (int a = 0; a < d.atoms; ++a) {
      const int t = d.next[static_cast<std::size_t>(s) * d.atoms + a];
      if (live[t]) by_target[t].push_back(atoms.ranges[a]);
    }
    for (auto& [t, set] : by_target) {
      std::sort(set.begin(), set.end());
      CodeRanges merged;
      for (const auto& r : set) {
        if (!merged.empty() && r.first == merged.back().second + 1) {
          merged.back().second = r.second;
        } else {
          merged.push_back(r);
        }
      }
      b_.Alt(rule[s], {GrammarBuilder::Ref(Char(merged)), GrammarBuilder::Ref(rule[t])});
    }
    if (d.accept[s]) b_.Alt(rule[s], {});
  }
  const GrammarBuilder::Seq quote =
      j_.notation() == Notation::kGemma ? b_.Lit("<|\"|>") : GrammarBuilder::Seq{b_.Byte('"')};
  const std::uint32_t r = b_.NewRule();
  b_.Alt(r, quote + GrammarBuilder::Seq{GrammarBuilder::Ref(rule[d.start])} + quote);
  return r;
}

}  // namespace kvshare::detail
