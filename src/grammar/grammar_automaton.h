// The grammar of a GrammarIr run as a lazily built DFA over bytes. Internal
// to src/runtime (kvshare/grammar/grammar.h's GrammarMatcher).
//
// A parse position is a stack of grammar positions (the top at a byte set,
// the frames below at the element after a rule reference), stored as
// hash-consed parent-linked nodes so that equal stacks have equal ids; node
// 0 is the empty stack: the document is complete. Since the grammar may be
// ambiguous (anyOf, optional properties), a DFA state is a set of stacks,
// interned too; set 0 is the empty set (dead). Transitions are computed on
// first use and kept per (state, byte class), so the trie walks of later
// steps mostly read a table. A rule reference in tail position does not push
// a frame, so loops (`chars := char chars`) keep the stack bounded.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar_ir.h"

namespace kvshare::detail {

class GrammarAutomaton {
 public:
  static constexpr std::uint32_t kDead = 0;

  explicit GrammarAutomaton(const GrammarIr& grammar);

  std::uint32_t initial() const { return initial_; }

  std::uint32_t Next(std::uint32_t state, unsigned char byte) {
    const std::size_t k = static_cast<std::size_t>(state) * nc_ + g_->byte_class[byte];
    std::int32_t t = trans_[k];
    if (t < 0) {
      t = static_cast<std::int32_t>(Compute(state, byte));
      trans_[k] = t;  // Compute may have grown trans_: index again
    }
    return static_cast<std::uint32_t>(t);
  }

  // The document may end here.
  bool Accepting(std::uint32_t state) const { return accepting_[state] != 0; }
  // How many more characters the state takes as plain string content, when
  // it is a string body at a character boundary (-1 when it is not; then
  // INT32_MAX for an unbounded string): any plain content of at most that
  // many characters (the last possibly cut) keeps it live.
  std::int32_t StringCapacity(std::uint32_t state) {
    if (capacity_[state] == kUnknown) capacity_[state] = ComputeCapacity(state);
    return capacity_[state];
  }
  std::size_t num_states() const { return sets_.size(); }

  // A state with the same masks as `state` for tokens of fewer than
  // `horizon` bytes (one value per automaton): every parse position in a
  // link above `horizon` of a repetition chain moved to that link
  // (GrammarIr::links). Inside a bounded string or repetition each
  // character leads to a new state, so masks keyed by state are never
  // reused; keyed by this they are, while the bound is far.
  std::uint32_t MaskKey(std::uint32_t state, std::uint32_t horizon);

 private:
  struct Node {
    std::uint32_t pos;
    std::uint32_t parent;
  };
  struct VecHash {
    std::size_t operator()(const std::vector<std::uint32_t>& v) const;
  };

  std::uint32_t Compute(std::uint32_t state, unsigned char byte);
  std::int32_t ComputeCapacity(std::uint32_t state);
  static constexpr std::int32_t kUnknown = -2;
  // Adds to out_ the stacks reachable from position pos over parent without
  // reading a byte.
  void Expand(std::uint32_t pos, std::uint32_t parent, int depth);
  std::uint32_t Intern(std::uint32_t pos, std::uint32_t parent);
  std::uint32_t InternSet();  // out_, sorted and unique

  const GrammarIr* g_;
  std::size_t nc_;
  std::vector<Node> nodes_;
  std::unordered_map<std::uint64_t, std::uint32_t> node_ids_;
  std::vector<std::vector<std::uint32_t>> sets_;
  std::unordered_map<std::vector<std::uint32_t>, std::uint32_t, VecHash> set_ids_;
  std::vector<std::int32_t> trans_;  // [sets, classes], -1: not computed
  std::vector<std::uint8_t> accepting_;
  std::vector<std::int32_t> capacity_;
  std::vector<std::uint32_t> mask_key_, canon_;  // per state / per node; kUnset: not yet
  static constexpr std::uint32_t kUnset = 0xFFFFFFFFu;
  std::uint32_t Canon(std::uint32_t node, std::uint32_t horizon);
  std::uint32_t initial_ = 0;
  std::vector<std::uint32_t> out_;
  std::unordered_set<std::uint64_t> visited_;
};

}  // namespace kvshare::detail
