// What tests/tools/schema_corpus.py (real-world schemas) made the JSON Schema
// compiler take or fix: pattern next to a length bound (a narrower language
// within the bound), class escapes that match in both ECMA-262 and Python's
// re (what the jsonschema package validates with), years 0001-9999 in dates.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "grammar_byte_vocab.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"

namespace kvshare {
namespace {

using testing::Takes;

TEST(JsonSchemaCorpus, PatternWithALengthBoundKeepsBoth) {
  // Two repetitions: no single class to bound, so each repetition is cut to
  // fit maxLength 8 and raised to reach minLength 3.
  const std::string s = R"({"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "minLength": 3, "maxLength": 8})";
  EXPECT_TRUE(Takes(s, R"("a-b")"));
  EXPECT_TRUE(Takes(s, R"("ab-cd")"));
  EXPECT_FALSE(Takes(s, R"("ab")"));         // under minLength
  EXPECT_FALSE(Takes(s, R"("abcd-efgh")"));  // over maxLength
  EXPECT_FALSE(Takes(s, R"("a-B")"));        // outside the pattern
  // Unanchored under a length bound: written anchored (the free sides'
  // bounded ".*" would leave the matcher a position per character).
  const std::string u = R"({"type": "string", "pattern": "x\\d", "maxLength": 4})";
  EXPECT_TRUE(Takes(u, R"("x1")"));
  EXPECT_FALSE(Takes(u, R"("ax1b")"));
  // Unless anchored no string fits: then the sides are bounded.
  const std::string p = R"({"type": "string", "pattern": "x\\d", "minLength": 3, "maxLength": 4})";
  EXPECT_TRUE(Takes(p, R"("ax1b")"));
  EXPECT_FALSE(Takes(p, R"("aax1b")"));
  // A fixed part longer than maxLength matches nothing.
  EXPECT_THROW(CompileJsonSchema(R"({"type": "string", "pattern": "^abcd[a-z]*$", "maxLength": 3})"), Error);
}

TEST(JsonSchemaCorpus, ClassEscapesMatchInBothEngines) {
  // U+FEFF is ECMA-262 white space, not Python's; U+001C and U+0085 are
  // Python's, not ECMA's; U+0663 is a Python \d, not an ECMA one.
  EXPECT_TRUE(Takes(R"({"type": "string", "pattern": "^\\s$"})", "\" \""));
  EXPECT_FALSE(Takes(R"({"type": "string", "pattern": "^\\s$"})", "\"\xEF\xBB\xBF\""));
  EXPECT_FALSE(Takes(R"({"type": "string", "pattern": "^\\S$"})", R"("\u001c")"));
  EXPECT_FALSE(Takes(R"({"type": "string", "pattern": "^[^\\s]$"})", "\"\xC2\x85\""));
  EXPECT_TRUE(Takes(R"({"type": "string", "pattern": "^\\S$"})", R"("a")"));
  EXPECT_FALSE(Takes(R"({"type": "string", "pattern": "^\\D$"})", "\"\xD9\xA3\""));
  EXPECT_FALSE(Takes(R"({"type": "string", "pattern": "^[^\\d]$"})", "\"\xD9\xA3\""));
  EXPECT_TRUE(Takes(R"({"type": "string", "pattern": "^\\D$"})", R"("x")"));
  EXPECT_FALSE(Takes(R"({"type": "string", "pattern": "^\\W$"})", "\"\xC3\xA9\""));
}

TEST(JsonSchemaCorpus, UnicodePropertiesKeepToWhatTheCategorySurelyHas) {
  // Outside ASCII a class takes none of a category and a negated class
  // leaves all of it out: no table of Unicode is needed to stay inside.
  const std::string letters = R"({"type": "string", "pattern": "^\\p{L}+$"})";
  EXPECT_TRUE(Takes(letters, R"("abZ")"));
  EXPECT_FALSE(Takes(letters, "\"\xC3\xA9\""));  // é: a letter, but not taken
  EXPECT_FALSE(Takes(letters, R"("a1")"));
  const std::string not_letters = R"({"type": "string", "pattern": "^[^\\p{L}]+$"})";
  EXPECT_TRUE(Takes(not_letters, R"("1 -")"));
  EXPECT_FALSE(Takes(not_letters, "\"\xC3\xA9\""));
  EXPECT_FALSE(Takes(not_letters, R"("a")"));
  const std::string printable = R"({"type": "string", "pattern": "^\\P{C}*$"})";
  EXPECT_TRUE(Takes(printable, R"("a b~")"));
  EXPECT_FALSE(Takes(printable, R"("\u0001")"));
  EXPECT_FALSE(Takes(printable, "\"\xC2\xAD\""));  // U+00AD soft hyphen: Cf
  EXPECT_TRUE(Takes(R"({"type": "string", "pattern": "^\\p{gc=Zs}\\p{ASCII}\\p{Cc}$"})", R"(" x\n")"));
  try {
    CompileJsonSchema(R"({"type": "string", "pattern": "\\p{Greek}"})");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("keyword 'pattern' at #/pattern: a Unicode property escape \\p{Greek}"),
              std::string::npos)
        << e.what();
  }
}

