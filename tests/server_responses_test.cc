// The Responses API's pieces without a model (server/responses_request.h,
// responses_format.h, response_store.h): the mapping of a Responses body onto
// the chat body (checked by the chat parser itself), the refusals and their
// param, error renaming, the response object, the event order of a chat
// stream split at every byte, and the store's bound.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "openai_request.h"
#include "response_store.h"
#include "responses_format.h"
#include "responses_request.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

ResponsesRequest Parse(const std::string& body, const ResponseStore& store, bool strict = false) {
  return ParseResponsesRequest(json::parse(body), body, store, {.strict = strict});
}

// The 400's param for `body`, or "" when it is accepted.
std::string Refusal(const std::string& body) {
  ResponseStore store(4);
  try {
    Parse(body, store);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    return e.param().value_or("(none)");
  }
  return "";
}

TEST(ResponseStore, EvictsTheOldestBeyondItsCapacity) {
  ResponseStore store(2);
  for (const char* id : {"a", "b", "c"}) store.Put(id, {json{{"id", id}}, json::array()});
  EXPECT_FALSE(store.Get("a"));
  ASSERT_TRUE(store.Get("b"));
  EXPECT_EQ(store.Get("c")->response["id"], "c");
  store.Put("b", {json{{"id", "b2"}}, json::array()});  // replaced in place: c stays
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.Get("b")->response["id"], "b2");
  EXPECT_TRUE(store.Erase("b"));
  EXPECT_FALSE(store.Erase("b"));
  store.Put("d", {json::object(), json::array()});
  store.Put("e", {json::object(), json::array()});  // c goes: the erased b left the order too
  EXPECT_FALSE(store.Get("c"));
  EXPECT_TRUE(store.Get("d") && store.Get("e"));
  ResponseStore none(0);
  none.Put("a", {json::object(), json::array()});
  EXPECT_FALSE(none.Get("a"));
}

TEST(ResponsesRequest, MapsInputItemsToolsAndFormatOntoAChatBody) {
  ResponseStore store(4);
  const std::string body = R"({"model": "m", "instructions": "Be brief", "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "look up a"}]},
      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
       "content": [{"type": "output_text", "text": "Sure.", "annotations": []}]},
      {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup", "arguments": "{\"k\":\"a\"}"},
      {"type": "function_call", "call_id": "call_2", "name": "lookup", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "42"},
      {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "7"}]}],
    "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "lookup"},
    "max_output_tokens": 9, "temperature": 0.5, "seed": 3, "metadata": {"k": "v"}, "user": "u", "store": false})";
  const ResponsesRequest r = Parse(body, store);
  const json chat = json::parse(r.chat_body);
  ASSERT_EQ(chat["messages"].size(), 5u);
  EXPECT_EQ(chat["messages"][0], json({{"role", "system"}, {"content", "Be brief"}}));
  EXPECT_EQ(chat["messages"][2]["content"][0]["text"], "Sure.");
  EXPECT_EQ(chat["messages"][2]["tool_calls"].size(), 2u);  // both calls join the assistant message
  EXPECT_EQ(chat["messages"][2]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(chat["messages"][3]["role"], "tool");
  EXPECT_EQ(chat["messages"][4]["content"][0]["text"], "7");
  EXPECT_EQ(r.sources, (std::vector<std::string>{"instructions", "input[0]", "input[1]", "input[4]", "input[5]"}));
  EXPECT_EQ(r.history.size(), 4u);                          // no instructions
  EXPECT_EQ(chat["tools"][0]["function"]["strict"], true);  // OpenAI's default for Responses
  EXPECT_EQ(r.echo["tools"][0]["strict"], true);
  EXPECT_EQ(chat["tool_choice"]["function"]["name"], "lookup");
  EXPECT_EQ(chat["max_completion_tokens"], 9);
  EXPECT_EQ(r.echo["metadata"]["k"], "v");
  EXPECT_FALSE(r.store);
  // The chat parser takes the body as it is.
  const CompletionRequest cr = ParseCompletionRequest(chat, true, {.strict = true});
  EXPECT_EQ(cr.messages.size(), 5u);
  EXPECT_EQ(cr.tool_choice.mode, CompletionRequest::ToolChoice::Mode::kFunction);
  EXPECT_TRUE(cr.ignored.empty());
}

TEST(ResponsesRequest, TextFormatBecomesResponseFormatInTheRequestsKeyOrder) {
  ResponseStore store(4);
  const ResponsesRequest r =
      Parse(R"({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "x",
      "schema": {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "string"}}}}}})",
            store);
  // The schema keeps the request's key order (z before a) for the grammar.
  EXPECT_LT(r.chat_body.find("\"z\""), r.chat_body.find("\"a\""));
  EXPECT_EQ(r.echo["text"]["format"]["name"], "x");
  CompletionRequest cr = ParseCompletionRequest(json::parse(r.chat_body), true, {.strict = true});
  KeepSchemaKeyOrder(cr, r.chat_body);
  EXPECT_EQ(cr.response_format.type, CompletionRequest::ResponseFormat::Type::kJsonSchema);
  EXPECT_LT(cr.response_format.schema.find("\"z\""), cr.response_format.schema.find("\"a\""));
  const json chat =
      json::parse(Parse(R"({"input": "x", "text": {"format": {"type": "json_object"}}})", store).chat_body);
  EXPECT_EQ(chat["response_format"]["type"], "json_object");
}

