// The JSON Schema compiler's applicators that real-world schemas (tests/tools/
// schema_corpus.py) use and that compile exactly only in some forms:
// unevaluatedProperties next to allOf / $ref, if / then / else on a
// discriminator, not of what can be negated, oneOf whose branches a transformation makes disjoint,
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

using testing::Takes;

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

TEST(JsonSchemaApplicators, IfThenElseOnADiscriminator) {
  // github-issue-forms: one if per kind, the kind required outside.
  const std::string s = R"({"type": "object", "properties": {"k": {"enum": ["a", "b", "c"]}, "x": {}, "y": {}},
      "required": ["k"], "allOf": [
        {"if": {"properties": {"k": {"const": "a"}}}, "then": {"required": ["x"]}},
        {"if": {"properties": {"k": {"const": "b"}}}, "then": {"required": ["y"]}, "else": {"properties": {"y": false}}}]})";
  EXPECT_TRUE(Takes(s, R"({"k": "a", "x": 1})"));
  EXPECT_TRUE(Takes(s, R"({"k": "b", "y": 1})"));
  EXPECT_TRUE(Takes(s, R"({"k": "c"})"));
  EXPECT_TRUE(Takes(s, R"({"k": "c", "x": 1})"));
  EXPECT_FALSE(Takes(s, R"({"k": "a"})"));
  EXPECT_FALSE(Takes(s, R"({"k": "b", "x": 1})"));
  EXPECT_FALSE(Takes(s, R"({"k": "c", "y": 1})"));
  EXPECT_FALSE(Takes(s, R"({"k": "a", "x": 1, "y": 2})"));
  // Not required: an absent discriminator satisfies `if`.
  const std::string o = R"({"type": "object", "properties": {"d": {"type": "boolean"}, "c": {}},
      "if": {"properties": {"d": {"const": true}}}, "then": {}, "else": {"required": ["c"]}})";
  EXPECT_TRUE(Takes(o, R"({"d": true})"));
  EXPECT_TRUE(Takes(o, R"({})"));
  EXPECT_TRUE(Takes(o, R"({"d": false, "c": 1})"));
  EXPECT_FALSE(Takes(o, R"({"d": false})"));
  // Strings outside the set: any string but the listed ones.
  const std::string t = R"({"type": "object", "properties": {"k": {"type": "string"}, "x": {}}, "required": ["k"],
      "if": {"properties": {"k": {"enum": ["a.b", "c"]}}}, "then": {"required": ["x"]}, "else": {"properties": {"x": false}}})";
  EXPECT_TRUE(Takes(t, R"({"k": "a.b", "x": 1})"));
  EXPECT_TRUE(Takes(t, R"({"k": "axb"})"));
  EXPECT_FALSE(Takes(t, R"({"k": "axb", "x": 1})"));
  EXPECT_FALSE(Takes(t, R"({"k": "c"})"));
  // An `if` of keywords only (annotations) holds for every value.
  EXPECT_TRUE(Takes(R"({"if": {"title": "x"}, "then": {"type": "integer"}})", "1"));
  EXPECT_FALSE(Takes(R"({"if": {"title": "x"}, "then": {"type": "integer"}})", R"("a")"));
  // Anything else is refused with its pointer.
  for (const char* bad : {R"({"properties": {"a": {"if": {"minLength": 2}, "then": {"maxLength": 3}}}})",
                          R"({"properties": {"a": {"if": {"properties": {"n": {"const": 1}}}, "then": {}}}})"}) {
    EXPECT_NE(Refusal(bad).find("keyword 'if' at #/properties/a/if"), std::string::npos) << bad;
  }
}

