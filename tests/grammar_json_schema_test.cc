// JSON Schema → grammar (kvshare/grammar/grammar.h): what compiles and what is
// refused; the matcher on byte strings (valid documents live at every prefix,
// invalid ones dead at their first bad byte); the trie-indexed token mask
// against a scan of every token on random hand-made vocabularies; and the
// mask never shutting out a valid continuation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar_byte_vocab.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"

namespace kvshare {
namespace {

using testing::ByteVocab;

GrammarMatcher Matcher(const std::string& schema, JsonGrammarOptions o = {}) {
  return GrammarMatcher(CompileJsonSchema(schema, o), ByteVocab(), {0});
}

// The number of bytes of `doc` the grammar takes one by one before refusing
// one (doc.size(): all).
std::size_t LiveBytes(GrammarMatcher& m, const std::string& doc) {
  for (std::size_t i = 0; i < doc.size(); ++i) {
    if (!m.AcceptBytes(doc.substr(i, 1))) return i;
  }
  return doc.size();
}

struct Case {
  std::string schema;
  std::vector<std::string> valid;
  // Invalid documents, each with the index of its first bad byte.
  std::vector<std::pair<std::string, std::size_t>> invalid;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
           "required": ["name", "age"]})",
       {R"({"name": "Ann", "age": 31})", R"({"name":"","age":-0})", "{\n  \"name\": \"\\u00e9\\n\",\n  \"age\": 7\n}"},
       {{R"({"age": 31, "name": "Ann"})", 2},
        {R"({"name": "Ann"})", 14},
        {R"({"name": "Ann", "age": 01})", 24},
        {R"({"name": "Ann", "age": 1.5})", 24},
        {R"({"name": "A)"
         "\x01",
         11}}},
      {R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "number"}}})",
       {"{}", R"({"b": null})", R"({"a": true, "c": -1.5e+10})", R"({"a":false,"b":null,"c":0.25})"},
       {{R"({"b": null, "a": true})", 13}, {R"({, "a": true})", 1}, {R"({"a": true,})", 11}, {R"({"c": 1.})", 8}}},
      {R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})",
       {"[1, 2]", "[1,2,3]"},
       {{"[1]", 2}, {"[1, 2, 3, 4]", 8}, {"[]", 1}}},
      {R"({"enum": ["red", "green", 3, null]})", {R"("red")", R"("green")", "3", "null"}, {{R"("blue")", 1}, {"4", 0}}},
      {R"({"const": {"x": [1, "é"]}})", {R"({"x":[1,"é"]})"}, {{R"({"x": [1, "é"]})", 5}}},
      {R"({"type": "string", "minLength": 2, "maxLength": 3})",
       {R"("ab")", R"("abc")", R"("é€")", R"("\n\t")"},
       {{R"("a")", 2}, {R"("abcd")", 4}, {"\"\xC3\x28\"", 2}, {"\"\xED\xA0\x80\"", 2}, {R"("\ud800")", 4}}},
      {R"({"type": ["string", "null"]})", {R"("x")", "null"}, {{"1", 0}}},
      {R"({"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]}]})",
       {"12", R"({"k": 1})"},
       {{R"({"k": 2})", 6}, {"1.5", 1}}},
      {R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
            "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}},
          "$ref": "#/$defs/node"})",
       {R"({"v": 1, "next": {"v": 2, "next": null}})"},
       {{R"({"v": 1, "next": {"v": 2}})", 24}}},
      {R"({"type": "object", "additionalProperties": {"type": "integer"}})",
       {"{}", R"({"a": 1, "b": 2})"},
       {{R"({"a": "x"})", 6}}},
      {"{}", {R"([1, {"a": [true, null]}, "s"])", "-0.5"}, {{"[1,]", 3}, {"nul", 3}}},
      {R"({"type": "string", "pattern": "^[a-c]+\\d{2}$"})",
       {R"("ab12")", R"("c00")"},
       {{R"("ab1x")", 4}, {R"("d12")", 1}}},
      {R"({"type": "string", "pattern": "b"})", {R"("abc")", R"("b")"}, {{R"("ac")", 3}}},
      // Unanchored under a length bound: written anchored (a narrower
      // language), unless no string of the bounds is left ("\\d" with
      // minLength 3: then its free sides are bounded, here to one character).
      {R"({"type": "string", "pattern": "\\w+", "maxLength": 4})",
       {R"("ab_1")", R"("x")"},
       {{R"("a b")", 2}, {R"("abcde")", 5}, {R"("")", 1}}},
      {R"({"type": "string", "pattern": "\\d", "minLength": 3, "maxLength": 4})",
       {R"("x1y")", R"("a2b")"},
       {{R"("xy")", 2}, {R"("1234")", 4}}},
      {R"({"type": "string", "format": "date"})",
       {R"("2024-02-29")", R"("2023-12-31")"},
       {{R"("2023-02-29")", 10}, {R"("2023-13-01")", 7}}},
      {R"({"type": "integer", "minimum": -5, "exclusiveMaximum": 120})",
       {"-5", "0", "119", "7"},
       {{"-6", 1}, {"120", 2}, {"-0", 1}, {"1000", 3}}},
      {R"({"type": "number", "minimum": 0, "maximum": 1})",
       {"0", "0.25", "1", "1.000"},
       {{"1.5", 2}, {"-0.1", 0}, {"2", 0}}},
      {R"({"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.01})", {"0.01", "3.5"}, {{"0.001", 3}}},
      {R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                     {"properties": {"b": {"type": "string", "maxLength": 1}}, "required": ["b"]}]})",
       {R"({"a": 1, "b": "x"})"},
       {{R"({"a": 1})", 7}, {R"({"a": 1, "b": "xy"})", 16}}},
      {R"({"type": "object", "properties": {"k": {"type": "string"}}, "anyOf": [{"required": ["k"]}]})",
       {R"({"k": "v"})"},
       {{"{}", 1}}},
      {R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false})",
       {R"([1, "a"])", "[1]", "[]"},
       {{R"(["a"])", 1}, {R"([1, "a", 2])", 7}}},
  };
  return cases;
}

