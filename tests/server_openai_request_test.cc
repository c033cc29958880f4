// Parsing and validation of OpenAI request bodies (server/openai_request.h):
// every kind of bad input gets its HTTP status, type, param and code; good
// bodies become the scheduler's RequestOptions (chat template, prompt ids,
// max_tokens defaults, the context-length message agent harnesses match).
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api_error.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/schema_refs.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "openai_request.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

// <pad> <eos> <bos> <unk> <start_of_turn> <end_of_turn>, "\n", bytes, letters.
VocabData Vocab() {
  VocabData v;
  auto add = [&v](const std::string& piece, int type) {
    v.tokens.push_back(piece);
    v.scores.push_back(type == 1 ? -static_cast<float>(v.tokens.size()) : -1000.0f);
    v.token_types.push_back(type);
  };
  for (const char* s : {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"}) add(s, 3);
  add("\n", 4);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 6);
  }
  for (const char* s : {"▁", "a", "b", "c", "d", "e", "h", "i", "l", "m", "o", "r", "s", "t", "u"}) add(s, 1);
  v.pad = 0, v.eos = 1, v.bos = 2, v.unk = 3;
  return v;
}

struct Fixture {
  Tokenizer tok{Vocab()};
  ChatTemplate gemma{ChatFormat::kGemma, tok};
  ChatTemplate none{ChatFormat::kNone, tok};
  bool strict = false;  // --strict-openai: another model name is a 404
  ModelContext ctx(bool chat = true, int max_context = 64) {
    ModelContext c;
    c.model_id = "tiny";
    c.strict_model = strict;
    c.tokenizer = &tok;
    c.chat = chat ? &gemma : &none;
    if (!chat) c.chat_unavailable = "the file has no tokenizer.chat_template";
    c.max_context = max_context;
    return c;
  }
};

// The error a body gets (status, type, param, code, message).
struct Want {
  int status;
  std::string param;  // "" = null
  std::string code;
  std::string message_part;
};

