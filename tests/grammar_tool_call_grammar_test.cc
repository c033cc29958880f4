// Lazy grammars of function calls (kvshare/grammar/tool_call_grammar.h) on
// byte strings: the schema a function's arguments are held to, marked calls
// in both notations (free text before, the name and arguments checked,
// repeat or only the end after) and calls written as one JSON object. The
// chat formats' own syntaxes over real vocabularies are tested in
// runtime_tool_call_grammar_test.cc.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/grammar/tool_call_grammar.h"

namespace kvshare {
namespace {

constexpr const char* kCountSchema =
    R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false})";

// Every single byte (token id = byte + 1) and an end token 0.
std::shared_ptr<const TokenTrie> ByteVocab() {
  std::vector<std::string> bytes(257);
  for (int b = 0; b < 256; ++b) bytes[static_cast<std::size_t>(b) + 1] = std::string(1, static_cast<char>(b));
  return std::make_shared<const TokenTrie>(bytes);
}

// How many bytes of `text` the grammar takes one by one (text.size(): all).
std::size_t LiveBytes(GrammarMatcher& m, const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!m.AcceptBytes(text.substr(i, 1))) return i;
  }
  return text.size();
}

const MarkedCallSyntax kMarked{.trigger = "<c>", .open = "<c>call:", .close = "</c>", .notation = CallNotation::kJson};

TEST(CallArgumentsSchema, EnforcedNoneOrAnyObject) {
  EXPECT_EQ(CallArgumentsSchema({.name = "f", .parameters = kCountSchema, .enforce = true}), kCountSchema);
  EXPECT_EQ(CallArgumentsSchema({.name = "f", .parameters = kCountSchema, .enforce = false}), R"({"type": "object"})");
  for (bool enforce : {false, true}) {
    EXPECT_EQ(CallArgumentsSchema({.name = "f", .parameters = "", .enforce = enforce}),
              R"({"type": "object", "additionalProperties": false})");
  }
  // Unsupported keywords only matter when the arguments are enforced.
  const std::string pattern = R"({"type": "object", "properties": {"s": {"not": {"minimum": 2}}}})";
  EXPECT_NO_THROW(CallArgumentsSchema({.name = "f", .parameters = pattern, .enforce = false}));
  try {
    CallArgumentsSchema({.name = "f", .parameters = pattern, .enforce = true});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("tool \"f\": its parameters cannot be enforced: ", 0), 0u) << e.what();
  }
}

TEST(MarkedCallGrammar, FreeTextThenOneCheckedCall) {
  const std::vector<CallableFunction> fs = {{.name = "count", .parameters = kCountSchema, .enforce = true},
                                            {.name = "any", .parameters = kCountSchema, .enforce = false}};
  const auto g = MarkedCallGrammar(fs, kMarked);
  {
    GrammarMatcher m(g, ByteVocab(), {0});
    const std::string text = "Let me see. <c>call:count{\"n\":3}</c>";
    EXPECT_EQ(LiveBytes(m, text), text.size());
    EXPECT_EQ(m.Triggered(), 1);
    EXPECT_TRUE(m.CanEnd());
    EXPECT_FALSE(m.CanAcceptBytes(" more")) << "repeat off: only the end after a call";
  }
  {
    GrammarMatcher m(g, ByteVocab(), {0});
    EXPECT_EQ(LiveBytes(m, "<c>call:count{\"m\""), 15u) << "enforced arguments";
  }
  {
    GrammarMatcher m(g, ByteVocab(), {0});
    const std::string text = "<c>call:any{\"m\":[true]}</c>";
    EXPECT_EQ(LiveBytes(m, text), text.size()) << "not enforced: any object";
  }
  {
    GrammarMatcher m(g, ByteVocab(), {0});
    EXPECT_EQ(LiveBytes(m, "<c>call:other"), 8u) << "only the given names";
  }
}

TEST(MarkedCallGrammar, RepeatAndGemmaNotation) {
  MarkedCallSyntax gemma = kMarked;
  gemma.notation = CallNotation::kGemma;
  const std::vector<CallableFunction> fs = {{.name = "count", .parameters = kCountSchema, .enforce = true}};
  GrammarMatcher m(MarkedCallGrammar(fs, gemma, {.repeat = true}), ByteVocab(), {0});
  const std::string text = "a <c>call:count{n:1}</c> then <c>call:count{n:2}</c>";
  EXPECT_EQ(LiveBytes(m, text), text.size());
  EXPECT_EQ(m.Triggered(), 2);
  EXPECT_TRUE(m.CanEnd());

  const std::vector<CallableFunction> colon = {
      {.name = "f", .parameters = R"({"type": "object", "properties": {"a:b": {}}})", .enforce = true}};
  EXPECT_THROW(MarkedCallGrammar(colon, gemma), Error) << "a key Gemma's notation cannot write";
  EXPECT_NO_THROW(MarkedCallGrammar(colon, kMarked));
  EXPECT_THROW(MarkedCallGrammar({}, kMarked), Error);
}

TEST(JsonObjectCallGrammar, TriggeredByTheFirstKey) {
  const auto g = JsonObjectCallGrammar(
      R"({"type": "object", "properties": {"call": {"type": "integer"}}, "required": ["call"], "additionalProperties": false})",
      "\"call");
  {
    GrammarMatcher m(g, ByteVocab(), {0});
    const std::string text = "Braces {like this} stay text. {  \"call\": 7}";
    EXPECT_EQ(LiveBytes(m, text), text.size());
    EXPECT_EQ(m.Triggered(), 1);
    EXPECT_TRUE(m.CanEnd());
  }
  {
    GrammarMatcher m(g, ByteVocab(), {0});
    EXPECT_EQ(LiveBytes(m, "{\"call\": \"x\""), 9u) << "the body's schema from the '{' on";
  }
}

}  // namespace
}  // namespace kvshare