TEST(ResponsesRequest, StreamsAskForUsageAndAStringIsOneUserMessage) {
  ResponseStore store(4);
  const ResponsesRequest r = Parse(R"({"input": "hi", "stream": true})", store);
  const json chat = json::parse(r.chat_body);
  EXPECT_EQ(chat["messages"], json::parse(R"([{"role": "user", "content": "hi"}])"));
  EXPECT_EQ(chat["stream_options"]["include_usage"], true);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.store);
}

TEST(ResponsesRequest, RefusesWhatItDoesNotServeNamingTheField) {
  EXPECT_EQ(Refusal(R"({"input": "x"})"), "");
  EXPECT_EQ(Refusal(R"({})"), "input");
  EXPECT_EQ(Refusal(R"({"input": 3})"), "input");
  EXPECT_EQ(Refusal(R"({"input": "x", "tools": [{"type": "web_search"}]})"), "tools[0].type");
  EXPECT_EQ(Refusal(R"({"input": "x", "tools": [{"type": "function"}]})"), "tools[0].name");
  EXPECT_EQ(Refusal(R"({"input": "x", "reasoning": {"effort": "high"}})"), "reasoning.effort");
  EXPECT_EQ(Refusal(R"({"input": "x", "reasoning": {}})"), "");
  EXPECT_EQ(Refusal(R"({"input": "x", "background": true})"), "background");
  EXPECT_EQ(Refusal(R"({"input": "x", "background": false})"), "");
  EXPECT_EQ(Refusal(R"({"input": "x", "include": ["reasoning.encrypted_content"]})"), "include");
  EXPECT_EQ(Refusal(R"({"input": "x", "truncation": "auto"})"), "truncation");
  EXPECT_EQ(Refusal(R"({"input": "x", "previous_response_id": "resp_gone"})"), "previous_response_id");
  EXPECT_EQ(Refusal(R"({"input": [{"type": "item_reference", "id": "x"}]})"), "input[0].type");
  EXPECT_EQ(Refusal(R"({"input": [{"role": "tool", "content": "x"}]})"), "input[0].role");
  EXPECT_EQ(Refusal(R"({"input": [{"role": "user", "content": [{"type": "input_file"}]}]})"),
            "input[0].content[0].type");
  EXPECT_EQ(Refusal(R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})"), "input[0].call_id");
  EXPECT_EQ(Refusal(R"({"input": "x", "tool_choice": {"type": "web_search"}})"), "tool_choice.type");
  EXPECT_EQ(Refusal(R"({"input": "x", "metadata": {"k": 1}})"), "metadata.k");
  ResponseStore store(4);
  EXPECT_NO_THROW(Parse(R"({"input": "x", "frobnicate": 1})", store));
  try {
    Parse(R"({"input": "x", "frobnicate": 1})", store, /*strict=*/true);
    ADD_FAILURE() << "strict takes an unknown field";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "frobnicate");
  }
}

TEST(ResponsesRequest, PreviousResponseContinuesItsConversationWithoutItsInstructions) {
  ResponseStore store(4);
  const json history = json::parse(R"([{"role": "user", "content": "q"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "f", "arguments": "{}"}}]}])");
  store.Put("resp_1", {json::object(), history});
  const ResponsesRequest r = Parse(R"({"previous_response_id": "resp_1", "instructions": "new",
      "input": [{"type": "function_call_output", "call_id": "call_1", "output": "ok"}]})",
                                   store);
  const json chat = json::parse(r.chat_body);
  ASSERT_EQ(chat["messages"].size(), 4u);
  EXPECT_EQ(chat["messages"][0]["content"], "new");
  EXPECT_EQ(chat["messages"][3]["tool_call_id"], "call_1");
  EXPECT_EQ(r.history.size(), 3u);
  EXPECT_EQ(r.echo["previous_response_id"], "resp_1");
  EXPECT_NO_THROW(ParseCompletionRequest(chat, true));
}

TEST(ResponsesRequest, ChatErrorsGetTheResponsesNames) {
  ResponsesRequest r;
  r.sources = {"instructions", "previous_response_id", "input[3]"};
  const ApiError e =
      RenameChatError(BadRequest("Invalid 'messages[2].tool_call_id' and messages[0].", "messages[2].tool_call_id"), r);
  EXPECT_EQ(e.param(), "input[3].tool_call_id");
  EXPECT_EQ(e.message(), "Invalid 'input[3].tool_call_id' and instructions.");
  EXPECT_EQ(RenameChatError(BadRequest("x", "response_format.json_schema.schema"), r).param(), "text.format.schema");
  EXPECT_EQ(RenameChatError(BadRequest("x", "tools[1].function.parameters"), r).param(), "tools[1].parameters");
  EXPECT_EQ(RenameChatError(BadRequest("x", "max_completion_tokens"), r).param(), "max_output_tokens");
}