void ExpectError(const json& body, bool chat, const Want& want, Fixture* f = nullptr, RequestParsing parsing = {}) {
  SCOPED_TRACE(body.dump());
  try {
    const CompletionRequest r = ParseCompletionRequest(body, chat, parsing);
    if (f == nullptr) {
      ADD_FAILURE() << "parsed without error";
      return;
    }
    BuildRequest(r, f->ctx(chat));
    ADD_FAILURE() << "built without error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), want.status);
    EXPECT_EQ(e.param().value_or(""), want.param);
    EXPECT_EQ(e.code().value_or(""), want.code);
    EXPECT_NE(e.message().find(want.message_part), std::string::npos) << e.message();
    const json j = e.ToJson();
    ASSERT_TRUE(j.contains("error"));
    for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << k;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
}

json Chat(json extra = json::object()) {
  json b = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}
json Completion(json extra = json::object()) {
  json b = {{"model", "tiny"}, {"prompt", "hi"}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

TEST(OpenAiRequest, WrongTypesAndShapes) {
  ExpectError(json::array(), true, {400, "", "invalid_type", "expected a JSON object"});
  ExpectError(
      Chat({{"temperature", "hot"}}), true,
      {400, "temperature", "invalid_type", "Invalid type for 'temperature': expected a decimal, but got a string"});
  ExpectError(Chat({{"max_tokens", 1.5}}), true, {400, "max_tokens", "invalid_type", "expected an integer"});
  ExpectError(Chat({{"stream", 1}}), true, {400, "stream", "invalid_type", "expected a boolean"});
  ExpectError(Chat({{"stop", 3}}), true, {400, "stop", "invalid_type", "a string or an array of strings"});
  ExpectError(Chat({{"messages", "hi"}}), true, {400, "messages", "invalid_type", "expected an array"});
  ExpectError(Chat({{"messages", {{{"role", "user"}, {"content", 5}}}}}), true,
              {400, "messages[0].content", "invalid_type", ""});
  ExpectError(Completion({{"prompt", json::object({{"k", 1}})}}), false, {400, "prompt", "invalid_type", ""});
  ExpectError(Completion({{"prompt", {1, "a"}}}), false, {400, "prompt", "invalid_type", ""});
  ExpectError(Completion({{"prompt", true}}), false, {400, "prompt", "invalid_type", ""});
  ExpectError(Chat({{"model", 7}}), true, {400, "model", "invalid_type", ""});
}

// --strict-openai: OpenAI's own strictness.
TEST(OpenAiRequest, StrictMissingAndUnknownFields) {
  const RequestParsing strict{.strict = true};
  ExpectError(json{{"messages", Chat()["messages"]}}, true,
              {400, "model", "missing_required_parameter", "You must provide a model parameter"}, nullptr, strict);
  ExpectError(json{{"model", "tiny"}}, true, {400, "messages", "missing_required_parameter", ""}, nullptr, strict);
  ExpectError(json{{"model", "tiny"}}, false, {400, "prompt", "missing_required_parameter", ""}, nullptr, strict);
  ExpectError(Chat({{"temprature", 1}}), true,
              {400, "temprature", "unknown_parameter", "Unrecognized request argument supplied: temprature"}, nullptr,
              strict);
  ExpectError(Chat({{"prompt", "x"}}), true, {400, "prompt", "unknown_parameter", ""}, nullptr,
              strict);  // a completions field
  ExpectError(Completion({{"messages", {}}}), false, {400, "messages", "unknown_parameter", ""}, nullptr, strict);
  ExpectError(Chat({{"messages", {{{"role", "user"}, {"content", "x"}, {"tool_call_id", "1"}}}}}), true,
              {400, "messages[0].tool_call_id", "unknown_parameter", ""}, nullptr, strict);
  ExpectError(Chat({{"stream", true}, {"stream_options", {{"include_usage", true}, {"x", 1}}}}), true,
              {400, "stream_options.x", "unknown_parameter", ""}, nullptr, strict);
  // Harmless fields are accepted.
  EXPECT_NO_THROW(
      ParseCompletionRequest(Chat({{"user", "u1"}, {"metadata", {{"a", "b"}}}, {"store", false}}), true, strict));
}

// OpenAI's assistant refusals as clients send them back: a "refusal" content
// part, or content null with the top-level "refusal" text (also --strict-openai).
TEST(OpenAiRequest, AssistantRefusalsAreTheAssistantsText) {
  const RequestParsing strict{.strict = true};
  const json part = {{"role", "assistant"}, {"content", {{{"type", "refusal"}, {"refusal", "I can't help."}}}}};
  const json top = {{"role", "assistant"}, {"content", nullptr}, {"refusal", "No."}};
  const json user = {{"role", "user"}, {"content", "why?"}};
  const CompletionRequest r = ParseCompletionRequest(
      Chat({{"messages", {{{"role", "user"}, {"content", "q"}}, part, user, top, user}}}), true, strict);
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[1].content, "I can't help.");
  EXPECT_EQ(r.messages[3].content, "No.");
  // Only an assistant says a refusal.
  ExpectError(Chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "refusal"}, {"refusal", "x"}}}}}}}}), true,
              {400, "messages[0].content[0].type", "unsupported_parameter", ""});
}

// By default (vLLM, llama-server): no model means the served one, unknown
// fields are ignored and listed; required fields and known fields' types are
// still checked.
TEST(OpenAiRequest, TolerantByDefault) {
  Fixture f;
  json body = Completion({{"temprature", 1}, {"mirostat", 2}, {"stream", true}, {"stream_options", {{"x", 1}}}});
  body.erase("model");
  const CompletionRequest r = ParseCompletionRequest(body, false);
  EXPECT_EQ(r.model, "");
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"mirostat", "temprature", "stream_options.x"}));
  EXPECT_NO_THROW(BuildRequest(r, f.ctx(false)));  // the served model
  const CompletionRequest c =
      ParseCompletionRequest(Chat({{"messages", {{{"role", "user"}, {"content", "x"}, {"tool_call_id", "1"}}}}}), true);
  EXPECT_EQ(c.ignored, (std::vector<std::string>{"messages[0].tool_call_id"}));
  EXPECT_TRUE(ParseCompletionRequest(Chat(), true).ignored.empty());
  ExpectError(json{{"prompt", "x"}, {"temperature", "hot"}}, false, {400, "temperature", "invalid_type", ""});
  ExpectError(json{{"extra", 1}}, false, {400, "prompt", "missing_required_parameter", ""});
  // Any model name is served by default; --strict-openai: a 404.
  EXPECT_NO_THROW(BuildRequest(ParseCompletionRequest(Completion({{"model", "gpt-4o"}}), false), f.ctx(false)));
  f.strict = true;
  ExpectError(Completion({{"model", "gpt-4o"}}), false, {404, "model", "model_not_found", ""}, &f);
}

