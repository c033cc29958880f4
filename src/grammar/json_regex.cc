// ECMA-262 regular expressions as grammar rules over JSON string content
// (json_regex.h): a recursive-descent parser into RegexNode, then one rule
// per node, characters encoded as JSON writes them.
#include "grammar/json_regex.h"

#include <algorithm>
#include <bitset>
#include <string>
#include <tuple>

namespace kvshare::detail {
namespace {

constexpr int kMaxRepeat = 1000;
constexpr char32_t kMaxCode = 0x10FFFF;

CodeRanges Normalize(CodeRanges r) {
  std::sort(r.begin(), r.end());
  CodeRanges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CodeRanges Complement(const CodeRanges& r) {
  CodeRanges out;
  char32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCode) out.emplace_back(next, kMaxCode);
  return out;
}

CodeRanges Digits() { return {{'0', '9'}}; }
CodeRanges Word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
// The class escapes as two sets each: `inner`, what both ECMA-262 and
// Python's re (which the jsonschema package validates `pattern` with) put in
// the class, and `outer`, what either does. A class used as is takes the
// inner set, one that a negated class [^...] complements the outer, so that
// every string written matches in both engines. ECMA's \s has U+FEFF, which
// Python's lacks; Python's has U+001C-U+001F and U+0085; Python's \d and \w
// are Unicode-wide, so outside ASCII \D and \W take nothing.
CodeRanges NonAscii() { return {{0x80, kMaxCode}}; }
CodeRanges Union(CodeRanges a, const CodeRanges& b) {
  a.insert(a.end(), b.begin(), b.end());
  return Normalize(std::move(a));
}
CodeRanges Ascii(const CodeRanges& a) {
  CodeRanges out;
  for (auto [lo, hi] : a) {
    if (lo < 0x80) out.emplace_back(lo, std::min<char32_t>(hi, 0x7F));
  }
  return out;
}
CodeRanges Space();
CodeRanges SpaceInner() {
  return {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
}
CodeRanges SpaceOuter() { return Union(Space(), {{0x1C, 0x1F}, {0x85, 0x85}}); }
CodeRanges Space() {
  return Normalize({{'\t', '\r'},
                    {' ', ' '},
                    {0xA0, 0xA0},
                    {0x1680, 0x1680},
                    {0x2000, 0x200A},
                    {0x2028, 0x2029},
                    {0x202F, 0x202F},
                    {0x205F, 0x205F},
                    {0x3000, 0x3000},
                    {0xFEFF, 0xFEFF}});
}

// UTF-8 text → code points (invalid bytes are taken as Latin-1: a schema is
// parsed by nlohmann, which has checked its UTF-8 already).
std::u32string Decode(std::string_view s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (n == 1 || i + n > s.size()) {
      out += c;
      ++i;
      continue;
    }
    char32_t cp = c & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out += cp;
    i += n;
  }
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(Decode(pattern)) {}

  RegexNode Parse() {
    RegexNode n = Alt(0);
    if (i_ < p_.size()) throw RegexError("unmatched ')'");
    return n;
  }

 private:
  bool More() const { return i_ < p_.size(); }
  char32_t Peek(std::size_t ahead = 0) const { return i_ + ahead < p_.size() ? p_[i_ + ahead] : 0; }

  RegexNode Alt(int depth) {
    if (depth > 64) throw RegexError("groups nested deeper than 64");
    RegexNode alt{RegexNode::kAlt};
    alt.kids.push_back(Seq(depth));
    while (More() && Peek() == '|') {
      ++i_;
      alt.kids.push_back(Seq(depth));
    }
    return alt.kids.size() == 1 ? std::move(alt.kids[0]) : alt;
  }

  RegexNode Seq(int depth) {
    RegexNode seq{RegexNode::kSeq};
    while (More() && Peek() != '|' && Peek() != ')') {
      RegexNode atom = Atom(depth);
      int min = 0, max = 0;
      if (Quantifier(min, max)) {
        if (atom.kind == RegexNode::kBol || atom.kind == RegexNode::kEol || atom.kind == RegexNode::kNotAhead ||
            atom.kind == RegexNode::kAhead) {
          throw RegexError("a quantified anchor or lookahead");
        }
        if (More() && Peek() == '?') ++i_;  // lazy: the same language
        RegexNode rep{RegexNode::kRepeat};
        rep.min = min, rep.max = max;
        rep.kids.push_back(std::move(atom));
        atom = std::move(rep);
      }
      if (atom.kind == RegexNode::kSeq) {
        // A group not repeated is its contents in place: (^a$)|(^b$) is
        // ^a$|^b$, with its anchors at the ends of a top-level alternative.
        for (RegexNode& k : atom.kids) seq.kids.push_back(std::move(k));
        continue;
      }
      seq.kids.push_back(std::move(atom));
    }
    // A lookahead of one class before one character is a class:
    // (?![ab])[a-z] is [c-z], (?=[ab])[a-z] is [ab].
    for (std::size_t k = 0; k + 1 < seq.kids.size(); ++k) {
      RegexNode& look = seq.kids[k];
      const RegexNode* cls = look.kind == RegexNode::kNotAhead || look.kind == RegexNode::kAhead ? &look.kids[0] : nullptr;
      if (cls != nullptr && cls->kind == RegexNode::kSeq && cls->kids.size() == 1) cls = &cls->kids[0];
      if (cls == nullptr || cls->kind != RegexNode::kSet || seq.kids[k + 1].kind != RegexNode::kSet) continue;
      const CodeRanges a = look.kind == RegexNode::kNotAhead ? Complement(cls->set) : cls->set;
      CodeRanges both;
      for (const auto& [lo, hi] : a) {
        for (const auto& [lo2, hi2] : seq.kids[k + 1].set) {
          if (std::max(lo, lo2) <= std::min(hi, hi2)) both.emplace_back(std::max(lo, lo2), std::min(hi, hi2));
        }
      }
      seq.kids[k + 1].set = Normalize(std::move(both));
      seq.kids.erase(seq.kids.begin() + static_cast<std::ptrdiff_t>(k));
    }
    return seq;
  }

  // {n}, {n,}, {n,m} at i_ (not consumed when it is not one: '{' is then a
  // literal, as Annex B reads it).
  bool Braces(int& min, int& max, bool consume) {
    std::size_t k = i_ + 1;
    auto number = [&](int& out) {
      const std::size_t start = k;
      long long v = 0;
      while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9') v = std::min<long long>(v * 10 + (p_[k++] - '0'), 1 << 30);
      out = static_cast<int>(v);
      return k > start;
    };
    int lo = 0, hi = 0;
    if (!number(lo)) return false;
    hi = lo;
    if (k < p_.size() && p_[k] == ',') {
      ++k;
      if (!number(hi)) hi = -1;
    }
    if (k >= p_.size() || p_[k] != '}') return false;
    if (consume) {
      i_ = k + 1;
      if (hi >= 0 && hi < lo) throw RegexError("a repetition {n,m} with m < n");
      if (lo > kMaxRepeat) throw RegexError("a repetition count above 1000");
      // A higher upper count is lowered: a narrower language, as maxLength's.
      min = lo, max = hi > kMaxRepeat ? kMaxRepeat : hi;
    }
    return true;
  }

  bool Quantifier(int& min, int& max) {
    if (!More()) return false;
    switch (Peek()) {
      case '*': ++i_, min = 0, max = -1; return true;
      case '+': ++i_, min = 1, max = -1; return true;
      case '?': ++i_, min = 0, max = 1; return true;
      case '{': return Braces(min, max, true);
      default: return false;
    }
  }

  static RegexNode SetNode(CodeRanges r) {
    RegexNode n{RegexNode::kSet};
    n.set = Normalize(std::move(r));
    return n;
  }

  RegexNode Atom(int depth) {
    const char32_t c = p_[i_++];
    switch (c) {
      case '(': {
        if (Peek() == '?') {
          if (Peek(1) == ':') {
            i_ += 2;
          } else if (Peek(1) == '!' || Peek(1) == '=') {
            // Taken before one class (Seq below) or, by the automata of
            // json_regex_dfa.cc, at the start of an alternative.
            RegexNode look{Peek(1) == '!' ? RegexNode::kNotAhead : RegexNode::kAhead};
            i_ += 2;
            look.kids.push_back(Alt(depth + 1));
            if (!More() || Peek() != ')') throw RegexError("an unterminated group");
            ++i_;
            return look;
          } else if (Peek(1) == '<' && (Peek(2) == '=' || Peek(2) == '!')) {
            throw RegexError("lookbehind (?<=, ?<!)");
          } else if (Peek(1) == '<') {
            while (More() && Peek() != '>') ++i_;
            if (!More()) throw RegexError("an unterminated group name");
            ++i_;
          } else {
            throw RegexError("an unknown group (?" + std::string(1, static_cast<char>(Peek(1))) + ")");
          }
        }
        RegexNode inner = Alt(depth + 1);
        if (!More() || Peek() != ')') throw RegexError("an unterminated group");
        ++i_;
        return inner;
      }
      case ')': throw RegexError("unmatched ')'");
      case '[': return Class();
      case '.': return SetNode(Complement(Normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})));
      case '^': return RegexNode{RegexNode::kBol};
      case '$': return RegexNode{RegexNode::kEol};
      case '*':
      case '+':
      case '?': throw RegexError("nothing to repeat");
      case '{': {
        int a = 0, b = 0;
        --i_;
        if (Braces(a, b, false)) throw RegexError("nothing to repeat");
        ++i_;
        return SetNode({{c, c}});
      }
      case '\\': {
        CodeRanges r;
        Escape(false, r);
        return SetNode(std::move(r));
      }
      default: return SetNode({{c, c}});
    }
  }