TEST(JsonSchemaCorpus, NegativeLookaheadOfALiteralBeforeOneClass) {
  // CloudFormation's tag keys: any key of the class but those starting "aws:".
  const std::string key = R"({"type": "string", "pattern": "^(?!aws:)[a-z:]{1,6}$"})";
  for (const char* ok : {"a", "aw", "aws", "awsx", "ab:", "x", "awx:", "aws", "zaws:"}) {
    EXPECT_TRUE(Takes(key, "\"" + std::string(ok) + "\"")) << ok;
  }
  for (const char* bad : {"aws:", "aws:x", "", "abcdefg", "A"}) {
    EXPECT_FALSE(Takes(key, "\"" + std::string(bad) + "\"")) << bad;
  }
  // Unbounded, and the literal's next character outside the class.
  const std::string any = R"({"type": "string", "pattern": "^(?!a-)[a-z]*$"})";
  EXPECT_TRUE(Takes(any, R"("")"));
  EXPECT_TRUE(Takes(any, R"("abc")"));
  EXPECT_TRUE(Takes(any, R"("a")"));
  // Before more than one class, or unanchored at the end (automata,
  // json_regex_dfa.cc).
  const std::string two = R"({"type": "string", "pattern": "^(?!ab)[a-z]+x"})";
  EXPECT_TRUE(Takes(two, R"("aax")"));
  EXPECT_TRUE(Takes(two, R"("bx--")"));
  EXPECT_FALSE(Takes(two, R"("abx")"));
  EXPECT_FALSE(Takes(two, R"("aa")"));
  // (?![ab])[a-z] is one class, wherever it stands.
  const std::string cls = R"({"type": "string", "pattern": "^((?![ab])[a-z])+$"})";
  EXPECT_TRUE(Takes(cls, R"("cz")"));
  EXPECT_FALSE(Takes(cls, R"("ca")"));
  // After a character read, or unanchored, it is refused.
  for (const char* p : {"^a(?!b)[a-z]+$", "(?!ab)[a-z]", "^a(?=b)"}) {
    try {
      CompileJsonSchema(std::string(R"({"type": "string", "pattern": ")") + p + "\"}");
      ADD_FAILURE() << p << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("keyword 'pattern' at #/pattern: lookaround"), std::string::npos) << e.what();
    }
  }
}