TEST(OpenAiRequest, OutOfRangeValues) {
  ExpectError(Chat({{"temperature", 2.5}}), true,
              {400, "temperature", "decimal_above_max_value", "Expected a value <= 2, but got 2.5 instead"});
  ExpectError(Chat({{"temperature", -0.1}}), true, {400, "temperature", "decimal_below_min_value", ""});
  ExpectError(Chat({{"top_p", 0}}), true, {400, "top_p", "decimal_below_min_value", "Expected a value > 0"});
  ExpectError(Chat({{"min_p", 1.5}}), true, {400, "min_p", "decimal_above_max_value", ""});
  ExpectError(Chat({{"max_tokens", 0}}), true, {400, "max_tokens", "integer_below_min_value", "Expected a value >= 1"});
  ExpectError(Chat({{"top_k", -2}}), true, {400, "top_k", "integer_below_min_value", ""});
  ExpectError(Chat({{"n", 17}}), true, {400, "n", "integer_above_max_value", "Expected a value <= 16"});
  // Past uint64 the literal parses as a double: still an integer out of range.
  ExpectError(json::parse(R"({"model": "tiny", "prompt": "hi", "max_tokens": 99999999999999999999})"), false,
              {400, "max_tokens", "integer_above_max_value", "but got 1e+20 instead"});
  ExpectError(Chat({{"max_tokens", 2.5}}), true, {400, "max_tokens", "invalid_type", "got a decimal"});
  ExpectError(Chat({{"n", 0}}), true, {400, "n", "integer_below_min_value", ""});
  ExpectError(Chat({{"logprobs", true}, {"top_logprobs", 21}}), true,
              {400, "top_logprobs", "integer_above_max_value", ""});
  ExpectError(Chat({{"top_logprobs", 2}}), true,
              {400, "top_logprobs", "invalid_value", "'logprobs' must be set to true"});
  ExpectError(Completion({{"logprobs", 30}}), false, {400, "logprobs", "integer_above_max_value", ""});
  ExpectError(Chat({{"stop", json::array({"a", ""})}}), true, {400, "stop", "invalid_value", "must not be empty"});
  ExpectError(Chat({{"stop", std::vector<std::string>(17, "x")}}), true, {400, "stop", "array_above_max_length", ""});
  ExpectError(Chat({{"stream_options", {{"include_usage", true}}}}), true,
              {400, "stream_options", "invalid_value", "only allowed when 'stream' is enabled"});
  ExpectError(Chat({{"messages", json::array()}}), true, {400, "messages", "empty_array", ""});
  ExpectError(Chat({{"messages", {{{"role", "robot"}, {"content", "x"}}}}}), true,
              {400, "messages[0].role", "invalid_value", "Supported values are"});
  ExpectError(Chat({{"presence_penalty", 2.5}}), true, {400, "presence_penalty", "decimal_above_max_value", ""});
  ExpectError(Chat({{"frequency_penalty", -2.1}}), true, {400, "frequency_penalty", "decimal_below_min_value", ""});
  ExpectError(Completion({{"best_of", 2}, {"n", 3}}), false, {400, "best_of", "invalid_value", "must be >= n (3)"});
  ExpectError(Completion({{"best_of", 3}, {"stream", true}}), false,
              {400, "best_of", "invalid_value", "cannot be streamed"});
  ExpectError(Completion({{"max_tokens", -1}}), false, {400, "max_tokens", "integer_below_min_value", ">= 0"});
  ExpectError(Completion({{"prompt", {"a", 2}}}), false, {400, "prompt", "invalid_type", ""});
  ExpectError(Completion({{"prompt", std::vector<std::string>(257, "a")}}), false,
              {400, "prompt", "array_above_max_length", "at most 256 prompts"});
  ExpectError(Completion({{"prompt", {-1, 2}}}), false, {400, "prompt", "invalid_value", ""});
}

