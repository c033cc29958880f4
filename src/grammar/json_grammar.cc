#include "grammar/json_grammar.h"

#include <bitset>
#include <limits>
#include <string>

#include "kvshare/common/error.h"

namespace kvshare::detail {

JsonGrammar::JsonGrammar(const JsonGrammarOptions& options, Notation notation) : o_(options), notation_(notation) {
  if (o_.max_whitespace < 0 || o_.max_whitespace > 4096) {
    throw Error("JsonGrammarOptions::max_whitespace must be in [0, 4096], got " + std::to_string(o_.max_whitespace));
  }
  // Gemma's notation is written without spaces (the chat template's calls).
  if (notation_ == Notation::kGemma) o_.max_whitespace = 0;
}

std::shared_ptr<const Grammar> JsonGrammar::Finish(std::uint32_t value) {
  const std::uint32_t top = b_.NewRule();
  b_.Alt(top, Ws() + Seq{GrammarBuilder::Ref(value)});
  return std::make_shared<const Grammar>(b_.Finish(top));
}

std::uint32_t JsonGrammar::UpTo(const Seq& item, int n) {
  if (n < 0) {
    const std::uint32_t r = b_.NewRule();
    b_.Alt(r, item + Seq{GrammarBuilder::Ref(r)});
    b_.Alt(r, {});
    return r;
  }
  std::uint32_t prev = b_.NewRule();
  b_.Alt(prev, {});
  const std::uint32_t chain = b_.NewChain();
  for (int k = 1; k <= n; ++k) {
    const std::uint32_t r = b_.NewRule();
    b_.Alt(r, {});
    b_.Alt(r, item + Seq{GrammarBuilder::Ref(prev)});
    b_.MarkLink(r, 1, chain, static_cast<std::uint32_t>(k));
    prev = r;
  }
  return prev;
}

JsonGrammar::Seq JsonGrammar::Ws() {
  if (o_.max_whitespace == 0) return {};
  if (!ws_) {
    std::bitset<256> w;
    for (unsigned char c : std::string(" \t\n\r")) w.set(c);
    ws_ = UpTo({b_.Set(w)}, o_.max_whitespace);
  }
  return {GrammarBuilder::Ref(*ws_)};
}
JsonGrammar::Seq JsonGrammar::Sep(char c) { return Ws() + Seq{b_.Byte(static_cast<unsigned char>(c))} + Ws(); }

std::uint32_t JsonGrammar::Char() {
  if (char_) return *char_;
  const std::uint32_t c = b_.NewRule();
  const bool gemma = notation_ == Notation::kGemma;
  std::bitset<256> plain, esc, hex, hex_nd, hex_lo;
  for (int x = 0x20; x <= 0x7F; ++x) plain.set(static_cast<std::size_t>(x));
  if (gemma) {
    // Raw text up to the closing <|"|>: no escapes, line breaks as they are.
    plain.reset('<'), plain.set('\t'), plain.set('\n'), plain.set('\r');
  } else {
    plain.reset('"'), plain.reset('\\');
  }
  for (unsigned char x : std::string("\"\\/bfnrt")) esc.set(x);
  for (unsigned char x : std::string("0123456789abcdefABCDEF")) hex.set(x);
  hex_nd = hex, hex_nd.reset('d'), hex_nd.reset('D');
  for (unsigned char x : std::string("01234567")) hex_lo.set(x);
  const auto cont = b_.Range(0x80, 0xBF);
  std::bitset<256> e3;
  for (int x = 0xE1; x <= 0xEF; ++x) e3.set(static_cast<std::size_t>(x));
  e3.reset(0xED);
  b_.Alt(c, {b_.Set(plain)});
  if (!gemma) {
    b_.Alt(c, {b_.Byte('\\'), b_.Set(esc)});
    b_.Alt(c, {b_.Byte('\\'), b_.Byte('u'), b_.Set(hex_nd), b_.Set(hex), b_.Set(hex), b_.Set(hex)});
    b_.Alt(c, {b_.Byte('\\'), b_.Byte('u'), b_.Range('D', 'D'), b_.Set(hex_lo), b_.Set(hex), b_.Set(hex)});
    b_.Alt(c, {b_.Byte('\\'), b_.Byte('u'), b_.Range('d', 'd'), b_.Set(hex_lo), b_.Set(hex), b_.Set(hex)});
  }
  b_.Alt(c, {b_.Range(0xC2, 0xDF), cont});
  b_.Alt(c, {b_.Byte(0xE0), b_.Range(0xA0, 0xBF), cont});
  b_.Alt(c, {b_.Set(e3), cont, cont});
  b_.Alt(c, {b_.Byte(0xED), b_.Range(0x80, 0x9F), cont});
  b_.Alt(c, {b_.Byte(0xF0), b_.Range(0x90, 0xBF), cont, cont});
  b_.Alt(c, {b_.Range(0xF1, 0xF3), cont, cont, cont});
  b_.Alt(c, {b_.Byte(0xF4), b_.Range(0x80, 0x8F), cont, cont});
  char_ = c;
  const std::uint32_t chars = b_.NewRule();
  b_.Alt(chars, {GrammarBuilder::Ref(c), GrammarBuilder::Ref(chars)});
  b_.Alt(chars, {});
  // The mask walk's shortcut for string content knows JSON's plain set
  // only (grammar_mask.cc PlainNext): Gemma strings are walked byte by byte.
  if (!gemma) {
    b_.MarkPlainChar(c);
    b_.MarkStringFrame(chars, 0, std::numeric_limits<std::int32_t>::max());
  }
  chars_ = chars;
  return c;
}

std::uint32_t JsonGrammar::String(int min, int max) {
  const auto key = std::make_pair(min, max);
  if (auto it = strings_.find(key); it != strings_.end()) return it->second;
  const std::uint32_t c = Char();
  const Seq quote = notation_ == Notation::kGemma ? b_.Lit("<|\"|>") : Seq{b_.Byte('"')};
  Seq s = quote;
  for (int i = 0; i < min; ++i) s.push_back(GrammarBuilder::Ref(c));
  if (max < 0) {
    s.push_back(GrammarBuilder::Ref(*chars_));
  } else if (max > min) {
    // UpTo's chain, each link marked for the mask walk: O_k := ε | char O_k-1.
    std::uint32_t prev = b_.NewRule();
    b_.Alt(prev, {});
    const std::uint32_t chain = b_.NewChain();
    for (int k = 1; k <= max - min; ++k) {
      const std::uint32_t r = b_.NewRule();
      b_.Alt(r, {});
      b_.Alt(r, {GrammarBuilder::Ref(c), GrammarBuilder::Ref(prev)});
      if (notation_ == Notation::kJson) b_.MarkStringFrame(r, 1, k);
      b_.MarkLink(r, 1, chain, static_cast<std::uint32_t>(k));
      prev = r;
    }
    s.push_back(GrammarBuilder::Ref(prev));
  }
  s = s + quote;
  const std::uint32_t r = b_.NewRule();
  b_.Alt(r, s);
  return strings_[key] = r;
}

std::uint32_t JsonGrammar::Number(bool integer) {
  std::optional<std::uint32_t>& cached = integer ? integer_ : number_;
  if (cached) return *cached;
  const auto digit = b_.Range('0', '9');
  const std::uint32_t neg = b_.NewRule();
  b_.Alt(neg, {});
  b_.Alt(neg, {b_.Byte('-')});
  const std::uint32_t whole = b_.NewRule();
  b_.Alt(whole, {b_.Byte('0')});
  b_.Alt(whole, {b_.Range('1', '9'), GrammarBuilder::Ref(UpTo({digit}, kIntDigits - 1))});
  Seq s = {GrammarBuilder::Ref(neg), GrammarBuilder::Ref(whole)};
  if (!integer) {
    const std::uint32_t frac = b_.NewRule();
    b_.Alt(frac, {});
    b_.Alt(frac, {b_.Byte('.'), digit, GrammarBuilder::Ref(UpTo({digit}, kFracDigits - 1))});
    // Exponents keep every number a finite double (below 1e16 * 1e292):
    // 1e999 is JSON text, but parsers that refuse overflow (nlohmann, this
    // server's own request parser; Go, serde_json) could not read it back.
    // Negative ones take three digits (underflow reads as 0).
    const auto e = b_.Set(std::bitset<256>().set('e').set('E'));
    const std::uint32_t plus = b_.NewRule();
    b_.Alt(plus, {});
    b_.Alt(plus, {b_.Byte('+')});
    const std::uint32_t exp = b_.NewRule();
    b_.Alt(exp, {});
    b_.Alt(exp, {e, b_.Byte('-'), digit, GrammarBuilder::Ref(UpTo({digit}, 2))});
    b_.Alt(exp, {e, GrammarBuilder::Ref(plus), digit, GrammarBuilder::Ref(UpTo({digit}, 1))});
    b_.Alt(exp, {e, GrammarBuilder::Ref(plus), b_.Range('0', '1'), digit, digit});
    b_.Alt(exp, {e, GrammarBuilder::Ref(plus), b_.Byte('2'), b_.Range('0', '8'), digit});
    b_.Alt(exp, {e, GrammarBuilder::Ref(plus), b_.Byte('2'), b_.Byte('9'), b_.Range('0', '2')});
    s.push_back(GrammarBuilder::Ref(frac));
    s.push_back(GrammarBuilder::Ref(exp));
  }
  const std::uint32_t r = b_.NewRule();
  b_.Alt(r, s);
  return *(cached = r);
}

std::uint32_t JsonGrammar::Literal(std::string_view json) {
  const std::uint32_t r = b_.NewRule();
  b_.Alt(r, b_.Lit(json));
  return r;
}

std::uint32_t JsonGrammar::AnyValue() {
  if (any_) return *any_;
  const std::uint32_t v = b_.NewRule();
  any_ = v;
  const std::uint32_t arr = Array(v, 0, -1);
  b_.Alt(v, {GrammarBuilder::Ref(Map(v))});
  b_.Alt(v, {GrammarBuilder::Ref(arr)});
  b_.Alt(v, {GrammarBuilder::Ref(String(0, -1))});
  b_.Alt(v, {GrammarBuilder::Ref(Number(false))});
  b_.Alt(v, b_.Lit("true"));
  b_.Alt(v, b_.Lit("false"));
  b_.Alt(v, b_.Lit("null"));
  return v;
}

std::uint32_t JsonGrammar::Map(std::uint32_t value) {
  const std::uint32_t r = b_.NewRule();
  std::uint32_t key = 0;
  if (notation_ == Notation::kGemma) {
    // A bare key: what the runtime's ParseGemma4Call reads back as one.
    std::bitset<256> k;
    for (int x = 0x21; x <= 0x7E; ++x) k.set(static_cast<std::size_t>(x));
    for (unsigned char x : std::string("{}[],:<\"")) k.reset(x);
    key = b_.NewRule();
    b_.Alt(key, {b_.Set(k), GrammarBuilder::Ref(UpTo({b_.Set(k)}, -1))});
  } else {
    key = String(0, -1);
  }
  const Seq member = Seq{GrammarBuilder::Ref(key)} + Sep(':') + Seq{GrammarBuilder::Ref(value)};
  const std::uint32_t more = UpTo(Sep(',') + member, -1);
  b_.Alt(r, Seq{b_.Byte('{')} + Ws() + Seq{b_.Byte('}')});
  b_.Alt(r, Seq{b_.Byte('{')} + Ws() + member + Seq{GrammarBuilder::Ref(more)} + Ws() + Seq{b_.Byte('}')});
  return r;
}

std::uint32_t JsonGrammar::Array(std::uint32_t item, int min, int max) {
  const std::uint32_t r = b_.NewRule();
  const Seq open = Seq{b_.Byte('[')} + Ws(), close = Ws() + Seq{b_.Byte(']')};
  if (min == 0) b_.Alt(r, open + Seq{b_.Byte(']')});
  if (max != 0) {
    const Seq next = Sep(',') + Seq{GrammarBuilder::Ref(item)};
    const int first = std::max(min, 1);
    Seq s = open + Seq{GrammarBuilder::Ref(item)};
    for (int i = 1; i < first; ++i) s = s + next;
    if (max < 0) {
      s.push_back(GrammarBuilder::Ref(UpTo(next, -1)));
    } else if (max > first) {
      s.push_back(GrammarBuilder::Ref(UpTo(next, max - first)));
    }
    b_.Alt(r, s + close);
  }
  return r;
}

}  // namespace kvshare::detail
