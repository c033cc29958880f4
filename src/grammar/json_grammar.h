// The building blocks of JSON documents as byte-level grammar rules, for
// the JSON Schema compiler (json_schema.cc). Internal to src/runtime.
// Bounds (kvshare/grammar/grammar.h): whitespace per gap, number digits.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "grammar/grammar_ir.h"
#include "kvshare/grammar/grammar.h"

namespace kvshare::detail {

inline GrammarBuilder::Seq operator+(GrammarBuilder::Seq a, const GrammarBuilder::Seq& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// How values are written. kGemma: Gemma 4's call notation (read back by
// src/runtime/chat/gemma4_calls.cc): strings <|"|>raw text<|"|> (no escapes, no '<' inside, so
// that the closing quote cannot be forged), object keys bare, no whitespace;
// numbers, true, false, null and arrays as in JSON.
enum class Notation { kJson, kGemma };

class JsonGrammar {
 public:
  using Seq = GrammarBuilder::Seq;
  static constexpr int kIntDigits = 16, kFracDigits = 16;  // exponents: Number()

  // Throws kvshare::Error for max_whitespace outside [0, 4096].
  explicit JsonGrammar(const JsonGrammarOptions& options, Notation notation = Notation::kJson);
  Notation notation() const { return notation_; }

  GrammarBuilder& builder() { return b_; }
  // The grammar of whitespace and then rule `value`.
  std::shared_ptr<const Grammar> Finish(std::uint32_t value);

  // Rules (their indices) and sequences; each shared piece is made once.
  // [0, n] repetitions of item (n < 0: any number).
  std::uint32_t UpTo(const Seq& item, int n);
  Seq Ws();         // whitespace of one gap (empty when none is allowed)
  Seq Sep(char c);  // c between two gaps
  // One JSON string character: plain, escaped, or a multi-byte UTF-8
  // character (strict: no overlongs or surrogates). The first alternative
  // is the plain set (GrammarIr::plain_char_pos); it must match
  // grammar_mask.cc's PlainNext.
  std::uint32_t Char();
  std::uint32_t String(int min, int max);  // [min, max] characters (max < 0: any)
  std::uint32_t Number(bool integer);
  std::uint32_t Literal(std::string_view json);  // exactly these bytes
  std::uint32_t AnyValue();                      // any JSON value (recursive)
  // An object with any keys whose values match rule `value`.
  std::uint32_t Map(std::uint32_t value);
  // [min, max] items matching rule `item` (max < 0: unbounded).
  std::uint32_t Array(std::uint32_t item, int min, int max);

 private:
  JsonGrammarOptions o_;
  Notation notation_;
  GrammarBuilder b_;
  std::optional<std::uint32_t> ws_, char_, chars_, any_, integer_, number_;
  std::map<std::pair<int, int>, std::uint32_t> strings_;
};

// Compiles the JSON Schema `schema` (JSON text) into rules of `j` and returns
// the rule of its values (CompileJsonSchema is this and JsonGrammar::Finish);
// in the kGemma notation, enum / const values and property names are written
// in that notation. Throws kvshare::Error as CompileJsonSchema does, and for a
// property name that the notation cannot write (kGemma: one with ':').
std::uint32_t CompileSchemaRule(JsonGrammar& j, std::string_view schema);

}  // namespace kvshare::detail