TEST(OpenAiRequest, ModelPromptAndContextChecks) {
  Fixture f;
  f.strict = true;
  ExpectError(Chat({{"model", "gpt-4o"}}), true, {404, "model", "model_not_found", "The model `gpt-4o` does not exist"},
              &f);
  f.strict = false;
  ExpectError(Completion({{"prompt", ""}}), false, {400, "prompt", "invalid_value", "the prompt is empty"}, &f);
  ExpectError(Completion({{"prompt", json::array()}}), false, {400, "prompt", "invalid_value", "the prompt is empty"},
              &f);
  ExpectError(Completion({{"prompt", {2, 100000}}}), false, {400, "prompt", "invalid_value", "outside the vocabulary"},
              &f);
  // 64 tokens per request: a 60-token prompt plus 10 is 70.
  const std::string long_text(59, 'a');
  ExpectError(Completion({{"prompt", long_text}, {"max_tokens", 10}}), false,
              {400, "prompt", "context_length_exceeded",
               "This model's maximum context length is 64 tokens. However, you requested 70 tokens (60 in the prompt, "
               "10 in the completion). Please reduce the length of the prompt or completion."},
              &f);
  ExpectError(Completion({{"prompt", std::string(200, 'a')}}), false,
              {400, "prompt", "context_length_exceeded",
               "However, your prompt resulted in 201 tokens. Please reduce the length of the prompt."},
              &f);
  // Chat without a template in the file: a clear refusal.
  try {
    BuildRequest(ParseCompletionRequest(Chat(), true), f.ctx(/*chat=*/false));
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.code().value_or(""), "chat_template_missing");
    EXPECT_NE(e.message().find("--chat-template gemma|gemma4, or use /v1/completions"), std::string::npos)
        << e.message();
  }
}

TEST(OpenAiRequest, ChoicesPenaltiesEchoAndPromptLists) {
  Fixture f;
  CompletionRequest c = ParseCompletionRequest(
      Chat({{"n", 3}, {"presence_penalty", 0.5}, {"frequency_penalty", -1.25}, {"seed", 9}}), true);
  EXPECT_EQ(c.n, 3);
  EXPECT_EQ(c.best_of, 3);
  RequestOptions r = BuildRequest(c, f.ctx());
  EXPECT_FLOAT_EQ(r.sampler.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampler.frequency_penalty, -1.25f);
  EXPECT_EQ(r.prompt_logprobs, -1);
  // A list of prompts: strings, token arrays, or both kinds.
  CompletionRequest p = ParseCompletionRequest(
      Completion({{"prompt", {"hi", "ho"}}, {"n", 2}, {"best_of", 4}, {"echo", true}, {"logprobs", 2}}), false);
  ASSERT_EQ(p.prompts.size(), 2u);
  EXPECT_EQ(*p.prompts[1].text, "ho");
  EXPECT_EQ(p.best_of, 4);
  EXPECT_TRUE(p.echo);
  const RequestOptions r1 = BuildRequest(p, f.ctx(false), 1);
  EXPECT_EQ(r1.prompt,
            BuildRequest(ParseCompletionRequest(Completion({{"prompt", "ho"}}), false), f.ctx(false)).prompt);
  EXPECT_EQ(r1.prompt_logprobs, 2);
  EXPECT_EQ(r1.top_logprobs, 2);
  CompletionRequest ids = ParseCompletionRequest(Completion({{"prompt", {{2, 263}, {2, 264, 265}}}}), false);
  ASSERT_EQ(ids.prompts.size(), 2u);
  EXPECT_EQ(BuildRequest(ids, f.ctx(false), 1).prompt, (std::vector<std::int32_t>{2, 264, 265}));
  // best_of > n ranks by logprobs: they are computed even when not asked for.
  CompletionRequest b = ParseCompletionRequest(Completion({{"best_of", 2}}), false);
  EXPECT_EQ(BuildRequest(b, f.ctx(false)).top_logprobs, 0);
  EXPECT_FALSE(b.logprobs);
  // max_tokens 0 (lm-evaluation-harness's loglikelihood shape): one token run, dropped by the response.
  CompletionRequest z = ParseCompletionRequest(Completion({{"max_tokens", 0}, {"echo", true}, {"logprobs", 1}}), false);
  EXPECT_TRUE(z.max_tokens_zero);
  EXPECT_EQ(BuildRequest(z, f.ctx(false)).max_tokens, 1);
}

