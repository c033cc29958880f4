// Response bodies (server/openai_response.h) and the Prometheus text
// (server/metrics.h): SSE framing, chunk order, include_usage, logprobs
// shapes for chat and completions, error events, metric lines.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/tokenizer/tokenizer.h"
#include "metrics.h"
#include "openai_response.h"
#include "tokenizer_tiny_vocab.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

// The JSON payloads of an SSE text ("data: {...}\n\n" ... "data: [DONE]\n\n").
std::vector<std::string> Events(const std::string& sse) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < sse.size()) {
    const std::size_t end = sse.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "unterminated event in: " << sse;
    if (end == std::string::npos) break;
    const std::string ev = sse.substr(at, end - at);
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    out.push_back(ev.substr(6));
    at = end + 2;
  }
  return out;
}

RequestEvent Text(const std::string& text, std::int32_t token) {
  RequestEvent e;
  e.text = text;
  OutputToken t;
  t.token = token;
  t.text = text;
  t.logprob = -0.5f;
  t.top = {{token, -0.5f}, {5, -1.25f}};
  e.tokens.push_back(t);
  return e;
}

RequestEvent Finish(FinishReason r) {
  RequestEvent e;
  e.finished = true;
  e.reason = r;
  e.usage = {.prompt_tokens = 7, .completion_tokens = 2, .cached_tokens = 4};
  return e;
}