  int Hex(int digits) {
    int v = 0;
    for (int k = 0; k < digits; ++k) {
      const char32_t h = Peek();
      int d = h >= '0' && h <= '9'   ? static_cast<int>(h - '0')
              : h >= 'a' && h <= 'f' ? static_cast<int>(h - 'a' + 10)
              : h >= 'A' && h <= 'F' ? static_cast<int>(h - 'A' + 10)
                                     : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
      ++i_;
    }
    return v;
  }

  // After a '\\': the characters it stands for, added to r.
  void Escape(bool in_class, CodeRanges& r) {
    if (!More()) throw RegexError("a trailing '\\'");
    const char32_t c = p_[i_++];
    auto add = [&r](const CodeRanges& s) { r.insert(r.end(), s.begin(), s.end()); };
    switch (c) {
      // Inside [^...] the outer sets, elsewhere the inner ones (above Space()).
      case 'd': return add(negated_ ? Union(Digits(), NonAscii()) : Digits());
      case 'D': return add(negated_ ? Complement(Digits()) : Ascii(Complement(Digits())));
      case 'w': return add(negated_ ? Union(Word(), NonAscii()) : Word());
      case 'W': return add(negated_ ? Complement(Word()) : Ascii(Complement(Word())));
      case 's': return add(negated_ ? SpaceOuter() : SpaceInner());
      case 'S': return add(Complement(negated_ ? SpaceInner() : SpaceOuter()));
      case 't': return add({{'\t', '\t'}});
      case 'n': return add({{'\n', '\n'}});
      case 'r': return add({{'\r', '\r'}});
      case 'f': return add({{'\f', '\f'}});
      case 'v': return add({{'\v', '\v'}});
      case 'b':
        if (in_class) return add({{'\b', '\b'}});
        throw RegexError("a word boundary (\\b)");
      case 'B': throw RegexError("a word boundary (\\B)");
      case 'p':
      case 'P': {
        // The subset where the class takes it as is, the superset where a
        // negated class complements it (UnicodeProperty); \P the reverse.
        if (Peek() != '{') throw RegexError("a \\p or \\P without {name}");
        const std::size_t open = ++i_;
        while (More() && Peek() != '}') ++i_;
        if (!More()) throw RegexError("an unterminated \\p{...}");
        std::string name;
        for (std::size_t k = open; k < i_; ++k) name += static_cast<char>(p_[k] < 0x80 ? p_[k] : '?');
        ++i_;
        const bool outer = negated_ != (c == 'P');
        const CodeRanges set = Normalize(UnicodeProperty(name, outer));
        return add(c == 'P' ? Complement(set) : set);
      }
      case 'k': throw RegexError("a backreference (\\k)");
      case '0':
        if (Peek() >= '0' && Peek() <= '9') throw RegexError("an octal escape");
        return add({{0, 0}});
      case 'c':
        if ((Peek() >= 'a' && Peek() <= 'z') || (Peek() >= 'A' && Peek() <= 'Z')) {
          const char32_t x = p_[i_++] % 32;
          return add({{x, x}});
        }
        return add({{'\\', '\\'}, {'c', 'c'}});
      case 'x': {
        const int v = Hex(2);
        if (v < 0) throw RegexError("a malformed \\x escape");
        return add({{static_cast<char32_t>(v), static_cast<char32_t>(v)}});
      }
      case 'u': {
        int v = -1;
        if (Peek() == '{') {
          ++i_;
          v = 0;
          while (More() && Peek() != '}') {
            const int d = Hex(1);
            if (d < 0 || v > 0x10FFFF) throw RegexError("a malformed \\u{...} escape");
            v = v * 16 + d;
          }
          if (!More() || v > 0x10FFFF) throw RegexError("a malformed \\u{...} escape");
          ++i_;
        } else {
          v = Hex(4);
          if (v < 0) throw RegexError("a malformed \\u escape");
          // A surrogate pair written as two escapes is one character.
          if (v >= 0xD800 && v <= 0xDBFF && Peek() == '\\' && Peek(1) == 'u') {
            const std::size_t save = i_;
            i_ += 2;
            const int lo = Hex(4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
              v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              i_ = save;
            }
          }
        }
        return add({{static_cast<char32_t>(v), static_cast<char32_t>(v)}});
      }
      default:
        if (c >= '1' && c <= '9') throw RegexError("a backreference (\\" + std::string(1, static_cast<char>(c)) + ")");
        return add({{c, c}});  // identity escape
    }
  }