TEST(OpenAiRequest, GoodBodiesBecomeSchedulerRequests) {
  Fixture f;
  // Chat: the Gemma template, its end of turn as a stop token, the rest of the context by default.
  CompletionRequest c =
      ParseCompletionRequest(Chat({{"temperature", 0.5},
                                   {"top_p", 0.9},
                                   {"top_k", -1},
                                   {"min_p", 0.1},
                                   {"seed", 42},
                                   {"stop", "x"},
                                   {"stream", true},
                                   {"stream_options", {{"include_usage", true}}},
                                   {"logprobs", true},
                                   {"top_logprobs", 3},
                                   {"messages",
                                    {{{"role", "developer"}, {"content", "be brief"}},
                                     {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi"}}}}}}}}),
                             true);
  EXPECT_TRUE(c.stream);
  EXPECT_TRUE(c.include_usage);
  EXPECT_EQ(c.messages[0].role, "system");
  EXPECT_EQ(c.messages[1].content, "hi");
  RequestOptions r = BuildRequest(c, f.ctx());
  const std::vector<ChatMessage> msgs = {{"system", "be brief"}, {"user", "hi"}};
  EXPECT_EQ(r.prompt, f.gemma.Encode(msgs));
  EXPECT_EQ(r.stop_tokens, f.gemma.StopTokens());
  EXPECT_EQ(r.max_tokens, 64 - static_cast<int>(r.prompt.size()));
  EXPECT_FLOAT_EQ(r.sampler.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampler.top_p, 0.9f);
  EXPECT_EQ(r.sampler.top_k, 0);
  EXPECT_EQ(r.sampler.seed, 42u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.top_logprobs, 3);
  // Completions: <bos> and the text as is (plain completion); 16 tokens by default; logprobs as an int.
  EXPECT_FALSE(r.ignore_eos);
  CompletionRequest p =
      ParseCompletionRequest(Completion({{"logprobs", 2}, {"stop", {"a", "b"}}, {"ignore_eos", true}}), false);
  r = BuildRequest(p, f.ctx());
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.prompt, f.none.Encode(std::vector<ChatMessage>{{"user", "hi"}}));
  EXPECT_EQ(r.prompt.front(), 2);
  EXPECT_TRUE(r.stop_tokens.empty());
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_FLOAT_EQ(r.sampler.temperature, 1.0f);  // OpenAI's default
  // Token-id prompts, also as a one-element batch; no seed: a random one each time.
  p = ParseCompletionRequest(Completion({{"prompt", {{2, 5, 6}}}, {"max_tokens", 3}}), false);
  r = BuildRequest(p, f.ctx());
  EXPECT_EQ(r.prompt, (std::vector<std::int32_t>{2, 5, 6}));
  EXPECT_EQ(r.top_logprobs, -1);
  EXPECT_NE(BuildRequest(p, f.ctx()).sampler.seed, BuildRequest(p, f.ctx()).sampler.seed);
}

// response_format on both endpoints: parsed and type-checked, compiled into
// the request's grammar when it is built.
TEST(OpenAiRequest, ResponseFormat) {
  using Type = CompletionRequest::ResponseFormat::Type;
  Fixture f;
  const json schema = {{"type", "object"},
                       {"properties", {{"b", {{"type", "string"}}}, {"a", {{"type", "integer"}}}}},
                       {"required", {"b"}}};
  for (bool chat : {true, false}) {
    const json extra = {
        {"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}, {"strict", true}}}}}};
    CompletionRequest r = ParseCompletionRequest(chat ? Chat(extra) : Completion(extra), chat);
    EXPECT_EQ(r.response_format.type, Type::kJsonSchema);
    EXPECT_EQ(r.response_format.name, "n");
    EXPECT_TRUE(r.response_format.strict);
    EXPECT_EQ(json::parse(r.response_format.schema), schema);
    EXPECT_NE(BuildRequest(r, f.ctx(chat)).grammar, nullptr);
    const json obj = {{"type", "json_object"}};
    r = ParseCompletionRequest(chat ? Chat({{"response_format", obj}}) : Completion({{"response_format", obj}}), chat);
    EXPECT_EQ(r.response_format.type, Type::kJsonObject);
    EXPECT_NE(BuildRequest(r, f.ctx(chat)).grammar, nullptr);
    r = ParseCompletionRequest(Completion({{"response_format", {{"type", "text"}}}}), false);
    EXPECT_EQ(r.response_format.type, Type::kText);
    EXPECT_EQ(BuildRequest(r, f.ctx(false)).grammar, nullptr);
  }
  const std::string body =
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": )"
      R"({"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}}}})";
  CompletionRequest r = ParseCompletionRequest(json::parse(body), false);
  EXPECT_EQ(r.response_format.schema.find("\"b\""), r.response_format.schema.rfind("\"b\""));
  EXPECT_GT(r.response_format.schema.find("\"b\""), r.response_format.schema.find("\"a\""));  // sorted
  KeepSchemaKeyOrder(r, body);
  EXPECT_LT(r.response_format.schema.find("\"b\""), r.response_format.schema.find("\"a\""));  // declared
  // llama-server's json_object with a schema.
  r = ParseCompletionRequest(Completion({{"response_format", {{"type", "json_object"}, {"schema", schema}}}}), false);
  EXPECT_EQ(json::parse(r.response_format.schema), schema);

  auto rf = [](json v) { return Completion({{"response_format", v}}); };
  ExpectError(rf("json"), false, {400, "response_format", "invalid_type", "expected an object"});
  ExpectError(rf(json::object()), false, {400, "response_format.type", "missing_required_parameter", ""});
  ExpectError(rf({{"type", 1}}), false, {400, "response_format.type", "invalid_type", ""});
  ExpectError(rf({{"type", "xml"}}), false,
              {400, "response_format.type", "invalid_value", "'text', 'json_object' and 'json_schema'"});
  ExpectError(rf({{"type", "json_schema"}}), false,
              {400, "response_format.json_schema", "missing_required_parameter", ""});
  ExpectError(rf({{"type", "json_schema"}, {"json_schema", "x"}}), false,
              {400, "response_format.json_schema", "invalid_type", ""});
  ExpectError(rf({{"type", "json_schema"}, {"json_schema", {{"name", 3}}}}), false,
              {400, "response_format.json_schema.name", "invalid_type", ""});
  ExpectError(rf({{"type", "json_schema"}, {"json_schema", {{"strict", "yes"}}}}), false,
              {400, "response_format.json_schema.strict", "invalid_type", ""});
  ExpectError(rf({{"type", "json_schema"}, {"json_schema", {{"schema", 5}}}}), false,
              {400, "response_format.json_schema.schema", "invalid_type", ""});
  ExpectError(Completion({{"response_format", {{"type", "json_object"}}}, {"ignore_eos", true}}), false,
              {400, "ignore_eos", "invalid_value", ""});
  ExpectError(rf({{"type", "json_schema"},
                  {"json_schema", {{"schema", {{"type", "array"}, {"minItems", 2}, {"uniqueItems", true}}}}}}),
              false,
              {400, "response_format.json_schema.schema", "invalid_schema",
               "unsupported JSON Schema keyword 'uniqueItems' at #"},
              &f);
  ExpectError(rf({{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "array"}, {"minItems", "2"}}}}}}),
              false, {400, "response_format.json_schema.schema", "invalid_schema", "'minItems' must be"}, &f);
  const RequestParsing strict{.strict = true};
  ExpectError(rf({{"type", "json_object"}, {"x", 1}}), false, {400, "response_format.x", "unknown_parameter", ""},
              nullptr, strict);
  ExpectError(rf({{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"y", 1}}}}), false,
              {400, "response_format.json_schema.y", "unknown_parameter", ""}, nullptr, strict);
}