TEST(JsonSchema, ValidDocumentsAreLiveAtEveryPrefixAndComplete) {
  for (const Case& c : Cases()) {
    for (const std::string& doc : c.valid) {
      GrammarMatcher m = Matcher(c.schema);
      EXPECT_EQ(LiveBytes(m, doc), doc.size()) << c.schema << "\n" << doc;
      EXPECT_TRUE(m.CanEnd()) << c.schema << "\n" << doc;
    }
  }
}

TEST(JsonSchema, InvalidDocumentsDieAtTheirFirstBadByte) {
  for (const Case& c : Cases()) {
    for (const auto& [doc, bad] : c.invalid) {
      GrammarMatcher m = Matcher(c.schema);
      const std::size_t live = LiveBytes(m, doc);
      if (bad < doc.size()) {
        EXPECT_EQ(live, bad) << c.schema << "\n" << doc;
      } else {
        EXPECT_EQ(live, doc.size()) << c.schema << "\n" << doc;
        EXPECT_FALSE(m.CanEnd()) << c.schema << "\n" << doc;
      }
    }
  }
}

TEST(JsonSchema, IncompleteDocumentsCannotEnd) {
  GrammarMatcher m = Matcher(R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})");
  ASSERT_TRUE(m.AcceptBytes(R"({"a": "x")"));
  EXPECT_FALSE(m.CanEnd());
  EXPECT_FALSE(m.AcceptToken(0));
  ASSERT_TRUE(m.AcceptBytes("}"));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_TRUE(m.AcceptToken(0));
  EXPECT_TRUE(m.Terminated());
  EXPECT_FALSE(m.AcceptBytes(" "));
}