  RegexNode Class() {
    bool negate = false;
    if (Peek() == '^') negate = true, ++i_;
    negated_ = negate;
    CodeRanges r;
    bool first = true;
    while (true) {
      if (!More()) throw RegexError("an unterminated class [...]");
      if (Peek() == ']' && !first) break;
      if (Peek() == ']') break;  // [] matches nothing, [^] anything
      first = false;
      CodeRanges lo_set;
      char32_t lo = 0;
      bool single = ClassAtom(lo_set, lo);
      if (single && Peek() == '-' && Peek(1) != ']' && Peek(1) != 0) {
        ++i_;
        CodeRanges hi_set;
        char32_t hi = 0;
        if (!ClassAtom(hi_set, hi)) throw RegexError("a class range with a class (\\d, \\w, \\s) as an end");
        if (hi < lo) throw RegexError("a class range out of order");
        r.emplace_back(lo, hi);
      } else {
        r.insert(r.end(), lo_set.begin(), lo_set.end());
      }
    }
    ++i_;
    negated_ = false;
    r = Normalize(std::move(r));
    return SetNode(negate ? Complement(r) : r);
  }

  // One class member: true with its character in c (and in set), false for
  // an escape that stands for several (\d, \w, \s and their complements).
  bool ClassAtom(CodeRanges& set, char32_t& c) {
    if (Peek() == '\\') {
      ++i_;
      Escape(true, set);
      if (set.size() == 1 && set[0].first == set[0].second) {
        c = set[0].first;
        return true;
      }
      return false;
    }
    c = p_[i_++];
    set.emplace_back(c, c);
    return true;
  }

