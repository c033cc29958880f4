// The server's compiled-grammar cache (server/grammar_key.h, BuildRequest
// with ModelContext::grammars): every input of each compile path is in its
// key (two requests that differ only in it get different entries), what is
// not an input (a tool's description; for a forced call, parallel_tool_calls
// and the vocabulary) is not, and identical requests share one compiled
// grammar.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api_error.h"
#include "grammar_key.h"
#include "kvshare/grammar/grammar_cache.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "openai_request.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

// Gemma's turn markers, byte tokens and one piece: enough to encode a chat.
VocabData TinyVocab(const std::string& piece = "a") {
  VocabData v;
  for (const char* s : {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"}) {
    v.tokens.push_back(s);
    v.token_types.push_back(3);
  }
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.token_types.push_back(6);
  }
  v.tokens.push_back(piece);
  v.token_types.push_back(1);
  v.scores.assign(v.tokens.size(), -1.0f);
  v.pad = 0, v.eos = 1, v.bos = 2, v.unk = 3;
  return v;
}

OfferedTool Tool(std::string name, std::string parameters, bool strict) {
  OfferedTool t;
  t.function.name = std::move(name);
  t.function.description = "d";
  t.function.parameters = std::move(parameters);
  t.strict = strict;
  return t;
}

ToolOffer Offer() {
  ToolOffer o;
  o.tools = {Tool("f", R"({"type":"object","properties":{"x":{"type":"integer"}}})", true),
             Tool("g", R"({"type":"object"})", false)};
  return o;
}

const std::string kSchema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";

TEST(GrammarKey, SchemaKeysNameTheTextAndTheOptions) {
  const JsonGrammarOptions ws8, ws0{.max_whitespace = 0};
  EXPECT_EQ(SchemaGrammarKey(kSchema, ws8), SchemaGrammarKey(kSchema, ws8));
  EXPECT_NE(SchemaGrammarKey(kSchema, ws8), SchemaGrammarKey(kSchema, ws0));
  EXPECT_NE(SchemaGrammarKey(kSchema, ws8), SchemaGrammarKey(R"({"type":"integer"})", ws8));
  // No delimiter games: the parts are JSON strings.
  EXPECT_NE(SchemaGrammarKey("\"a\",\"b", ws8), SchemaGrammarKey("\"a\"", ws8));
}

TEST(GrammarKey, ResponseFormatKeysNameEveryInput) {
  const JsonGrammarOptions o;
  const std::string base = ResponseFormatGrammarKey(kSchema, o, std::nullopt);
  EXPECT_EQ(base, ResponseFormatGrammarKey(kSchema, o, std::nullopt));
  EXPECT_NE(base, ResponseFormatGrammarKey(R"({"type":"object","properties":{"b":{"type":"integer"}}})", o,
                                           std::nullopt));         // schema
  EXPECT_NE(base, ResponseFormatGrammarKey("", o, std::nullopt));  // json_object without a schema
  EXPECT_NE(base, ResponseFormatGrammarKey(kSchema, {.max_whitespace = 2}, std::nullopt));  // whitespace
  EXPECT_NE(base, SchemaGrammarKey(kSchema, o));                                            // another compile path
  const std::string with_tools = ResponseFormatGrammarKey(kSchema, o, Offer());
  EXPECT_NE(base, with_tools);  // tools offered beside the format
  ToolOffer t = Offer();
  t.tools[0].function.name = "h";
  EXPECT_NE(with_tools, ResponseFormatGrammarKey(kSchema, o, t));  // a tool's name
  t = Offer();
  t.tools[1].function.parameters = R"({"type":"object","properties":{}})";
  EXPECT_NE(with_tools, ResponseFormatGrammarKey(kSchema, o, t));  // a tool's parameters
  t = Offer();
  t.tools[1].strict = true;
  EXPECT_NE(with_tools, ResponseFormatGrammarKey(kSchema, o, t));  // a tool's strictness
  t = Offer();
  t.tools.pop_back();
  EXPECT_NE(with_tools, ResponseFormatGrammarKey(kSchema, o, t));  // the tool list
  t = Offer();
  t.tools[0].function.description = "other";
  EXPECT_EQ(with_tools, ResponseFormatGrammarKey(kSchema, o, t));  // not an input
}