ResponseHead Head() { return {"resp_x", 7, "m", json{{"metadata", json::object()}}}; }

TEST(ResponsesFormat, ResponseFromAChatCompletion) {
  const json calls = json::parse(R"({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
      "role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "f", "arguments": "{\"a\":1}"}}]}}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}}})");
  const json r = ResponseFromChat(calls, Head());
  EXPECT_EQ(r["status"], "completed");
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["type"], "function_call");
  EXPECT_EQ(r["output"][0]["call_id"], "call_1");
  EXPECT_EQ(r["usage"]["total_tokens"], 8);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(OutputMessages(r)[0]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
  const json cut = json::parse(R"({"choices": [{"index": 0, "finish_reason": "length",
      "message": {"role": "assistant", "content": "ab"}}], "usage": {"prompt_tokens": 1, "completion_tokens": 2}})");
  const json i = ResponseFromChat(cut, Head());
  EXPECT_EQ(i["status"], "incomplete");
  EXPECT_EQ(i["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(i["output"][0]["content"][0]["text"], "ab");
  EXPECT_EQ(OutputMessages(i)[0]["content"], "ab");
}

// A chat stream: text, then a call, a finish, usage, [DONE].
std::string ChatStream() {
  auto data = [](const std::string& j) { return "data: " + j + "\n\n"; };
  std::string s = data(R"({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})");
  s += data(R"({"choices": [{"index": 0, "delta": {"content": "He"}}]})");
  s += data(R"({"choices": [{"index": 0, "delta": {"content": "llo"}}]})");
  s += data(R"({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
      "function": {"name": "f", "arguments": ""}}]}}]})");
  s += data(R"({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
      "function": {"arguments": "{}"}}]}}]})");
  s += data(R"({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})");
  s += data(R"({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 6}})");
  return s + "data: [DONE]\n\n";
}

std::vector<json> Events(const std::string& sse) {
  std::vector<json> out;
  std::size_t pos = 0, end;
  while ((end = sse.find("\n\n", pos)) != std::string::npos) {
    const std::string ev = sse.substr(pos, end - pos);
    pos = end + 2;
    const std::size_t nl = ev.find('\n');
    json j = json::parse(ev.substr(nl + 7));     // "\ndata: "
    EXPECT_EQ(ev.substr(7, nl - 7), j["type"]);  // "event: " names the data's type
    out.push_back(std::move(j));
  }
  return out;
}

TEST(ResponsesFormat, EventsComeInOpenAIsOrderHoweverTheChatStreamIsSplit) {
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  const std::string chat = ChatStream();
  for (std::size_t split = 0; split <= chat.size(); split += 7) {
    ResponseEventStream s(Head());
    std::string sse = s.Start();
    sse += s.Feed(chat.substr(0, split));
    EXPECT_EQ(s.finished(), split == chat.size());
    sse += s.Feed(chat.substr(split));
    ASSERT_TRUE(s.finished());
    const std::vector<json> events = Events(sse);
    ASSERT_EQ(events.size(), want.size());
    for (std::size_t i = 0; i < events.size(); ++i) {
      EXPECT_EQ(events[i]["type"], want[i]);
      EXPECT_EQ(events[i]["sequence_number"], i);
    }
    EXPECT_EQ(events[6]["text"], "Hello");
    EXPECT_EQ(events[11]["arguments"], "{}");
    EXPECT_EQ(events[9]["output_index"], 1);
    const json& r = s.response();
    EXPECT_EQ(r["status"], "completed");
    EXPECT_EQ(r["usage"]["output_tokens"], 6);
    ASSERT_EQ(r["output"].size(), 2u);
    EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hello");
    EXPECT_EQ(r["output"][1]["status"], "completed");
    EXPECT_EQ(events.back()["response"], r);
  }
}

TEST(ResponsesFormat, AStreamCutByMaxTokensIsIncompleteAndAnErrorFails) {
  ResponseEventStream cut(Head());
  std::string sse = cut.Start();
  std::vector<json> ev = Events(
      sse +
      cut.Feed(
          "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"a\"}}]}\n\n"
          "data: {\"choices\": [{\"index\": 0, \"delta\": {}, \"finish_reason\": \"length\"}]}\n\ndata: [DONE]\n\n"));
  EXPECT_EQ(ev.back()["type"], "response.incomplete");
  EXPECT_EQ(cut.response()["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(cut.response()["output"][0]["status"], "incomplete");
  ResponseEventStream failed(Head());
  sse = failed.Start();
  ev = Events(sse + failed.Feed("data: {\"error\": {\"message\": \"boom\"}}\n\ndata: [DONE]\n\n"));
  EXPECT_EQ(ev.back()["type"], "response.failed");
  EXPECT_EQ(failed.response()["error"]["message"], "boom");
}

}  // namespace
}  // namespace kvshare::server