TEST(OpenAiResponse, ChatStreamWithUsage) {
  const Tokenizer tok(testing::TinyVocab(50));
  CompletionRequest req;
  req.chat = true;
  req.include_usage = true;
  CompletionFormatter f(req, "chatcmpl-1", 100, "tiny", tok);
  std::string sse = f.StreamStart();  // one call per statement: the formatter keeps state
  sse += f.StreamEvent(Text("a", 49));
  sse += f.StreamEvent(RequestEvent{});
  sse += f.StreamEvent(Finish(FinishReason::kLength));
  const std::vector<std::string> ev = Events(sse);
  ASSERT_EQ(ev.size(), 5u);  // role, content, finish, usage, [DONE]; an empty event adds nothing
  const json role = json::parse(ev[0]), content = json::parse(ev[1]), fin = json::parse(ev[2]),
             usage = json::parse(ev[3]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(role["usage"].is_null());
  EXPECT_EQ(content["choices"][0]["delta"]["content"], "a");
  EXPECT_TRUE(content["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(content["choices"][0]["logprobs"].is_null());  // not asked for
  EXPECT_EQ(fin["choices"][0]["delta"], json::object());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_EQ(usage["usage"]["total_tokens"], 9);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(ev[4], "[DONE]");
  for (const json& j : {role, content, fin, usage}) {
    EXPECT_EQ(j["id"], "chatcmpl-1");
    EXPECT_EQ(j["model"], "tiny");
    EXPECT_EQ(j["created"], 100);
  }
}

TEST(OpenAiResponse, CompletionStreamWithoutUsageAndWithLogprobs) {
  const Tokenizer tok(testing::TinyVocab(50));
  CompletionRequest req;
  req.logprobs = true;
  req.top_logprobs = 2;
  CompletionFormatter f(req, "cmpl-1", 100, "tiny", tok);
  EXPECT_EQ(f.StreamStart(), "");
  std::string sse = f.StreamEvent(Text("ab", 49));
  sse += f.StreamEvent(Text("c", 48));
  sse += f.StreamEvent(Finish(FinishReason::kStop));
  const std::vector<std::string> ev = Events(sse);
  ASSERT_EQ(ev.size(), 4u);
  const json a = json::parse(ev[0]), c = json::parse(ev[1]), fin = json::parse(ev[2]);
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_FALSE(a.contains("usage"));
  EXPECT_EQ(a["choices"][0]["text"], "ab");
  EXPECT_EQ(a["choices"][0]["logprobs"]["tokens"], json::array({"a"}));  // token 49 is "a" (TinyVocab: '0' + 49)
  EXPECT_EQ(a["choices"][0]["logprobs"]["token_logprobs"], json::array({-0.5}));
  EXPECT_EQ(a["choices"][0]["logprobs"]["top_logprobs"][0], json({{"a", -0.5}, {"5", -1.25}}));
  EXPECT_EQ(a["choices"][0]["logprobs"]["text_offset"], json::array({0}));
  EXPECT_EQ(c["choices"][0]["logprobs"]["text_offset"], json::array({2}));  // after "ab"
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(ev[3], "[DONE]");
}

TEST(OpenAiResponse, NonStreamingObjectsAndErrors) {
  const Tokenizer tok(testing::TinyVocab(50));
  CompletionRequest req;
  req.chat = true;
  req.logprobs = true;
  CompletionFormatter f(req, "chatcmpl-2", 5, "tiny", tok);
  f.Add(Text("he", 49));
  f.Add(Text("y", 48));
  EXPECT_FALSE(f.finished());
  f.Add(Finish(FinishReason::kAbort));
  ASSERT_TRUE(f.finished());
  const json j = f.Final();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"], json({{"role", "assistant"}, {"content", "hey"}}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");  // OpenAI's values only
  EXPECT_EQ(j["choices"][0]["kvshare_abort"], "abort");
  const json& lp = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 2u);
  EXPECT_EQ(lp[0]["token"], "a");
  EXPECT_EQ(lp[0]["bytes"], json::array({97}));
  EXPECT_EQ(lp[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(j["usage"]["total_tokens"], 9);
  // An internal error after the stream started: an error event, then [DONE].
  RequestEvent err = Finish(FinishReason::kAbort);
  err.error = true;
  err.detail = "internal error: boom";
  const std::vector<std::string> ev = Events(f.StreamEvent(err));
  ASSERT_EQ(ev.size(), 2u);
  const json e = json::parse(ev[0]);
  EXPECT_EQ(e["error"]["message"], "internal error: boom");
  EXPECT_EQ(e["error"]["type"], "server_error");
  EXPECT_EQ(ev[1], "[DONE]");
}

TEST(Metrics, PrometheusText) {
  SchedulerStats s;
  s.slots = 8;
  s.active_slots = 3;
  s.queue_depth = 2;
  s.requests_accepted = 10;
  s.prompt_cache_hits = 4;
  s.kv_bytes = 1000;
  s.kv_bytes_used = 250;
  s.recent_decode_tokens_per_second = 12.5;
  HttpStats h;
  h.responses_by_status = {{200, 9}, {503, 1}};
  h.connections_waiting = 5;
  const GrammarCacheStats g{.hits = 7, .misses = 3, .evictions = 1, .entries = 2, .bytes = 4096};
  const std::string t = PrometheusText(s, h, g);
  for (const char* line :
       {"kvshare_requests_total 10\n", "kvshare_active_slots 3\n", "kvshare_queue_depth 2\n", "kvshare_slots 8\n",
        "kvshare_prompt_cache_hits_total 4\n", "kvshare_kv_cache_bytes 1000\n", "kvshare_kv_cache_used_bytes 250\n",
        "kvshare_decode_tokens_per_second 12.5\n", "# TYPE kvshare_requests_total counter\n",
        "# TYPE kvshare_queue_depth gauge\n", "kvshare_http_responses_total{code=\"503\"} 1\n",
        "kvshare_prefill_tokens_per_second 0\n", "kvshare_http_connections_waiting 5\n",
        "kvshare_grammar_cache_hits_total 7\n", "kvshare_grammar_cache_misses_total 3\n",
        "kvshare_grammar_cache_evictions_total 1\n", "kvshare_grammar_cache_entries 2\n",
        "kvshare_grammar_cache_bytes 4096\n", "# TYPE kvshare_grammar_cache_hits_total counter\n"}) {
    EXPECT_NE(t.find(line), std::string::npos) << line << " in\n" << t;
  }
}

// ---- Tool calls ----

CompletionRequest ToolRequest(bool stream) {
  CompletionRequest req;
  req.chat = true;
  req.stream = stream;
  return req;
}

const ToolCallParserOptions kJsonCalls{ToolCallSyntax::kJson, {"f", "g"}};

TEST(OpenAiResponse, ToolCallsNonStreaming) {
  const Tokenizer tok(testing::TinyVocab(50));
  CompletionFormatter fmt(ToolRequest(false), "chatcmpl-x", 1, "tiny", tok);
  fmt.EnableToolCalls(kJsonCalls);
  fmt.Add(Text(R"({"tool_calls": [{"name": "f", "arguments": {"a": 1}},)", 10));
  fmt.Add(Text(R"( {"name": "g", "arguments": {}}]})", 11));
  fmt.Add(Finish(FinishReason::kStop));
  const json j = fmt.Final();
  const json& m = j["choices"][0]["message"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(m["content"].is_null());
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"a":1})");
  EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], "{}");
  const std::string id = m["tool_calls"][0]["id"];
  EXPECT_EQ(id.size(), 29u);
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_NE(m["tool_calls"][1]["id"], m["tool_calls"][0]["id"]);

  // Text that is not a call stays content, and finish_reason stays "stop".
  CompletionFormatter text(ToolRequest(false), "chatcmpl-y", 1, "tiny", tok);
  text.EnableToolCalls(kJsonCalls);
  text.Add(Text("Sets like {1} are fine.", 10));
  text.Add(Finish(FinishReason::kStop));
  const json t = text.Final();
  EXPECT_EQ(t["choices"][0]["message"]["content"], "Sets like {1} are fine.");
  EXPECT_FALSE(t["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(t["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAiResponse, ToolCallsStreamIndexIdNameThenArguments) {
  const Tokenizer tok(testing::TinyVocab(50));
  CompletionFormatter fmt(ToolRequest(true), "chatcmpl-x", 1, "tiny", tok);
  fmt.EnableToolCalls(kJsonCalls);
  std::string sse = fmt.StreamStart();
  sse += fmt.StreamEvent(Text("Calling.\n", 10));
  sse += fmt.StreamEvent(Text(R"({"tool_call": {"name": "g", )", 11));
  RequestEvent last = Text(R"("arguments": {"x": [true]}}})", 12);
  const RequestEvent fin = Finish(FinishReason::kStop);
  last.finished = true;
  last.usage = fin.usage;
  sse += fmt.StreamEvent(last);
  const std::vector<std::string> ev = Events(sse);
  ASSERT_EQ(ev.size(), 6u) << sse;
  EXPECT_EQ(json::parse(ev[1])["choices"][0]["delta"], json({{"content", "Calling."}}));
  const json first = json::parse(ev[2])["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["type"], "function");
  EXPECT_EQ(first["function"]["name"], "g");
  EXPECT_EQ(first["function"]["arguments"], "");
  EXPECT_EQ(first["id"].get<std::string>().rfind("call_", 0), 0u);
  const json args = json::parse(ev[3])["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(args, json({{"index", 0}, {"function", {{"arguments", R"({"x":[true]})"}}}}));
  EXPECT_EQ(json::parse(ev[4])["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(ev[5], "[DONE]");
}

// Gemma 4's call markers are control tokens with no text: the formatter
// writes them back in from the token ids.
TEST(OpenAiResponse, Gemma4MarkerTokensBecomeCalls) {
  VocabData v = testing::TinyVocab(50);
  for (const char* m : {"<|tool_call>", "<tool_call|>", "<|\"|>"}) {
    v.tokens.emplace_back(m);
    v.token_types.push_back(static_cast<int32_t>(TokenType::kControl));
    v.scores.push_back(0.0f);
  }
  const Tokenizer tok(v);
  const std::int32_t open = 50, close = 51, quote = 52;
  CompletionFormatter fmt(ToolRequest(false), "chatcmpl-x", 1, "tiny", tok);
  fmt.EnableToolCalls({ToolCallSyntax::kGemma4, {"f"}});
  RequestEvent e;
  auto add = [&e](std::int32_t id, const std::string& text) {
    OutputToken t;
    t.token = id;
    t.text = text;
    e.tokens.push_back(t);
    e.text += text;
  };
  add(10, "Hi.");
  add(open, "");
  add(11, "call:f{k:");
  add(quote, "");
  add(12, "v");
  add(quote, "");
  add(13, "}");
  add(close, "");
  e.finished = true;
  fmt.Add(e);
  const json m = fmt.Final()["choices"][0]["message"];
  EXPECT_EQ(m["content"], "Hi.");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"k":"v"})");
}

}  // namespace
}  // namespace kvshare::server