TEST(GrammarKey, ToolCallKeysNameEveryInput) {
  const std::string id = "vocab";
  const std::string base = ToolCallGrammarKey(Offer(), id);
  ToolOffer t = Offer();
  t.parallel = false;
  EXPECT_NE(base, ToolCallGrammarKey(t, id));          // parallel_tool_calls
  EXPECT_NE(base, ToolCallGrammarKey(Offer(), "v2"));  // format and vocabulary
  t = Offer();
  t.tools[0].strict = false;
  EXPECT_NE(base, ToolCallGrammarKey(t, id));  // strict
  t = Offer();
  t.tools[0].function.parameters = R"({"type":"object"})";
  EXPECT_NE(base, ToolCallGrammarKey(t, id));  // parameters
  t = Offer();
  std::swap(t.tools[0], t.tools[1]);
  EXPECT_NE(base, ToolCallGrammarKey(t, id));  // the tools' order (the grammar's alternatives)
  t = Offer();
  t.tools[1].function.description = "other";
  EXPECT_EQ(base, ToolCallGrammarKey(t, id));  // not an input

  ToolOffer required = Offer();
  required.choice = ToolOffer::Choice::kRequired;
  ToolOffer named = Offer();
  named.choice = ToolOffer::Choice::kFunction;
  named.function = "f";
  ToolOffer named_g = named;
  named_g.function = "g";
  const std::string r = ToolCallGrammarKey(required, id);
  EXPECT_NE(base, r);  // tool_choice
  EXPECT_NE(r, ToolCallGrammarKey(named, id));
  EXPECT_NE(ToolCallGrammarKey(named, id), ToolCallGrammarKey(named_g, id));  // the named function
  // A forced call is the JSON convention's schema: parallel and the
  // vocabulary do not change it.
  required.parallel = false;
  EXPECT_EQ(r, ToolCallGrammarKey(required, id));
  EXPECT_EQ(r, ToolCallGrammarKey(required, "v2"));
}

TEST(GrammarKey, IdentityNamesTheFormatAndTheVocabulary) {
  const Tokenizer a{TinyVocab("a")}, a2{TinyVocab("a")}, b{TinyVocab("b")};
  const std::string id = ToolGrammarIdentity(ChatFormat::kGemma4, a);
  EXPECT_EQ(id, ToolGrammarIdentity(ChatFormat::kGemma4, a2));
  EXPECT_NE(id, ToolGrammarIdentity(ChatFormat::kGemma, a));   // the format's call syntax and markers
  EXPECT_NE(id, ToolGrammarIdentity(ChatFormat::kGemma4, b));  // the vocabulary
}

// ---- BuildRequest with a cache ----

struct Served {
  Tokenizer tok{TinyVocab()};
  ChatTemplate chat{ChatFormat::kGemma, tok};
  GrammarCache cache;
  ModelContext Ctx() {
    ModelContext c;
    c.model_id = "tiny";
    c.tokenizer = &tok;
    c.chat = &chat;
    c.max_context = 4096;
    c.grammars = &cache;
    c.tool_grammar_identity = ToolGrammarIdentity(chat.format(), tok);
    return c;
  }
  std::shared_ptr<const Grammar> Build(const json& body) {
    const CompletionRequest r = ParseCompletionRequest(body, true, {.grammars = &cache});
    return BuildRequest(r, Ctx()).grammar;
  }
};

json ChatWith(json extra) {
  json b = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

json Format(const json& schema) {
  return {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}}}}}};
}

