#include "grammar/grammar_ir.h"

#include <map>
#include <string>

#include "kvshare/common/error.h"

namespace kvshare::detail {

std::uint32_t GrammarBuilder::NewRule() {
  rules_.emplace_back();
  return static_cast<std::uint32_t>(rules_.size() - 1);
}

void GrammarBuilder::SealEmpty(std::uint32_t from) {
  for (std::size_t r = from; r < rules_.size(); ++r) {
    if (rules_[r].empty()) rules_[r].push_back({Set({})});
  }
}

void GrammarBuilder::Alt(std::uint32_t rule, Seq seq) { rules_.at(rule).push_back(std::move(seq)); }

GrammarBuilder::Item GrammarBuilder::Set(const std::bitset<256>& set) {
  for (std::size_t i = 0; i < sets_.size(); ++i) {
    if (sets_[i] == set) return {false, static_cast<std::uint32_t>(i)};
  }
  sets_.push_back(set);
  return {false, static_cast<std::uint32_t>(sets_.size() - 1)};
}

GrammarBuilder::Item GrammarBuilder::Byte(unsigned char c) {
  std::bitset<256> s;
  s.set(c);
  return Set(s);
}

GrammarBuilder::Item GrammarBuilder::Range(unsigned char lo, unsigned char hi) {
  std::bitset<256> s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<std::size_t>(c));
  return Set(s);
}

GrammarBuilder::Seq GrammarBuilder::Lit(std::string_view text) {
  Seq out;
  for (char c : text) out.push_back(Byte(static_cast<unsigned char>(c)));
  return out;
}

GrammarIr GrammarBuilder::Finish(std::uint32_t root) {
  GrammarIr g;
  g.root = root;
  g.sets = sets_;
  g.rules.resize(rules_.size());
  for (std::size_t r = 0; r < rules_.size(); ++r) {
    if (rules_[r].empty()) throw Error("grammar: rule " + std::to_string(r) + " has no alternative (internal error)");
    for (const Seq& seq : rules_[r]) {
      g.rules[r].push_back(static_cast<std::uint32_t>(g.elems.size()));
      for (const Item& it : seq) g.elems.push_back({it.rule ? ElemKind::kRule : ElemKind::kBytes, it.id});
      g.elems.push_back({ElemKind::kEnd, 0});
    }
  }
  // Byte classes: bytes with the same membership in every set.
  std::map<std::vector<bool>, std::uint8_t> classes;
  for (int b = 0; b < 256; ++b) {
    std::vector<bool> sig(sets_.size());
    for (std::size_t i = 0; i < sets_.size(); ++i) sig[i] = sets_[i].test(static_cast<std::size_t>(b));
    auto [it, fresh] = classes.emplace(std::move(sig), static_cast<std::uint8_t>(classes.size()));
    g.byte_class[static_cast<std::size_t>(b)] = it->second;
  }
  g.num_classes = static_cast<int>(classes.size());
  if (has_char_) g.plain_char_pos = g.rules[char_][0];
  for (const Frame& f : frames_) {
    g.string_frames[g.rules.at(f.rule).at(static_cast<std::size_t>(f.alt)) + 1] = {f.rule, f.capacity};
  }
  g.chain_starts.resize(num_chains_);
  for (const LinkMark& l : links_) {
    const std::uint32_t start = g.rules.at(l.rule).at(static_cast<std::size_t>(l.alt));
    std::vector<std::uint32_t>& starts = g.chain_starts.at(l.chain);
    if (starts.size() <= l.level) starts.resize(l.level + 1, 0);
    starts[l.level] = start;
    for (std::uint32_t p = start;; ++p) {
      g.links[p] = {l.chain, l.level, p - start};
      if (g.elems[p].kind == ElemKind::kEnd) break;
    }
  }
  return g;
}

}  // namespace kvshare::detail