TEST(JsonSchema, WhitespaceAndDigitsAreBounded) {
  JsonGrammarOptions o;
  o.max_whitespace = 3;
  GrammarMatcher ws = Matcher(R"({"type": "array"})", o);
  EXPECT_EQ(LiveBytes(ws, "[    1]"), 4u);
  GrammarMatcher compact = Matcher(R"({"type": "array"})", {.max_whitespace = 0});
  EXPECT_EQ(LiveBytes(compact, "[1, 2]"), 3u);
  GrammarMatcher digits = Matcher(R"({"type": "integer"})");
  EXPECT_EQ(LiveBytes(digits, "12345678901234567"), 16u);
  GrammarMatcher exp = Matcher(R"({"type": "number"})");
  EXPECT_EQ(LiveBytes(exp, "1e1234"), 5u);
  // Exponents stop short of a double's overflow (1e999 was written, and
  // refused when sent back); negative ones underflow to 0 and stay.
  for (const char* ok : {"9999999999999999.9e292", "1E+292", "1e099", "-1e-999", "2e29", "0.5e-1"}) {
    GrammarMatcher m = Matcher(R"({"type": "number"})");
    EXPECT_EQ(LiveBytes(m, ok), std::string(ok).size()) << ok;
    EXPECT_TRUE(m.CanEnd()) << ok;
  }
  for (const auto& [bad, live] :
       {std::pair<const char*, std::size_t>{"1e293", 4}, {"1e300", 4}, {"1e+999", 5}, {"1e2920", 5}}) {
    GrammarMatcher m = Matcher(R"({"type": "number"})");
    EXPECT_EQ(LiveBytes(m, bad), live) << bad;
  }
}

TEST(JsonSchema, AnyJsonObject) {
  GrammarMatcher m(AnyJsonObjectGrammar(), ByteVocab(), {0});
  const std::string doc = R"({"a": [1, {"b": null}], "c": "d"})";
  EXPECT_EQ(LiveBytes(m, doc), doc.size());
  EXPECT_TRUE(m.CanEnd());
  GrammarMatcher arr(AnyJsonObjectGrammar(), ByteVocab(), {0});
  EXPECT_EQ(LiveBytes(arr, "[1]"), 0u);
}

TEST(JsonSchema, AcceptsTheSupportedSubset) {
  for (
      const char* s : {
          R"(true)",
          R"({"type": "object", "title": "T", "description": "d", "properties": {}, "additionalProperties": false})",
          R"({"type": "array", "items": false})",
          R"({"type": "array", "uniqueItems": false})",
          R"({"oneOf": [{"type": "string"}, {"type": "integer"}, {"$ref": "#/$defs/o"}], "$defs": {"o": {"type": "object"}}})",
          R"({"allOf": [{"type": "string"}]})",
          R"({"definitions": {"a~b": {"type": "null"}}, "$ref": "#/definitions/a~0b"})",
          R"({"type": "object", "properties": {"self": {"$ref": "#"}}})",
          R"({"type": ["integer", "number"], "enum": [1, 2.5]})",
          R"({"id": "x", "self": {}, "readonly": true, "x-kubernetes-group-version-kind": [], "_format": "q",
              "type": "string", "format": "no-such-format", "$comment": "annotations and unknown keywords"})",
          R"({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}})",
          R"({"type": "array", "items": [{}], "additionalItems": false})",
          R"({"patternProperties": {"^x-": {"type": "string"}}, "additionalProperties": false})",
          R"({"type": "object", "oneOf": [{"required": ["a"]}], "properties": {"a": {}}})",
      }) {
    EXPECT_NO_THROW(CompileJsonSchema(s)) << s;
  }
}

