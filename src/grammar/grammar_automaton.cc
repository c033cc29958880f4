#include "grammar/grammar_automaton.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "kvshare/common/error.h"

namespace kvshare::detail {
namespace {

// Rule references followed without reading a byte, at most (a grammar that
// nests deeper is broken; the JSON compiler's never does).
constexpr int kMaxExpandDepth = 10000;
// Parse stacks and DFA states one matcher may build: far above what a JSON
// output of any realistic length needs; bounds a pathological grammar's
// memory (the request then ends with this error).
constexpr std::size_t kMaxNodes = std::size_t{1} << 22, kMaxStates = std::size_t{1} << 20;

std::uint64_t Key(std::uint32_t pos, std::uint32_t parent) { return (static_cast<std::uint64_t>(pos) << 32) | parent; }

}  // namespace

std::size_t GrammarAutomaton::VecHash::operator()(const std::vector<std::uint32_t>& v) const {
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ v.size();
  for (std::uint32_t x : v) h = (h ^ x) * 0x100000001b3ull, h ^= h >> 29;
  return static_cast<std::size_t>(h);
}

GrammarAutomaton::GrammarAutomaton(const GrammarIr& grammar)
    : g_(&grammar), nc_(static_cast<std::size_t>(grammar.num_classes)) {
  nodes_.push_back({0, 0});  // the empty stack
  out_.clear();
  InternSet();  // set 0: dead
  visited_.clear();
  for (std::uint32_t a : g_->rules.at(g_->root)) Expand(a, 0, 0);
  initial_ = InternSet();
}

std::uint32_t GrammarAutomaton::Intern(std::uint32_t pos, std::uint32_t parent) {
  auto [it, fresh] = node_ids_.emplace(Key(pos, parent), static_cast<std::uint32_t>(nodes_.size()));
  if (fresh) {
    if (nodes_.size() >= kMaxNodes) {
      node_ids_.erase(it);
      throw Error("grammar: more than " + std::to_string(kMaxNodes) + " parse stacks (the schema is too ambiguous)");
    }
    nodes_.push_back({pos, parent});
  }
  return it->second;
}

std::uint32_t GrammarAutomaton::InternSet() {
  std::sort(out_.begin(), out_.end());
  out_.erase(std::unique(out_.begin(), out_.end()), out_.end());
  auto [it, fresh] = set_ids_.emplace(out_, static_cast<std::uint32_t>(sets_.size()));
  if (fresh) {
    if (sets_.size() >= kMaxStates) {
      set_ids_.erase(it);
      out_.clear();
      throw Error("grammar: more than " + std::to_string(kMaxStates) + " parse states (the schema is too ambiguous)");
    }
    sets_.push_back(out_);
    trans_.resize(sets_.size() * nc_, -1);
    accepting_.push_back(!out_.empty() && out_.front() == 0);
    capacity_.push_back(kUnknown);
  }
  out_.clear();
  return it->second;
}

void GrammarAutomaton::Expand(std::uint32_t pos, std::uint32_t parent, int depth) {
  if (!visited_.insert(Key(pos, parent)).second) return;
  if (depth > kMaxExpandDepth) throw Error("grammar: rule references nest deeper than 10000 without a byte");
  const GrammarElem e = g_->elems[pos];
  switch (e.kind) {
    case ElemKind::kEnd:
      if (parent == 0) {
        out_.push_back(0);
      } else {
        const Node n = nodes_[parent];
        Expand(n.pos, n.parent, depth + 1);
      }
      return;
    case ElemKind::kBytes: out_.push_back(Intern(pos, parent)); return;
    case ElemKind::kRule: {
      // A reference in tail position returns straight to the parent.
      const std::uint32_t ret = g_->elems[pos + 1].kind == ElemKind::kEnd ? parent : Intern(pos + 1, parent);
      for (std::uint32_t a : g_->rules[e.arg]) Expand(a, ret, depth + 1);
      return;
    }
  }
}

std::uint32_t GrammarAutomaton::Compute(std::uint32_t state, unsigned char byte) {
  out_.clear();
  visited_.clear();
  // sets_ may grow while expanding: copy the stacks first.
  const std::vector<std::uint32_t> stacks = sets_[state];
  for (std::uint32_t k : stacks) {
    if (k == 0) continue;
    const Node n = nodes_[k];
    if (g_->sets[g_->elems[n.pos].arg].test(byte)) Expand(n.pos + 1, n.parent, 0);
  }
  return InternSet();
}

std::uint32_t GrammarAutomaton::Canon(std::uint32_t node, std::uint32_t horizon) {
  if (node == 0) return 0;
  if (canon_.size() <= node) canon_.resize(nodes_.size(), kUnset);
  if (canon_[node] != kUnset) return canon_[node];
  const Node n = nodes_[node];
  const std::uint32_t parent = Canon(n.parent, horizon);
  std::uint32_t pos = n.pos;
  if (auto it = g_->links.find(pos); it != g_->links.end() && it->second.level > horizon) {
    pos = g_->chain_starts[it->second.chain][horizon] + it->second.offset;
  }
  const std::uint32_t out = pos == n.pos && parent == n.parent ? node : Intern(pos, parent);
  if (canon_.size() <= node) canon_.resize(nodes_.size(), kUnset);
  canon_[node] = out;
  return out;
}

std::uint32_t GrammarAutomaton::MaskKey(std::uint32_t state, std::uint32_t horizon) {
  if (g_->links.empty()) return state;
  if (mask_key_.size() <= state) mask_key_.resize(sets_.size(), kUnset);
  if (mask_key_[state] != kUnset) return mask_key_[state];
  std::vector<std::uint32_t> stacks;
  bool moved = false;
  for (std::uint32_t k : sets_[state]) {
    stacks.push_back(Canon(k, horizon));
    moved = moved || stacks.back() != k;
  }
  std::uint32_t key = state;
  if (moved) {
    out_ = std::move(stacks);
    key = InternSet();
  }
  if (mask_key_.size() <= state) mask_key_.resize(sets_.size(), kUnset);
  mask_key_[state] = key;
  return key;
}

std::int32_t GrammarAutomaton::ComputeCapacity(std::uint32_t state) {
  if (g_->plain_char_pos < 0) return -1;
  // Each plain-character stack names, by its frame, the rule and parent
  // whose closure the state should be.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> closures;
  std::int32_t capacity = std::numeric_limits<std::int32_t>::max();
  for (std::uint32_t k : sets_[state]) {
    if (k == 0 || nodes_[k].pos != static_cast<std::uint32_t>(g_->plain_char_pos)) continue;
    const std::uint32_t f = nodes_[k].parent;
    if (f == 0) return -1;
    auto it = g_->string_frames.find(nodes_[f].pos);
    if (it == g_->string_frames.end()) return -1;
    closures.emplace_back(it->second.rule, nodes_[f].parent);
    capacity = std::min(capacity, it->second.capacity);
  }
  if (closures.empty()) return -1;
  out_.clear();
  visited_.clear();
  for (const auto& [rule, parent] : closures) {
    for (std::uint32_t a : g_->rules[rule]) Expand(a, parent, 0);
  }
  std::sort(out_.begin(), out_.end());
  out_.erase(std::unique(out_.begin(), out_.end()), out_.end());
  const bool same = out_ == sets_[state];
  out_.clear();
  return same ? capacity : -1;
}

}  // namespace kvshare::detail
