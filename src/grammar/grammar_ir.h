// The byte-level grammar behind kvshare::Grammar (kvshare/grammar/grammar.h), and a
// builder for it. Internal to src/runtime.
//
// A grammar is a set of rules; a rule is a list of alternatives; an
// alternative is a sequence of elements, each a byte set (one byte from the
// set) or a reference to a rule. All alternatives are stored end to end in
// one array, each closed by a kEnd element, so a position in the grammar is
// one index. Rules must not be left-recursive (the JSON Schema compiler only
// recurses through '{' or '[').
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvshare/grammar/grammar.h"

namespace kvshare::detail {

enum class ElemKind : std::uint8_t { kEnd, kBytes, kRule };

struct GrammarElem {
  ElemKind kind = ElemKind::kEnd;
  std::uint32_t arg = 0;  // kBytes: index into GrammarIr::sets; kRule: rule index
};

struct GrammarIr {
  std::vector<GrammarElem> elems;
  std::vector<std::vector<std::uint32_t>> rules;  // per rule: its alternatives' first positions
  std::vector<std::bitset<256>> sets;
  std::uint32_t root = 0;
  // Bytes no set tells apart share a class: transitions are stored per class.
  std::array<std::uint8_t, 256> byte_class{};
  int num_classes = 1;
  // String content, which the mask walk recognizes to take trie subtrees of
  // plain string content whole: the position of the plain-character set
  // (first alternative of the `char` rule; -1: none), and the frames a
  // character of a string body returns to, by position: the rule whose
  // closure over the frame's parent is the state before that character, and
  // how many more characters that rule allows (INT32_MAX: unbounded).
  std::int64_t plain_char_pos = -1;
  struct StringFrame {
    std::uint32_t rule = 0;
    std::int32_t capacity = 0;
  };
  std::unordered_map<std::uint32_t, StringFrame> string_frames;
  // Bounded repetitions written as chains of rules (JsonGrammar::UpTo and
  // String): L_k := ε | item L_k-1, link k the second alternative of L_k.
  // By position inside a link: its chain, level and offset;
  // chain_starts[chain][k]: where link k starts. A parse position in link
  // k > h and the same offset in link h take the same input of fewer than
  // h bytes (which holds fewer than h nonempty items), so the masks of
  // tokens shorter than h agree (GrammarAutomaton::MaskKey).
  struct Link {
    std::uint32_t chain = 0, level = 0, offset = 0;
  };
  std::unordered_map<std::uint32_t, Link> links;
  std::vector<std::vector<std::uint32_t>> chain_starts;
};

// Builds a GrammarIr rule by rule.
class GrammarBuilder {
 public:
  struct Item {
    bool rule = false;
    std::uint32_t id = 0;  // rule index, or set index
  };
  using Seq = std::vector<Item>;

  std::uint32_t NewRule();
  void Alt(std::uint32_t rule, Seq seq);
  Item Set(const std::bitset<256>& set);
  Item Byte(unsigned char c);
  Item Range(unsigned char lo, unsigned char hi);
  static Item Ref(std::uint32_t rule) { return {true, rule}; }
  // The bytes of `text`, one element each.
  Seq Lit(std::string_view text);
  // Every rule from `from` on that has no alternative gets one that never
  // matches (an empty byte set): the rules a compile step left unfinished
  // when it gave up on a schema that matches nothing.
  void SealEmpty(std::uint32_t from);
  // `plain_char`: a rule whose first alternative is one plain-character set.
  void MarkPlainChar(std::uint32_t plain_char) { char_ = plain_char, has_char_ = true; }
  // Alternative `alt` of `rule` is [char, R]: a string body that allows
  // `capacity` more characters (INT32_MAX: any number) before this one's
  // frame returns to R.
  void MarkStringFrame(std::uint32_t rule, int alt, std::int32_t capacity) { frames_.push_back({rule, alt, capacity}); }
  // Chains of bounded repetitions (GrammarIr::links): a new chain, and
  // alternative `alt` of `rule` as its link `level` (>= 1).
  std::uint32_t NewChain() { return num_chains_++; }
  void MarkLink(std::uint32_t rule, int alt, std::uint32_t chain, std::uint32_t level) {
    links_.push_back({rule, alt, chain, level});
  }

  GrammarIr Finish(std::uint32_t root);

 private:
  std::vector<std::vector<Seq>> rules_;
  std::vector<std::bitset<256>> sets_;
  bool has_char_ = false;
  std::uint32_t char_ = 0;
  struct Frame {
    std::uint32_t rule;
    int alt;
    std::int32_t capacity;
  };
  std::vector<Frame> frames_;
  struct LinkMark {
    std::uint32_t rule;
    int alt;
    std::uint32_t chain, level;
  };
  std::vector<LinkMark> links_;
  std::uint32_t num_chains_ = 0;
};

}  // namespace kvshare::detail

namespace kvshare {
class Grammar {
 public:
  explicit Grammar(detail::GrammarIr ir) : ir(std::move(ir)) {}
  // A lazy grammar (kvshare::LazyGrammar): `ir` is its body's, so that code
  // reading `ir` alone still sees the constrained language.
  Grammar(detail::GrammarIr ir, std::shared_ptr<const LazyGrammarOptions> lazy, std::shared_ptr<const Grammar> body)
      : ir(std::move(ir)), lazy(std::move(lazy)), body(std::move(body)) {}
  const detail::GrammarIr ir;
  const std::shared_ptr<const LazyGrammarOptions> lazy;  // null: constrained from the first byte
  const std::shared_ptr<const Grammar> body;             // lazy: the (eager) body grammar
};
}  // namespace kvshare