TEST(JsonSchemaCorpus, LookaheadsAtTheStartAsAutomata) {
  // CloudFormation: names not all digits, a UUID other than the nil one,
  // a class and a length in a positive lookahead, a literal after ^ twice.
  const std::string name = R"({"type": "string", "pattern": "^(?!^[0-9]+$)([a-zA-Z0-9-_]+)$", "maxLength": 5})";
  EXPECT_TRUE(Takes(name, R"("a1")"));
  EXPECT_TRUE(Takes(name, R"("12-")"));
  EXPECT_FALSE(Takes(name, R"("123")"));
  EXPECT_FALSE(Takes(name, R"("")"));
  EXPECT_FALSE(Takes(name, R"("abcdef")"));
  // Python's re (the jsonschema package) reads $ also before a final line
  // feed: "12\n" is all digits to it, so a negated $ is read that widely.
  const std::string nl = R"({"type": "string", "pattern": "^(?![0-9]+$)[0-9\n]+$"})";
  EXPECT_FALSE(Takes(nl, R"("12\n")"));
  EXPECT_TRUE(Takes(nl, R"("1\n2")"));
  EXPECT_FALSE(Takes(R"({"type": "string", "not": {"pattern": "^a$"}})", R"("a\n")"));
  const std::string uuid = R"({"type": "string", "pattern":
      "^(?!00000000-0000-0000-0000-000000000000)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"})";
  EXPECT_TRUE(Takes(uuid, R"("00000000-0000-0000-0000-000000000001")"));
  EXPECT_FALSE(Takes(uuid, R"("00000000-0000-0000-0000-000000000000")"));
  const std::string ahead = R"({"type": "string", "pattern": "^(?=^[a-z0-9-]+$).{3,5}$"})";
  EXPECT_TRUE(Takes(ahead, R"("ab-1")"));
  EXPECT_FALSE(Takes(ahead, R"("aB-1")"));
  EXPECT_FALSE(Takes(ahead, R"("ab")"));
  const std::string coll = R"j({"type": "string", "pattern": "^(^(?!(system\\x2e)))(^[_a-zA-Z0-9])([^$]*)$"})j";
  EXPECT_TRUE(Takes(coll, R"("system")"));
  EXPECT_TRUE(Takes(coll, R"("systems.x")"));
  EXPECT_FALSE(Takes(coll, R"("system.x")"));
  EXPECT_FALSE(Takes(coll, R"(".x")"));
  // format and pattern together: the intersection.
  const std::string both = R"({"type": "string", "format": "date", "pattern": "^2024-"})";
  EXPECT_TRUE(Takes(both, R"("2024-02-29")"));
  EXPECT_FALSE(Takes(both, R"("2023-02-28")"));
  EXPECT_FALSE(Takes(both, R"("2024-02-30")"));
  EXPECT_FALSE(Takes(both, R"("2024-")"));
  EXPECT_THROW(CompileJsonSchema(R"({"type": "string", "format": "date", "pattern": "^x"})"), Error);
}

TEST(JsonSchemaCorpus, RepetitionCountsAbove1000AreLoweredOrRefused) {
  const std::string s = R"({"type": "string", "pattern": "^a{2,1500}$"})";
  EXPECT_TRUE(Takes(s, "\"" + std::string(1000, 'a') + "\""));
  EXPECT_FALSE(Takes(s, "\"" + std::string(1001, 'a') + "\""));
  EXPECT_FALSE(Takes(s, R"("a")"));
  EXPECT_THROW(CompileJsonSchema(R"({"type": "string", "pattern": "^a{1001}$"})"), Error);
}

TEST(JsonSchemaCorpus, OneOfTellingBranchesApartByRequiredAlone) {
  // CloudFormation's "A or B": each branch stops writing the other's
  // required property, so no output holds both.
  const std::string s = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
      "c": {"type": "integer"}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]})";
  EXPECT_TRUE(Takes(s, R"({"a": 1})"));
  EXPECT_TRUE(Takes(s, R"({"a": 1, "c": 2})"));
  EXPECT_TRUE(Takes(s, R"({"b": 1, "c": 2})"));
  EXPECT_FALSE(Takes(s, R"({"a": 1, "b": 2})"));
  EXPECT_FALSE(Takes(s, R"({"c": 2})"));
  // One branch's required properties all required by the other: an output
  // of the wider one matches both, so it stays refused.
  EXPECT_THROW(CompileJsonSchema(R"({"type": "object", "properties": {"a": {}, "b": {}},
      "oneOf": [{"required": ["a"]}, {"required": ["a", "b"]}]})"),
               Error);
}

TEST(JsonSchemaCorpus, DatesHaveNoYearZero) {
  EXPECT_FALSE(Takes(R"({"type": "string", "format": "date"})", R"("0000-01-01")"));
  EXPECT_FALSE(Takes(R"({"type": "string", "format": "date"})", R"("0000-02-29")"));
  EXPECT_TRUE(Takes(R"({"type": "string", "format": "date"})", R"("0001-01-01")"));
  EXPECT_TRUE(Takes(R"({"type": "string", "format": "date"})", R"("0400-02-29")"));
  EXPECT_TRUE(Takes(R"({"type": "string", "format": "date-time"})", R"("2024-02-29T23:59:60Z")"));
}