// ---- Tools ----

json WeatherTool(json parameters = {{"type", "object"},
                                    {"properties", {{"city", {{"type", "string"}, {"enum", {"Paris", "Rome"}}}}}},
                                    {"required", {"city"}}}) {
  return {{"type", "function"},
          {"function", {{"name", "get_weather"}, {"description", "Weather"}, {"parameters", parameters}}}};
}

TEST(OpenAiRequest, ToolShapesAreCheckedNamingTheField) {
  ExpectError(Chat({{"tools", {{{"type", "function"}}}}}), true,
              {400, "tools[0].function", "missing_required_parameter", ""});
  ExpectError(Chat({{"tools", {{{"type", "function"}, {"function", {{"description", "x"}}}}}}}), true,
              {400, "tools[0].function.name", "missing_required_parameter", ""});
  ExpectError(Chat({{"tools", {{{"type", "retrieval"}, {"function", {{"name", "f"}}}}}}}), true,
              {400, "tools[0].type", "invalid_value", "only \"function\""});
  ExpectError(Chat({{"tools", {WeatherTool(json::array({1}))}}}), true,
              {400, "tools[0].function.parameters", "invalid_type", "an object"});
  ExpectError(Chat({{"tools", {WeatherTool(), WeatherTool()}}}), true,
              {400, "tools[1].function.name", "invalid_value", "unique"});
  ExpectError(
      Chat({{"tools", {WeatherTool()}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}), true,
      {400, "tool_choice.function.name", "invalid_value", "no tool named 'f' in 'tools' (tools: get_weather)"});
  ExpectError(Chat({{"tools", {WeatherTool()}}, {"tool_choice", "always"}}), true,
              {400, "tool_choice", "invalid_value", ""});
  ExpectError(Chat({{"tool_choice", "required"}}), true, {400, "tool_choice", "invalid_value", "at least one tool"});
  ExpectError(Chat({{"parallel_tool_calls", "yes"}}), true, {400, "parallel_tool_calls", "invalid_type", ""});
  json strict = WeatherTool(
      {{"type", "object"}, {"properties", {{"id", {{"type", "array"}, {"minItems", 2}, {"uniqueItems", true}}}}}});
  strict["function"]["strict"] = true;
  ExpectError(Chat({{"tools", {strict}}}), true,
              {400, "tools[0].function.parameters", "invalid_schema", "unsupported JSON Schema keyword 'uniqueItems'"});
  ExpectError(Chat({{"messages", {{{"role", "user"}, {"content", "x"}}, {{"role", "tool"}, {"content", "42"}}}}}), true,
              {400, "messages[1].tool_call_id", "missing_required_parameter", "the call it answers"});
  // A tool message answers a call of the assistant message before its run (OpenAI's 400 otherwise).
  const json c1 = {{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}};
  const json asked = {{"role", "assistant"}, {"tool_calls", json::array({c1})}};
  const json answer = {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "42"}};
  EXPECT_NO_THROW(ParseCompletionRequest(
      Chat({{"messages", {{{"role", "user"}, {"content", "x"}}, asked, answer, answer}}}), true));
  ExpectError(Chat({{"messages",
                     {{{"role", "user"}, {"content", "x"}},
                      asked,
                      {{"role", "tool"}, {"tool_call_id", "c2"}, {"content", "42"}}}}}),
              true, {400, "messages[2].tool_call_id", "invalid_value", "'c2' not found in 'tool_calls'"});
  ExpectError(
      Chat({{"messages",
             {{{"role", "user"}, {"content", "x"}}, {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "42"}}}}}),
      true, {400, "messages[1].tool_call_id", "invalid_value", "not found"});
  json call = {{"id", "c1"}, {"type", "function"}, {"function", {{"arguments", "{}"}}}};
  ExpectError(Chat({{"messages", {{{"role", "assistant"}, {"tool_calls", {call}}}}}}), true,
              {400, "messages[0].tool_calls[0].function.name", "missing_required_parameter", ""});
  call["function"] = {{"name", "f"}, {"arguments", "{not json"}};
  ExpectError(Chat({{"messages", {{{"role", "assistant"}, {"tool_calls", {call}}}}}}), true,
              {400, "messages[0].tool_calls[0].function.arguments", "invalid_value", "JSON text of an object"});
}

