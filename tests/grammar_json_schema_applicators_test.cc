// The JSON Schema compiler's applicators that real-world schemas (tests/tools/
// schema_corpus.py) use and that compile exactly only in some forms:
// unevaluatedProperties next to allOf / $ref, if / then / else on a
// discriminator, oneOf whose branches a transformation makes disjoint,
// propertyNames next to patternProperties, anchors inside groups. Each
// form taken is checked on documents in and out of the schema; each form
// refused names the keyword and its JSON pointer.
#include <gtest/gtest.h>

#include <string>

#include "grammar_byte_vocab.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"

namespace kvshare {
namespace {

using testing::ByteVocab;

// Whether the grammar of `schema` takes `doc` whole and may end after it.
bool Takes(const std::string& schema, const std::string& doc) {
  GrammarMatcher m(CompileJsonSchema(schema), ByteVocab(), {0});
  return m.AcceptBytes(doc) && m.CanEnd();
}

// The error CompileJsonSchema throws for `schema` ("" when none).
std::string Refusal(const std::string& schema) {
  try {
    CompileJsonSchema(schema);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchemaApplicators, UnevaluatedPropertiesOverAllOfAndRef) {
  // The names allOf's schemas and the $ref's target declare are evaluated;
  // any other is not written.
  const std::string s = R"({"$defs": {"base": {"type": "object", "properties": {"a": {"type": "integer"}}}},
      "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"b": {"type": "string"}}}],
      "unevaluatedProperties": false})";
  EXPECT_TRUE(Takes(s, R"({"a": 1, "b": "x"})"));
  EXPECT_TRUE(Takes(s, R"({"b": "x"})"));
  EXPECT_FALSE(Takes(s, R"({"a": 1, "c": 2})"));
  EXPECT_FALSE(Takes(s, R"({"a": "x"})"));
  // A schema: the value of the names left over.
  const std::string m = R"({"$ref": "#/$defs/x", "$defs": {"x": {"patternProperties": {"^x-": {"type": "integer"}}}},
      "unevaluatedProperties": {"type": "boolean"}})";
  EXPECT_TRUE(Takes(m, R"({"x-a": 1})"));
  EXPECT_FALSE(Takes(m, R"({"x-a": true})"));
  // anyOf of required-only branches evaluates no property.
  const std::string r = R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "anyOf": [{"required": ["a"]}, {"required": ["b"]}], "unevaluatedProperties": false})";
  EXPECT_TRUE(Takes(r, R"({"a": 1})"));
  EXPECT_FALSE(Takes(r, R"({})"));
  // Branches that declare properties decide which count: refused.
  EXPECT_NE(Refusal(R"({"properties": {"a": {}}, "anyOf": [{"properties": {"b": {}}}, {"required": ["a"]}],
      "unevaluatedProperties": false})")
                .find("keyword 'unevaluatedProperties' at #/unevaluatedProperties"),
            std::string::npos);
  // Inside allOf it would count the other schemas' properties: refused.
  EXPECT_NE(Refusal(R"({"properties": {"a": {}}, "allOf": [{"properties": {"b": {}},
      "unevaluatedProperties": false}]})")
                .find("keyword 'unevaluatedProperties' at #/allOf/0"),
            std::string::npos);
}

TEST(JsonSchemaApplicators, PropertyNamesLengthsNextToPatternProperties) {
  const std::string s = R"({"type": "object", "additionalProperties": false,
      "patternProperties": {"^[a-z]+$": {"type": "integer"}}, "propertyNames": {"minLength": 2, "maxLength": 3}})";
  EXPECT_TRUE(Takes(s, R"({"ab": 1, "abc": 2})"));
  EXPECT_FALSE(Takes(s, R"({"a": 1})"));
  EXPECT_FALSE(Takes(s, R"({"abcd": 1})"));
  EXPECT_FALSE(Takes(s, R"({"AB": 1})"));
  EXPECT_NE(Refusal(R"({"patternProperties": {"^a": {}}, "propertyNames": {"pattern": "b$"}})")
                .find("keyword 'propertyNames' at #/propertyNames"),
            std::string::npos);
}

TEST(JsonSchemaApplicators, AnchorsInsideGroupsAtTheEnds) {
  // CloudFormation writes (^a$)|(^b$) and ^(^x$)|(^y$)$.
  const std::string s = R"j({"type": "string", "pattern": "(^[a-z]$)|(^[0-9][a-z]*[0-9]$)"})j";
  EXPECT_TRUE(Takes(s, R"("a")"));
  EXPECT_TRUE(Takes(s, R"("1ab2")"));
  EXPECT_FALSE(Takes(s, R"("ab")"));
  EXPECT_FALSE(Takes(s, R"("1a")"));
  const std::string t = R"j({"type": "string", "pattern": "^(^[a-z]+$)|(^arn:[0-9]{2}$)$"})j";
  EXPECT_TRUE(Takes(t, R"("abc")"));
  EXPECT_TRUE(Takes(t, R"("arn:12")"));
  EXPECT_FALSE(Takes(t, R"("arn:1")"));
  EXPECT_FALSE(Takes(t, R"("a1")"));
  // An anchor with something before it inside its alternative stays refused.
  EXPECT_NE(Refusal(R"j({"type": "string", "pattern": "^a(^b)"})j").find("keyword 'pattern' at #/pattern"),
            std::string::npos);
  EXPECT_NE(Refusal(R"j({"type": "string", "pattern": "^(a$|b)c"})j").find("keyword 'pattern' at #/pattern"),
            std::string::npos);
}

}  // namespace
}  // namespace kvshare