TEST(JsonSchemaApplicators, OneOfMadeDisjoint) {
  // github-workflows' steps: each kind's key, with dependencies on one of
  // them (dropped with it from the branches that do not require it).
  const std::string steps = R"({"type": "object", "additionalProperties": false,
      "dependencies": {"shell": ["run"]},
      "properties": {"uses": {"type": "string"}, "run": {"type": "string"}, "shell": {"type": "string"}},
      "oneOf": [{"required": ["uses"]}, {"required": ["run"]}]})";
  EXPECT_TRUE(Takes(steps, R"({"uses": "x"})"));
  EXPECT_TRUE(Takes(steps, R"({"run": "x", "shell": "sh"})"));
  EXPECT_FALSE(Takes(steps, R"({"uses": "x", "run": "y"})"));
  EXPECT_FALSE(Takes(steps, R"({"uses": "x", "shell": "sh"})"));
  // OpenAPI's callback or reference: a map whose values are objects, or
  // {"$ref": string}.
  const std::string cb = R"({"oneOf": [
      {"type": "object", "additionalProperties": false, "patternProperties": {"^": {"type": "object"}}},
      {"type": "object", "required": ["$ref"], "properties": {"$ref": {"type": "string"}}, "additionalProperties": false}]})";
  EXPECT_TRUE(Takes(cb, R"({"$ref": "#/x"})"));
  EXPECT_TRUE(Takes(cb, R"({"a": {}})"));
  EXPECT_TRUE(Takes(cb, R"({"$ref": {}})"));  // only the map's: valid
  // Closed objects of optional properties (buildkite's notifications): {}
  // would match all of them, so each writes its own property; checked
  // against the others as the schema states them, not as narrowed.
  const std::string closed = R"({"oneOf": [
      {"type": "object", "properties": {"email": {}, "if": {}}, "additionalProperties": false},
      {"type": "object", "properties": {"slack": {}, "if": {}}, "additionalProperties": false},
      {"type": "object", "properties": {"webhook": {}, "if": {}}, "additionalProperties": false}]})";
  EXPECT_TRUE(Takes(closed, R"({"email": 1, "if": 2})"));
  EXPECT_TRUE(Takes(closed, R"({"webhook": 1})"));
  EXPECT_FALSE(Takes(closed, R"({})"));
  EXPECT_FALSE(Takes(closed, R"({"if": 1})"));
  // anyOf branches of other types, and a branch that matches nothing.
  EXPECT_TRUE(Takes(R"({"oneOf": [{"anyOf": [{"type": "object"}, {"type": "array"}]}, {"type": "string"}]})", "[]"));
  const std::string dead = R"({"type": "string", "oneOf": [{"type": "integer"}, {"maxLength": 2}]})";
  EXPECT_TRUE(Takes(dead, R"("ab")"));
  EXPECT_FALSE(Takes(dead, "1"));
  // An optional property whose schema matches nothing is not written.
  EXPECT_FALSE(Takes(R"({"properties": {"a": {"allOf": [{}, false]}, "b": {}}})", R"({"a": 1})"));
  EXPECT_TRUE(Takes(R"({"properties": {"a": {"allOf": [{}, false]}, "b": {}}})", R"({"b": 1})"));
  // Branches that truly overlap stay refused.
  EXPECT_NE(Refusal(R"({"oneOf": [{"type": "object", "additionalProperties": {"type": "object"}},
      {"type": "object", "required": ["$ref"], "properties": {"$ref": {}}}]})")
                .find("keyword 'oneOf' at #/oneOf"),
            std::string::npos);
}

TEST(JsonSchemaApplicators, PatternsOfAllOfIntersect) {
  const std::string s = R"({"allOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"pattern": "x"}, {"format": "hostname"}]})";
  EXPECT_TRUE(Takes(s, R"("axb")"));
  EXPECT_FALSE(Takes(s, R"("ab")"));
  EXPECT_FALSE(Takes(s, R"("aXb")"));
}

TEST(JsonSchemaApplicators, NotOfWhatCanBeNegated) {
  // Required names: objects without them (renovate, gitlab-ci).
  const std::string r = R"({"type": "object", "properties": {"a": {}, "b": {}},
      "not": {"anyOf": [{"required": ["a"]}, {"required": ["b", "c"]}]}})";
  EXPECT_TRUE(Takes(r, R"({"b": 1})"));
  EXPECT_FALSE(Takes(r, R"({"a": 1})"));
  // Values outside a set, other types, strings without a match.
  const std::string e = R"({"type": "string", "not": {"enum": ["x", "y"]}})";
  EXPECT_TRUE(Takes(e, R"("xy")"));
  EXPECT_FALSE(Takes(e, R"("x")"));
  EXPECT_TRUE(Takes(R"({"not": {"type": ["string", "object"]}})", "[1]"));
  EXPECT_FALSE(Takes(R"({"not": {"type": ["string", "object"]}})", R"("a")"));
  const std::string p = R"({"type": "string", "maxLength": 4, "not": {"pattern": "\\.\\."}})";
  EXPECT_TRUE(Takes(p, R"("a.b.")"));
  EXPECT_FALSE(Takes(p, R"("a..b")"));
  EXPECT_TRUE(Takes(R"({"not": {"pattern": "^a"}})", "1"));
  EXPECT_FALSE(Takes(R"({"not": {"pattern": "^a"}})", R"("ab")"));
  // Others are refused with the pointer of the negated schema.
  EXPECT_NE(Refusal(R"({"properties": {"n": {"not": {"anyOf": [{"minimum": 3}]}}}})")
                .find("keyword 'not' at #/properties/n/not/anyOf/0:"),
            std::string::npos);
}

TEST(JsonSchemaApplicators, BranchesOfValuesBecomeOneEnum) {
  // Azure's task names: anyOf of one-value enums next to a pattern.
  const std::string any = R"({"type": "string", "pattern": "^[ab]", "anyOf": [{"enum": ["a1"]}, {"const": "b2"},
      {"enum": ["c3", "a4"]}]})";
  EXPECT_TRUE(Takes(any, R"("a1")"));
  EXPECT_TRUE(Takes(any, R"("a4")"));
  EXPECT_FALSE(Takes(any, R"("c3")"));
  // oneOf: a value two branches list matches both, so it is left out.
  const std::string one = R"({"type": "string", "oneOf": [{"enum": ["x", "y"]}, {"enum": ["y", "z"]}]})";
  EXPECT_TRUE(Takes(one, R"("x")"));
  EXPECT_TRUE(Takes(one, R"("z")"));
  EXPECT_FALSE(Takes(one, R"("y")"));
}

}  // namespace
}  // namespace kvshare
