// ECMA-262 regular expressions (JSON Schema's `pattern`, `patternProperties`
// and the `format` grammars) compiled into rules of a JsonGrammar that match
// JSON strings whose decoded content the expression finds (unanchored, as
// the spec says: "a" matches "xay"). Internal to src/grammar.
//
// Supported: literals, '.', classes [...] / [^...] with ranges, the escapes
// \d \D \w \W \s \S \t \n \r \f \v \0 \xHH \uHHHH \u{H...} \cX, \p{...}
// \P{...} (UnicodeProperty) and identity escapes, groups (...), (?:...),
// (?<name>...), alternation, the quantifiers * + ? {n} {n,} {n,m} (lazy or
// not: the same language), the anchors ^ and $ at the start / end of a
// top-level alternative (groups not repeated are spliced into their
// sequence first), lookaheads (?=...) / (?!...) at the start of an
// alternative anchored there and one of a single class before a class
// (json_regex_dfa.cc). Refused (RegexError): other lookaround, backreferences,
// word boundaries, anchors anywhere else, a repetition's lower count above
// 1000 (an upper one is lowered to 1000), other properties.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/json_grammar.h"

namespace kvshare::detail {

struct RegexError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// No string matches (within the length bounds, or the other expressions).
struct RegexEmpty : RegexError {
  using RegexError::RegexError;
};

// Code point ranges [lo, hi], sorted and disjoint.
using CodeRanges = std::vector<std::pair<char32_t, char32_t>>;

struct RegexNode {
  enum Kind { kSet, kSeq, kAlt, kRepeat, kBol, kEol, kNotAhead, kAhead } kind = kSeq;
  CodeRanges set;               // kSet
  std::vector<RegexNode> kids;  // kSeq, kAlt; kRepeat, kNotAhead (?!...), kAhead (?=...): one
  int min = 0, max = 0;         // kRepeat (max < 0: unbounded)
};

// Throws RegexError naming what is not supported or malformed.
RegexNode ParseRegex(std::string_view pattern);

// The code points of the Unicode property `name` of \p{name} (a general
// category, short or long, optionally after "gc=" / "General_Category=";
// ASCII; Any): exact inside ASCII; outside it all of them (`superset`) or
// only those known without Unicode's tables (json_regex_properties.cc).
// Unsorted. Throws RegexError for another name.
CodeRanges UnicodeProperty(std::string_view name, bool superset);

// The length range [lo, hi] (hi < 0: unbounded) of what n matches, in code
// points (json_regex_lengths.cc).
std::pair<long long, long long> Lengths(const RegexNode& n);
// Narrows n's repetitions so that everything it matches has a length in
// [min, max] (max < 0: none), keeping its grammar to about 40000 elements;
// false when no narrowing does (json_regex_lengths.cc says how).
bool FitLengths(RegexNode& n, int min, int max);

// Emits rules for the content of JSON strings (between the quotes) of one
// JsonGrammar. Characters are written raw (UTF-8) except '"' and '\\' (and,
// optionally, '/'), which are escaped, and control characters, written as
// \b \f \n \r \t or \u00XX; \uXXXX escapes of other characters are not used.
class RegexEmitter {
 public:
  explicit RegexEmitter(JsonGrammar& j) : j_(j), b_(j.builder()) {}
  // The string content that `re` finds; with a length bound [min, max]
  // (max < 0: none) when it can be applied exactly (the whole expression a
  // repetition of one class, or the bound implied by the expression);
  // otherwise throws RegexError. Returns a rule of the whole string, quotes
  // included.
  std::uint32_t String(const RegexNode& re, int min, int max);
  // The strings that all of `patterns` find (each as String reads it, and
  // lookaheads at the start of an alternative as well) — or, where
  // `negated` says so, do not find — of [min, max] code points (max < 0:
  // any), through a deterministic automaton (json_regex_dfa.cc); throws
  // RegexError past its size caps. Returns a rule of the whole string,
  // quotes included.
  std::uint32_t Automaton(const std::vector<const RegexNode*>& patterns, int min, int max,
                          const std::vector<bool>& negated = {});
  // The content rule of one character of `set`.
  std::uint32_t Char(const CodeRanges& set);

 private:
  GrammarBuilder::Seq Node(const RegexNode& n);
  JsonGrammar& j_;
  GrammarBuilder& b_;
  std::map<CodeRanges, std::uint32_t> chars_;
  std::size_t budget_ = 200000;  // grammar elements one expression may emit
};

}  // namespace kvshare::detail