TEST(GrammarCacheServer, IdenticalRequestsShareOneGrammar) {
  Served s;
  const json schema = json::parse(kSchema);
  const auto first = s.Build(ChatWith(Format(schema)));
  const auto second = s.Build(ChatWith(Format(schema)));
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(s.cache.Stats().hits, 1u);
  EXPECT_EQ(s.cache.Stats().misses, 1u);
  const auto other = s.Build(ChatWith(Format(json::parse(R"({"type":"integer"})"))));
  EXPECT_NE(other.get(), first.get());
  EXPECT_EQ(s.cache.Stats().misses, 2u);
  // json_object: its own entry, shared too.
  const json obj = {{"response_format", {{"type", "json_object"}}}};
  EXPECT_EQ(s.Build(ChatWith(obj)).get(), s.Build(ChatWith(obj)).get());
  EXPECT_EQ(s.cache.Stats().entries, 3u);
}

TEST(GrammarCacheServer, SchemaKeyOrderIsPartOfTheKey) {
  // Properties are written in the schema's order (KeepSchemaKeyOrder), so
  // two orders are two grammars.
  Served s;
  auto build = [&s](const std::string& body) {
    CompletionRequest r = ParseCompletionRequest(json::parse(body), true);
    KeepSchemaKeyOrder(r, body);
    return BuildRequest(r, s.Ctx()).grammar;
  };
  const std::string head =
      R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema",)"
      R"("json_schema":{"name":"n","schema":{"type":"object","properties":)";
  const auto ab = build(head + R"({"a":{"type":"integer"},"b":{"type":"integer"}}}}}})");
  const auto ba = build(head + R"({"b":{"type":"integer"},"a":{"type":"integer"}}}}}})");
  EXPECT_NE(ab.get(), ba.get());
  EXPECT_EQ(s.cache.Stats().misses, 2u);
  // Spacing is not: the server serializes the schema it parsed.
  const auto spaced = build(head + R"({ "a" : {"type": "integer"},  "b":{"type":"integer"} }}}}})");
  EXPECT_EQ(spaced.get(), ab.get());
}

TEST(GrammarCacheServer, ToolRequestsShareByTheirInputs) {
  Served s;
  const json tool = {{"type", "function"},
                     {"function",
                      {{"name", "get_weather"},
                       {"strict", true},
                       {"parameters",
                        {{"type", "object"},
                         {"properties", {{"city", {{"type", "string"}}}}},
                         {"required", {"city"}},
                         {"additionalProperties", false}}}}}};
  const json forced = {{"tools", {tool}}, {"tool_choice", "required"}};
  const auto first = s.Build(ChatWith(forced));
  ASSERT_NE(first, nullptr);
  // The strict tool's check compiled its parameters once (kept), the call once.
  EXPECT_EQ(s.cache.Stats().misses, 2u);
  EXPECT_EQ(s.Build(ChatWith(forced)).get(), first.get());
  EXPECT_EQ(s.cache.Stats().misses, 2u);
  EXPECT_EQ(s.cache.Stats().hits, 2u);
  json free = {{"tools", {tool}}};
  const auto parallel = s.Build(ChatWith(free));
  free["parallel_tool_calls"] = false;
  const auto single = s.Build(ChatWith(free));
  ASSERT_NE(parallel, nullptr);
  EXPECT_NE(parallel.get(), first.get());
  EXPECT_NE(single.get(), parallel.get());
  EXPECT_EQ(s.Build(ChatWith(free)).get(), single.get());
}

TEST(GrammarCacheServer, RefusedSchemasAreNotKept) {
  Served s;
  const json bad = Format(json::parse(R"({"type":"array","contains":{"type":"integer"}})"));
  for (int i = 0; i < 2; ++i) {
    try {
      s.Build(ChatWith(bad));
      ADD_FAILURE() << "compiled";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.code().value_or(""), "invalid_schema");
    }
  }
  EXPECT_EQ(s.cache.Stats().misses, 2u);
  EXPECT_EQ(s.cache.Stats().entries, 0u);
}

}  // namespace
}  // namespace kvshare::server