TEST(JsonSchemaCorpus, UpperBoundsAbove4096AreLowered) {
  const std::string s = R"({"type": "string", "maxLength": 400000})";
  EXPECT_TRUE(Takes(s, "\"" + std::string(4096, 'a') + "\""));
  EXPECT_FALSE(Takes(s, "\"" + std::string(4097, 'a') + "\""));
  EXPECT_TRUE(Takes(R"({"type": "array", "maxItems": 18446744073709551615})", "[1]"));
  EXPECT_THROW(CompileJsonSchema(R"({"type": "string", "minLength": 5000})"), Error);
}

TEST(JsonSchemaCorpus, OneOfWithBranchesThatExcludeEachOther) {
  // A discriminator (pydantic's tagged unions): kind is required in both.
  const std::string d = R"({"oneOf": [{"$ref": "#/$defs/C"}, {"$ref": "#/$defs/S"}], "discriminator": {},
      "$defs": {"C": {"type": "object", "properties": {"kind": {"const": "c"}, "r": {"type": "number"}},
                      "required": ["kind"]},
                "S": {"type": "object", "properties": {"kind": {"enum": ["s", "q"]}, "r": {"type": "number"}},
                      "required": ["kind"]}}})";
  EXPECT_TRUE(Takes(d, R"({"kind": "c", "r": 1})"));
  EXPECT_TRUE(Takes(d, R"({"kind": "q"})"));
  // Required properties that the other branch never writes.
  const std::string r = R"({"oneOf": [{"properties": {"a": {}}, "required": ["a"]},
                                      {"properties": {"b": {}}, "required": ["b"]}]})";
  EXPECT_TRUE(Takes(r, R"({"a": 1})"));
  EXPECT_FALSE(Takes(r, R"({"a": 1, "b": 2})"));
  EXPECT_NO_THROW(CompileJsonSchema(R"({"oneOf": [{"type": "string"}, {"type": "object"}]})"));
  // Overlapping: {"a": 1} is valid against both; "s" too (a schema without
  // 'type' takes strings).
  for (const char* s : {R"({"oneOf": [{"type": "string"}, {"properties": {"x": {}}}]})",
                        R"({"oneOf": [{"properties": {"a": {}}}, {"properties": {"a": {}, "b": {}}}]})",
                        R"({"oneOf": [{"properties": {"a": {}}, "required": ["a"]}, {"required": ["a"]}]})",
                        R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})",
                        R"({"oneOf": [{"enum": [1, 2]}, {"enum": [2, 3]}]})"}) {
    EXPECT_THROW(CompileJsonSchema(s), Error) << s;
  }
}

TEST(JsonSchemaCorpus, UniqueItems) {
  // Items of a few values: each at most once, in the schema's order.
  const std::string e =
      R"({"type": "array", "uniqueItems": true, "minItems": 1, "items": {"$ref": "#/$defs/c"},
          "$defs": {"c": {"enum": ["red", "green", "blue", "red"]}}})";
  EXPECT_TRUE(Takes(e, R"(["red", "blue"])"));
  EXPECT_TRUE(Takes(e, R"(["red", "green", "blue"])"));
  EXPECT_FALSE(Takes(e, R"(["red", "red"])"));
  EXPECT_FALSE(Takes(e, R"(["blue", "red"])"));  // another order: narrower than the spec
  EXPECT_FALSE(Takes(e, R"([])"));
  const std::string b = R"({"type": "array", "uniqueItems": true, "items": {"type": "boolean"}})";
  EXPECT_TRUE(Takes(b, R"([false, true])"));
  EXPECT_FALSE(Takes(b, R"([true, true])"));
  // Other items: at most one, when minItems allows it.
  const std::string s = R"({"uniqueItems": true, "items": {"type": "string"}})";
  EXPECT_TRUE(Takes(s, R"(["a"])"));
  EXPECT_TRUE(Takes(s, R"([])"));
  EXPECT_FALSE(Takes(s, R"(["a", "b"])"));
  EXPECT_FALSE(Takes(s, R"("a")"));  // uniqueItems implies an array
  EXPECT_THROW(CompileJsonSchema(R"({"type": "array", "uniqueItems": true, "minItems": 2})"), Error);
  // enum values are checked against it too.
  EXPECT_FALSE(Takes(R"({"enum": [[1, 1], [2]], "uniqueItems": true})", "[1, 1]"));
  EXPECT_TRUE(Takes(R"({"enum": [[1, 1], [2]], "uniqueItems": true})", "[2]"));
}

}  // namespace
}  // namespace kvshare