  std::u32string p_;
  std::size_t i_ = 0;
  bool negated_ = false;  // inside [^...] (Escape picks the outer sets)
};

void Encode(char32_t cp, unsigned char* out, int& n) {
  if (cp < 0x80) {
    out[0] = static_cast<unsigned char>(cp), n = 1;
  } else if (cp < 0x800) {
    out[0] = static_cast<unsigned char>(0xC0 | (cp >> 6)), out[1] = static_cast<unsigned char>(0x80 | (cp & 0x3F)),
    n = 2;
  } else if (cp < 0x10000) {
    out[0] = static_cast<unsigned char>(0xE0 | (cp >> 12));
    out[1] = static_cast<unsigned char>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<unsigned char>(0x80 | (cp & 0x3F)), n = 3;
  } else {
    out[0] = static_cast<unsigned char>(0xF0 | (cp >> 18));
    out[1] = static_cast<unsigned char>(0x80 | ((cp >> 12) & 0x3F));
    out[2] = static_cast<unsigned char>(0x80 | ((cp >> 6) & 0x3F));
    out[3] = static_cast<unsigned char>(0x80 | (cp & 0x3F)), n = 4;
  }
}

// The UTF-8 byte-range sequences of the code points [lo, hi] (all of one
// encoded length after the first split), as in the regex crates' utf8
// ranges: split until each byte position is one range.
void Utf8Ranges(char32_t lo, char32_t hi, std::vector<std::vector<std::pair<unsigned char, unsigned char>>>& out) {
  for (char32_t m : {char32_t{0x7F}, char32_t{0x7FF}, char32_t{0xFFFF}}) {
    if (lo <= m && hi > m) {
      Utf8Ranges(lo, m, out);
      Utf8Ranges(m + 1, hi, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Ranges(lo, lo | m, out);
        Utf8Ranges((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Ranges(lo, (hi & ~m) - 1, out);
        Utf8Ranges(hi & ~m, hi, out);
        return;
      }
    }
  }
  unsigned char a[4], b[4];
  int n = 0, nb = 0;
  Encode(lo, a, n);
  Encode(hi, b, nb);
  std::vector<std::pair<unsigned char, unsigned char>> seq;
  for (int k = 0; k < n; ++k) seq.emplace_back(a[k], b[k]);
  out.push_back(std::move(seq));
}

}  // namespace

RegexNode ParseRegex(std::string_view pattern) { return Parser(pattern).Parse(); }

std::uint32_t RegexEmitter::Char(const CodeRanges& set) {
  if (auto it = chars_.find(set); it != chars_.end()) return it->second;
  const std::uint32_t r = b_.NewRule();
  std::bitset<256> plain;
  bool any = false;
  auto lit = [&](std::string_view s) { b_.Alt(r, b_.Lit(s)), any = true; };
  static const char* kHex = "0123456789abcdef";
  const bool gemma = j_.notation() == Notation::kGemma;
  for (const auto& [lo, hi] : set) {
    for (char32_t c = lo; c <= std::min<char32_t>(hi, 0x7F); ++c) {
      if (gemma) {  // raw text up to the closing <|"|>: no escapes, no '<'
        if (c != '<' && (c >= 0x20 || c == '\t' || c == '\n' || c == '\r')) plain.set(c);
      } else if (c == '"') {
        lit("\\\"");
      } else if (c == '\\') {
        lit("\\\\");
      } else if (c >= 0x20) {
        plain.set(c);
        if (c == '/') lit("\\/");
      } else {
        const char* short_esc = c == '\b'   ? "\\b"
                                : c == '\f' ? "\\f"
                                : c == '\n' ? "\\n"
                                : c == '\r' ? "\\r"
                                : c == '\t' ? "\\t"
                                            : nullptr;
        if (short_esc != nullptr) lit(short_esc);
        // \u00XX, hex digits in either case.
        std::bitset<256> d1, d2;
        d1.set(kHex[c >> 4]);
        d2.set(kHex[c & 15]);
        if ((c & 15) >= 10) d2.set(kHex[c & 15] - 'a' + 'A');
        b_.Alt(r, b_.Lit("\\u00") + GrammarBuilder::Seq{b_.Set(d1), b_.Set(d2)});
        any = true;
      }
    }
    // Above ASCII: raw UTF-8, surrogates left out (JSON text cannot hold them).
    for (auto [a, z] : {std::pair<char32_t, char32_t>{std::max<char32_t>(lo, 0x80), std::min<char32_t>(hi, 0xD7FF)},
                        std::pair<char32_t, char32_t>{std::max<char32_t>(lo, 0xE000), hi}}) {
      if (a > z) continue;
      std::vector<std::vector<std::pair<unsigned char, unsigned char>>> seqs;
      Utf8Ranges(a, z, seqs);
      for (const auto& seq : seqs) {
        GrammarBuilder::Seq s;
        for (const auto& [x, y] : seq) s.push_back(b_.Range(x, y));
        b_.Alt(r, s);
        any = true;
      }
    }
  }
  if (plain.any()) b_.Alt(r, {b_.Set(plain)}), any = true;
  if (!any) throw RegexError("a class that matches no character a JSON string can hold");
  return chars_[set] = r;
}

GrammarBuilder::Seq RegexEmitter::Node(const RegexNode& n) {
  if (budget_-- == 0) throw RegexError("an expression too large to compile (repetitions of repetitions)");
  switch (n.kind) {
    case RegexNode::kSet: return {GrammarBuilder::Ref(Char(n.set))};
    case RegexNode::kSeq: {
      GrammarBuilder::Seq s;
      for (const RegexNode& k : n.kids) {
        if (k.kind == RegexNode::kBol || k.kind == RegexNode::kEol) throw RegexError("an anchor (^, $) inside a group");
        s = s + Node(k);
      }
      return s;
    }
    case RegexNode::kAlt: {
      const std::uint32_t r = b_.NewRule();
      for (const RegexNode& k : n.kids) b_.Alt(r, Node(k));
      return {GrammarBuilder::Ref(r)};
    }
    case RegexNode::kRepeat: {
      const GrammarBuilder::Seq item = Node(n.kids[0]);
      if (budget_ < item.size() * static_cast<std::size_t>(std::max(n.min, n.max) + 1)) {
        throw RegexError("an expression too large to compile (repetitions of repetitions)");
      }
      budget_ -= item.size() * static_cast<std::size_t>(std::max(n.min, n.max) + 1);
      GrammarBuilder::Seq s;
      for (int i = 0; i < n.min; ++i) s = s + item;
      if (n.max < 0 || n.max > n.min) s.push_back(GrammarBuilder::Ref(j_.UpTo(item, n.max < 0 ? -1 : n.max - n.min)));
      return s;
    }
    default: throw RegexError("an anchor (^, $) inside a group");
  }
}

namespace {

bool HasLookahead(const RegexNode& n) {
  if (n.kind == RegexNode::kNotAhead || n.kind == RegexNode::kAhead) return true;
  return std::any_of(n.kids.begin(), n.kids.end(), HasLookahead);
}

// body within the length bounds [min, max] (max < 0: none): unchanged when
// all it matches fits; the whole body one class repeated: the bounds
// intersected exactly; otherwise narrowed (FitLengths). False when no
// string of the bounds is left (*unfitted: because FitLengths found none).
bool Bound(RegexNode& body, int min, int max, bool* unfitted) {
  if (min <= 0 && max < 0) return true;
  auto [lo, hi] = Lengths(body);
  if (lo >= min && (max < 0 || (hi >= 0 && hi <= max))) return true;
  RegexNode* one = body.kids.size() == 1 ? &body.kids[0] : nullptr;
  if (one != nullptr && one->kind == RegexNode::kSet) {
    RegexNode rep{RegexNode::kRepeat};
    rep.min = rep.max = 1;
    rep.kids.push_back(*one);
    *one = rep;
  }
  if (one == nullptr || one->kind != RegexNode::kRepeat || one->kids[0].kind != RegexNode::kSet) {
    const bool fitted = FitLengths(body, min, max);
    *unfitted = *unfitted || !fitted;
    return fitted;
  }
  one->min = std::max(one->min, min);
  if (max >= 0) one->max = one->max < 0 ? max : std::min(one->max, max);
  return one->max < 0 || one->min <= one->max;
}

}  // namespace

std::uint32_t RegexEmitter::String(const RegexNode& re, int min, int max) {
  // Lookaheads say what the rest must (not) start with: an intersection
  // (or a difference) of languages, which the automata take.
  if (HasLookahead(re)) return Automaton({&re}, min, max);
  // Top-level alternatives, each with its anchors; an unanchored side may
  // hold any characters.
  std::vector<const RegexNode*> alts;
  if (re.kind == RegexNode::kAlt) {
    for (const RegexNode& k : re.kids) alts.push_back(&k);
  } else {
    alts.push_back(&re);
  }
  RegexNode any_char{RegexNode::kSet};
  any_char.set = {{0, kMaxCode}};
  RegexNode any{RegexNode::kRepeat};
  any.min = 0, any.max = -1;
  any.kids.push_back(any_char);
  const std::uint32_t r = b_.NewRule();
  int n = 0;
  bool unfitted = false;
  // (anchored at the start, at the end, the rest)
  std::vector<std::tuple<bool, bool, std::vector<RegexNode>>> pieces;
  for (const RegexNode* a : alts) {
    std::vector<RegexNode> kids = a->kind == RegexNode::kSeq ? a->kids : std::vector<RegexNode>{*a};
    // ^ after ^ is the same ^, $ after $ the same $ (spliced groups).
    const bool bol = !kids.empty() && kids.front().kind == RegexNode::kBol;
    while (!kids.empty() && kids.front().kind == RegexNode::kBol) kids.erase(kids.begin());
    const bool eol = !kids.empty() && kids.back().kind == RegexNode::kEol;
    while (!kids.empty() && kids.back().kind == RegexNode::kEol) kids.pop_back();
    pieces.emplace_back(bol, eol, std::move(kids));
  }
  for (const auto& piece : pieces) {
    // Named, not a structured binding: clang 14 (the fuzz build) cannot capture those.
    const bool bol = std::get<0>(piece), eol = std::get<1>(piece);
    const std::vector<RegexNode>& kids = std::get<2>(piece);
    auto padded = [&](bool front, bool back) {
      RegexNode body{RegexNode::kSeq};
      if (front) body.kids.push_back(any);
      body.kids.insert(body.kids.end(), kids.begin(), kids.end());
      if (back) body.kids.push_back(any);
      // ".*" twice in a row (an empty unanchored alternative) is ".*" once.
      for (std::size_t k = 1; k < body.kids.size();) {
        const bool twice = body.kids[k].kind == RegexNode::kRepeat && body.kids[k - 1].kind == RegexNode::kRepeat &&
                           body.kids[k].max < 0 && body.kids[k - 1].max < 0 && body.kids[k].min == 0 &&
                           body.kids[k - 1].min == 0 && body.kids[k].kids[0].set == any_char.set &&
                           body.kids[k - 1].kids[0].set == any_char.set;
        if (twice) {
          body.kids.erase(body.kids.begin() + static_cast<std::ptrdiff_t>(k));
        } else {
          ++k;
        }
      }
      return body;
    };
    RegexNode body = padded(!bol, !eol);
    const auto [lo, hi] = Lengths(body);
    if ((min > 0 || max >= 0) && !(lo >= min && (max < 0 || (hi >= 0 && hi <= max))) && (!bol || !eol)) {
      // Under a length bound the padding's ".*" would be cut into bounded
      // repetitions beside the expression's own, whose positions the matcher
      // tracks all at once (masks of up to a second per token): first try
      // the expression anchored, a narrower language (a string the
      // expression matches whole also contains a match).
      RegexNode anchored = padded(false, false);
      bool ignored = false;
      if (!anchored.kids.empty() && Bound(anchored, min, max, &ignored)) body = std::move(anchored);
    }
    // No strings of the bounds (or too many elements): this alternative matches none.
    if (!Bound(body, min, max, &unfitted)) continue;
    const GrammarBuilder::Seq quote =
        j_.notation() == Notation::kGemma ? b_.Lit("<|\"|>") : GrammarBuilder::Seq{b_.Byte('"')};
    b_.Alt(r, quote + Node(body) + quote);
    ++n;
  }
  if (n == 0 && unfitted) {
    throw RegexError("a pattern whose strings could not be fitted to its length bound (minLength / maxLength)");
  }
  if (n == 0) throw RegexEmpty("a pattern that no string of the length bounds matches");
  return r;
}

}  // namespace kvshare::detail
