// Unicode property escapes \p{...} / \P{...} of ECMA-262 patterns
// (json_regex.h UnicodeProperty): general categories as a subset and a
// superset of code points, without Unicode's tables. Inside ASCII each set
// is exact; outside it the subset takes nothing and the superset everything,
// so a class written with the subset (or a negated one with the superset's
// complement) holds only characters the category really has (or lacks).
#include <algorithm>
#include <array>
#include <string>

#include "grammar/json_regex.h"

namespace kvshare::detail {
namespace {

constexpr char32_t kMaxCode = 0x10FFFF;

struct Category {
  std::array<std::string_view, 2> names;  // short and long
  CodeRanges ascii;                        // the category inside ASCII
  bool exact_above = false;                // true: nothing of it outside ASCII but `above`
  CodeRanges above;                        // exact_above: its code points >= 0x80
};

const std::array<Category, 13>& Categories() {
  static const std::array<Category, 13> cats = {{
      {{"L", "Letter"}, {{'A', 'Z'}, {'a', 'z'}}},
      {{"Lu", "Uppercase_Letter"}, {{'A', 'Z'}}},
      {{"Ll", "Lowercase_Letter"}, {{'a', 'z'}}},
      {{"N", "Number"}, {{'0', '9'}}},
      {{"Nd", "Decimal_Number"}, {{'0', '9'}}},
      {{"P", "Punctuation"},
       {{'!', '#'}, {'%', '*'}, {',', '/'}, {':', ';'}, {'?', '@'}, {'[', ']'}, {'_', '_'}, {'{', '{'}, {'}', '}'}}},
      {{"S", "Symbol"}, {{'$', '$'}, {'+', '+'}, {'<', '>'}, {'^', '^'}, {'`', '`'}, {'|', '|'}, {'~', '~'}}},
      {{"Z", "Separator"}, {{' ', ' '}}},
      {{"Zs", "Space_Separator"}, {{' ', ' '}}},
      {{"C", "Other"}, {{0, 0x1F}, {0x7F, 0x7F}}},
      {{"Cc", "Control"}, {{0, 0x1F}, {0x7F, 0x7F}}, true, {{0x80, 0x9F}}},
      {{"ASCII", "ASCII"}, {{0, 0x7F}}, true, {}},
      {{"Any", "Any"}, {{0, 0x7F}}, true, {{0x80, kMaxCode}}},
  }};
  return cats;
}

}  // namespace

CodeRanges UnicodeProperty(std::string_view name, bool superset) {
  for (std::string_view prefix : {"General_Category=", "gc="}) {
    if (name.substr(0, prefix.size()) == prefix) name.remove_prefix(prefix.size());
  }
  for (const Category& c : Categories()) {
    if (name != c.names[0] && name != c.names[1]) continue;
    CodeRanges r = c.ascii;
    if (c.exact_above) {
      r.insert(r.end(), c.above.begin(), c.above.end());
    } else if (superset) {
      r.emplace_back(0x80, kMaxCode);
    } else if (name == "C" || name == "Other") {
      r.emplace_back(0x80, 0x9F);  // the C1 controls are Cc
    }
    return r;
  }
  throw RegexError("a Unicode property escape \\p{" + std::string(name) +
                   "} (supported: the categories L, Lu, Ll, N, Nd, P, S, Z, Zs, C, Cc, and ASCII, Any)");
}

}  // namespace kvshare::detail