TEST(OpenAiRequest, ToolsReachThePromptAndRequiredSetsAGrammar) {
  Fixture f;
  const json msgs = {{{"role", "user"}, {"content", "hi"}},
                     {{"role", "assistant"},
                      {"content", nullptr},
                      {"tool_calls",
                       {{{"id", "c1"},
                         {"type", "function"},
                         {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Rome\"}"}}}}}}},
                     {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}};
  const CompletionRequest plain = ParseCompletionRequest(Chat({{"messages", msgs}}), true);
  ASSERT_EQ(plain.messages.size(), 3u);
  ASSERT_EQ(plain.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(plain.messages[1].tool_calls[0].arguments, "{\"city\":\"Rome\"}");
  EXPECT_EQ(plain.messages[2].tool_call_id, "c1");
  const RequestOptions without = BuildRequest(plain, f.ctx(true, 4096));

  const CompletionRequest none =
      ParseCompletionRequest(Chat({{"messages", msgs}, {"tools", {WeatherTool()}}, {"tool_choice", "none"}}), true);
  EXPECT_FALSE(OffersTools(none));
  EXPECT_FALSE(OfferedTools(none));
  EXPECT_EQ(BuildRequest(none, f.ctx(true, 4096)).prompt, BuildRequest(plain, f.ctx(true, 4096)).prompt);

  const CompletionRequest autos = ParseCompletionRequest(Chat({{"messages", msgs}, {"tools", {WeatherTool()}}}), true);
  const RequestOptions a = BuildRequest(autos, f.ctx(true, 4096));
  EXPECT_GT(a.prompt.size(), without.prompt.size() + 100);  // the tool list is in the prompt
  EXPECT_EQ(a.grammar, nullptr);
  const std::optional<ToolOffer> offer = OfferedTools(autos);
  ASSERT_TRUE(offer);
  EXPECT_EQ(offer->choice, ToolOffer::Choice::kAuto);
  const ToolCallParserOptions parsing = ToolCallParsing(ChatFormat::kGemma4, *offer);
  EXPECT_EQ(parsing.syntax, ToolCallSyntax::kGemma4);
  EXPECT_EQ(parsing.names, std::vector<std::string>{"get_weather"});

  const CompletionRequest req =
      ParseCompletionRequest(Chat({{"messages", msgs}, {"tools", {WeatherTool()}}, {"tool_choice", "required"}}), true);
  EXPECT_NE(BuildRequest(req, f.ctx(true, 4096)).grammar, nullptr);
  // A forced call is written by the grammar in the JSON convention, for gemma4 too.
  const ToolOffer forced = *OfferedTools(req);
  EXPECT_EQ(ToolCallParsing(ChatFormat::kGemma4, forced).syntax, ToolCallSyntax::kJson);
  EXPECT_EQ(json::parse(ForcedToolCallSchema(forced)),
            json::parse(R"({"type":"object","additionalProperties":false,"required":["tool_call"],"properties":{)"
                        R"("tool_call":{"type":"object","additionalProperties":false,"required":["name","arguments"],)"
                        R"("properties":{"name":{"const":"get_weather"},"arguments":)" +
                        WeatherTool()["function"]["parameters"].dump() + "}}}}"));

  // Tools beside a format (the Agents SDK's output_type): offered freely, the
  // reply is one JSON document, a call or the answer; forced, the call alone.
  const json fmt = {{"type", "json_object"}};
  const CompletionRequest both =
      ParseCompletionRequest(Chat({{"messages", msgs}, {"tools", {WeatherTool()}}, {"response_format", fmt}}), true);
  EXPECT_NE(BuildRequest(both, f.ctx(true, 4096)).grammar, nullptr);
  const CompletionRequest forced_fmt = ParseCompletionRequest(
      Chat({{"messages", msgs}, {"tools", {WeatherTool()}}, {"tool_choice", "required"}, {"response_format", fmt}}),
      true);
  EXPECT_NE(BuildRequest(forced_fmt, f.ctx(true, 4096)).grammar, nullptr);
}