TEST(JsonSchema, RefusesWhatItDoesNotSupportNamingIt) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"x({"type": "string", "pattern": "(?=a)"})x", "keyword 'pattern' at #/pattern: lookaround"},
      {R"x({"type": "string", "pattern": "(a)\\1"})x", "keyword 'pattern' at #/pattern: a backreference"},
      {R"({"properties": {"n": {"type": "number", "minimum": 0.5}}})",
       "keyword 'minimum' at #/properties/n/minimum: a fractional bound"},
      {R"({"type": "integer", "multipleOf": 3})", "keyword 'multipleOf' at #/multipleOf"},
      {R"({"properties": {"tags": {"type": "array", "minItems": 2, "uniqueItems": true}}})",
       "keyword 'uniqueItems' at #/properties/tags/uniqueItems"},
      {R"({"if": {"minLength": 2}, "then": {}})", "keyword 'if' at #/if"},
      {R"({"not": {"minimum": 1}})", "keyword 'not' at #/not"},
      {R"({"contains": {"type": "null"}})", "keyword 'contains' at #/contains"},
      {R"x({"allOf": [{"pattern": "a"}, {"pattern": "(?=b)"}]})x", "keyword 'pattern' at #/pattern: lookaround"},
      {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "keyword 'oneOf' at #/oneOf"},
      {R"({"oneOf": [{"type": "string"}, {}]})", "keyword 'oneOf'"},
      {R"({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}})", "left recursion"},
      {R"({"$ref": "#/$defs/missing"})", "does not resolve"},
      {R"({"$ref": "http://x/y"})", "keyword '$ref' at #/$ref: only local"},
      {R"({"$ref": "#", "type": "object"})", "refer back to themselves"},
      {R"({"type": "strin"})", "'type' must be one of"},
      {R"({"type": "string", "maxLength": -1})", "'maxLength' must be a non-negative integer"},
      {R"({"type": "string", "minLength": 100000})", "above the supported 4096"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "minItems 3 > maxItems 2"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": false})",
       "required property 'b' is not allowed"},
      {R"({"type": "string", "enum": [1, 2]})", "no value of 'enum'"},
      {R"(false)", "matches nothing"},
      {R"({"type": )", "not valid JSON"},
      {R"({"enum": [1e400]})", "not valid JSON"},  // nlohmann's out_of_range, not parse_error (chat_fuzz)
  };
  for (const auto& [schema, want] : bad) {
    try {
      CompileJsonSchema(schema);
      ADD_FAILURE() << "compiled: " << schema;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << schema << "\n" << e.what();
    }
  }
}

// Deep texts and long $ref chains are refused before the compiler's
// recursion (and nlohmann's dump of an enum value) could overflow the stack:
// 200000 levels used to crash; the limits still take realistic depths. An
// object of 200000 members took minutes (ordered_json's linear key lookup).
TEST(JsonSchema, RefusesDeepNestingInsteadOfOverflowingTheStack) {
  auto nested_items = [](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += R"({"type": "array", "items": )";
    s += "{}";
    for (int i = 0; i < n; ++i) s += "}";
    return s;
  };
  auto ref_chain = [](int n) {
    std::string s = R"({"$ref": "#/$defs/d0", "$defs": {)";
    for (int i = 0; i < n; ++i)
      s += "\"d" + std::to_string(i) + "\": {\"$ref\": \"#/$defs/d" + std::to_string(i + 1) + "\"}, ";
    return s + "\"d" + std::to_string(n) + "\": {\"type\": \"null\"}}}";
  };
  const std::string deep_enum = R"({"enum": [)" + std::string(200000, '[') + std::string(200000, ']') + "]}";
  EXPECT_NO_THROW(CompileJsonSchema(nested_items(100)));
  EXPECT_NO_THROW(CompileJsonSchema(ref_chain(100)));
  std::string wide = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 200000; ++i) wide += "\"p" + std::to_string(i) + "\": {}, ";
  wide += R"("last": {}}})";
  for (const auto& [schema, want] :
       std::vector<std::pair<std::string, std::string>>{{nested_items(200000), "nested deeper than 256 levels"},
                                                        {nested_items(129), "schemas nested deeper than 128 levels"},
                                                        {ref_chain(1000), "schemas nested deeper than 128 levels"},
                                                        {wide, "an object of more than 1024 members"},
                                                        {deep_enum, "nested deeper than 256 levels"}}) {
    try {
      CompileJsonSchema(schema);
      ADD_FAILURE() << "compiled: " << schema.substr(0, 80);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// A random vocabulary of JSON-ish pieces: punctuation, keywords cut at
// random, digits, words, spaces, UTF-8 characters and their single bytes
// (so that characters can be split over tokens), '\\' escapes; token 0 is
// the end token (no bytes), token 1 is a control token (no bytes).
std::vector<std::string> RandomVocab(std::mt19937& rng, int n) {
  const std::vector<std::string> atoms = {
      "{",     "}",    "[",    "]",    ":",    ",",    "\"",   " ",    "\n",    "\t",   "-",       ".",    "e",
      "E",     "+",    "0",    "1",    "2",    "7",    "9",    "true", "false", "null", "name",    "age",  "a",
      "b",     "k",    "v",    "next", "x",    "é",    "€",    "😀",    "\\",    "\\n",  "\\u00e9", "\\\"", "red",
      "green", "\xC3", "\xA9", "\xE2", "\x82", "\xAC", "\xF0", "\x9F", "\x98",  "\x80"};
  std::vector<std::string> v = {"", ""};
  for (const std::string& a : atoms) v.push_back(a);
  for (char c = 0x20; c < 0x7F; ++c) {  // so that every document can be tokenized
    if (std::find(v.begin(), v.end(), std::string(1, c)) == v.end()) v.push_back(std::string(1, c));
  }
  std::uniform_int_distribution<int> pick(0, static_cast<int>(atoms.size()) - 1), len(1, 4);
  while (static_cast<int>(v.size()) < n) {
    std::string t;
    for (int k = len(rng); k > 0; --k) t += atoms[static_cast<std::size_t>(pick(rng))];
    v.push_back(t);
  }
  return v;
}

// Longest-match tokenization of doc with vocab (every byte of doc is a token).
std::vector<std::int32_t> Tokenize(const std::vector<std::string>& vocab, const std::string& doc) {
  std::vector<std::int32_t> out;
  for (std::size_t at = 0; at < doc.size();) {
    std::int32_t best = -1;
    for (std::size_t id = 2; id < vocab.size(); ++id) {
      const std::string& t = vocab[id];
      if (doc.compare(at, t.size(), t) == 0 && (best < 0 || t.size() > vocab[static_cast<std::size_t>(best)].size())) {
        best = static_cast<std::int32_t>(id);
      }
    }
    if (best < 0) return {};
    out.push_back(best);
    at += vocab[static_cast<std::size_t>(best)].size();
  }
  return out;
}

bool Bit(const std::vector<std::uint64_t>& mask, std::int32_t id) {
  return (mask[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1;
}

TEST(GrammarMask, TrieWalkEqualsAScanOfEveryTokenAndKeepsValidContinuations) {
  std::mt19937 rng(7);
  int checked = 0;
  for (int round = 0; round < 6; ++round) {
    const std::vector<std::string> vocab = RandomVocab(rng, 400 + 150 * round);
    auto trie = std::make_shared<const TokenTrie>(vocab);
    for (const Case& c : Cases()) {
      auto grammar = CompileJsonSchema(c.schema);
      for (const std::string& doc : c.valid) {
        const std::vector<std::int32_t> tokens = Tokenize(vocab, doc);
        ASSERT_FALSE(tokens.empty()) << doc;
        GrammarMatcher m(grammar, trie, {0});
        std::vector<std::uint64_t> mask((vocab.size() + 63) / 64);
        for (std::size_t step = 0; step <= tokens.size(); ++step) {
          m.FillNextTokenMask(mask);
          for (std::size_t id = 0; id < vocab.size(); ++id) {
            const auto t = static_cast<std::int32_t>(id);
            const bool want = id == 0 ? m.CanEnd() : !vocab[id].empty() && m.CanAcceptBytes(vocab[id]);
            ASSERT_EQ(Bit(mask, t), want) << c.schema << "\n"
                                          << doc << "\nstep " << step << " token '" << vocab[id] << "'";
          }
          ++checked;
          if (step == tokens.size()) {
            EXPECT_TRUE(Bit(mask, 0)) << doc;
          } else {
            ASSERT_TRUE(Bit(mask, tokens[step])) << doc << " step " << step;
            ASSERT_TRUE(m.AcceptToken(tokens[step]));
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
}

// Masks are reused across the states of a bounded repetition far from its
// bound (GrammarAutomaton::MaskKey): on random walks deep into long bounded
// strings, patterns and arrays, every mask still equals a scan of every
// token, near the bounds too.
TEST(GrammarMask, ReusedMasksOfBoundedRepetitionsEqualAScan) {
  std::mt19937 rng(11);
  const std::vector<std::string> schemas = {
      R"({"type": "string", "maxLength": 70})",
      R"({"type": "string", "minLength": 30, "maxLength": 60})",
      R"({"type": "string", "pattern": "^[a-z é]{0,90}$"})",
      R"({"type": "string", "pattern": "^[a-z]+-[a-z0-9]+$", "maxLength": 100})",
      R"({"type": "string", "pattern": "\\w", "maxLength": 64})",
      R"({"type": "array", "items": {"type": "integer", "maximum": 9}, "maxItems": 45})",
      R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 50},
          "b": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 30}}})",
  };
  int checked = 0, deep = 0;
  for (int round = 0; round < 3; ++round) {
    const std::vector<std::string> vocab = RandomVocab(rng, 300 + 200 * round);
    auto trie = std::make_shared<const TokenTrie>(vocab);
    for (const std::string& schema : schemas) {
      for (int walk = 0; walk < 3; ++walk) {
        GrammarMatcher m(CompileJsonSchema(schema), trie, {0});
        std::vector<std::uint64_t> mask((vocab.size() + 63) / 64);
        std::string text;
        for (int step = 0; step < 90; ++step) {
          m.FillNextTokenMask(mask);
          std::vector<std::int32_t> allowed;
          for (std::size_t id = 0; id < vocab.size(); ++id) {
            const auto t = static_cast<std::int32_t>(id);
            const bool want = id == 0 ? m.CanEnd() : !vocab[id].empty() && m.CanAcceptBytes(vocab[id]);
            ASSERT_EQ(Bit(mask, t), want) << schema << "\nafter '" << text << "' token '" << vocab[id] << "'";
            if (want && id != 0) allowed.push_back(t);
          }
          ++checked;
          if (allowed.empty()) break;
          // Mostly short tokens, so that walks reach deep into the repetitions.
          std::int32_t pick = allowed[rng() % allowed.size()];
          for (int tries = 0; tries < 4 && vocab[static_cast<std::size_t>(pick)].size() > 2; ++tries) {
            pick = allowed[rng() % allowed.size()];
          }
          ASSERT_TRUE(m.AcceptToken(pick));
          text += vocab[static_cast<std::size_t>(pick)];
        }
        deep += text.size() > 40;
      }
    }
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(deep, 10) << "walks that went past a horizon's worth of bytes";
}

TEST(GrammarMask, CompleteDocumentAllowsOnlyTheEndToken) {
  const std::vector<std::string> vocab = {"", "{", "}", " ", "{}", "\"", "a"};
  GrammarMatcher m(AnyJsonObjectGrammar(), std::make_shared<const TokenTrie>(vocab), {0});
  std::vector<std::uint64_t> mask(1);
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], 0b11010u);  // "{", " ", "{}"
  ASSERT_TRUE(m.AcceptToken(4));
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], 1u);
  std::vector<float> logits(vocab.size(), 1.0f);
  m.MaskLogits(logits);
  EXPECT_EQ(logits[0], 1.0f);
  for (std::size_t i = 1; i < logits.size(); ++i) EXPECT_TRUE(std::isinf(logits[i]) && logits[i] < 0) << i;
}

TEST(GrammarMask, CharactersSplitOverTokensInsideStrings) {
  // "é" = C3 A9, "€" = E2 82 AC, as byte tokens only.
  const std::vector<std::string> vocab = {"", "\"", "\xC3", "\xA9", "\xE2", "\x82", "\xAC", "x"};
  GrammarMatcher m(CompileJsonSchema(R"({"type": "string", "maxLength": 2})"), std::make_shared<const TokenTrie>(vocab),
                   {0});
  std::vector<std::uint64_t> mask(1);
  for (std::int32_t t : {1, 2, 3, 4, 5}) {
    m.FillNextTokenMask(mask);
    ASSERT_TRUE(Bit(mask, t)) << t;
    ASSERT_TRUE(m.AcceptToken(t));
  }
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], (1u << 3) | (1u << 5) | (1u << 6));  // E2 82 needs a continuation byte: A9, 82 or AC
  ASSERT_TRUE(m.AcceptToken(6));
  m.FillNextTokenMask(mask);
  EXPECT_EQ(mask[0], 1u << 1);  // two characters: only the closing quote
}

TEST(GrammarMask, RejectsBadArguments) {
  auto trie = std::make_shared<const TokenTrie>(std::vector<std::string>{"", "a"});
  EXPECT_THROW(GrammarMatcher(nullptr, trie, {}), Error);
  EXPECT_THROW(GrammarMatcher(AnyJsonObjectGrammar(), trie, {2}), Error);
  GrammarMatcher m(AnyJsonObjectGrammar(), trie, {0});
  std::vector<std::uint64_t> mask(2);
  EXPECT_THROW(m.FillNextTokenMask(mask), Error);
  EXPECT_THROW(m.AcceptToken(5), Error);
}

}  // namespace
}  // namespace kvshare