// A schema written inside another keeps its local references pointing into
// itself (pydantic's "#/$defs/..."), and data that looks like one is left.
TEST(OpenAiRequest, EmbeddedSchemasKeepTheirReferences) {
  const json params = json::parse(R"({"$defs": {"Loc": {"type": "object", "properties": {"next": {"$ref": "#"},
      "const": {"$ref": "#/$defs/Loc"}}}}, "type": "object", "properties": {"at": {"$ref": "#/$defs/Loc"},
      "tag": {"const": {"$ref": "#/$defs/Loc"}}}})");
  json with_remote = params;
  with_remote["properties"]["other"] = {{"$ref", "https://x/y#/a"}};
  const json moved = json::parse(EmbedSchemaRefs(with_remote.dump(), "#/anyOf/1"));
  EXPECT_EQ(moved["properties"]["at"]["$ref"], "#/anyOf/1/$defs/Loc");
  EXPECT_EQ(moved["$defs"]["Loc"]["properties"]["next"]["$ref"], "#/anyOf/1");
  EXPECT_EQ(moved["$defs"]["Loc"]["properties"]["const"]["$ref"], "#/anyOf/1/$defs/Loc");  // a property, a schema
  EXPECT_EQ(moved["properties"]["tag"]["const"]["$ref"], "#/$defs/Loc");                   // data
  EXPECT_EQ(moved["properties"]["other"]["$ref"], "https://x/y#/a");
  EXPECT_THROW(EmbedSchemaRefs("{", "#"), Error);

  // Forced calls of two tools whose parameters use $defs compile (they did
  // not resolve), and so does one beside a format with $defs of its own.
  Fixture f;
  json a = {{"type", "function"}, {"function", {{"name", "a"}, {"parameters", params}}}};
  json b = a;
  b["function"]["name"] = "b";
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "b"}}}}}) {
    const CompletionRequest req =
        ParseCompletionRequest(Chat({{"messages", msgs}, {"tools", {a, b}}, {"tool_choice", choice}}), true);
    EXPECT_NE(BuildRequest(req, f.ctx(true, 4096)).grammar, nullptr) << choice;
  }
  const json fmt = {{"type", "json_schema"}, {"json_schema", {{"name", "o"}, {"schema", params}}}};
  const CompletionRequest both =
      ParseCompletionRequest(Chat({{"messages", msgs}, {"tools", {a}}, {"response_format", fmt}}), true);
  EXPECT_NE(BuildRequest(both, f.ctx(true, 4096)).grammar, nullptr);
}

}  // namespace
}  // namespace kvshare::server
