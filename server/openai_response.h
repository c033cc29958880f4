// OpenAI response bodies for /v1/chat/completions and /v1/completions, built
// from the scheduler's RequestEvents: server-sent events while streaming
// ("data: {json}\n\n" ... "data: [DONE]\n\n") and the whole object otherwise.
//
// Streaming (chat): a first chunk with delta {"role": "assistant", "content":
// ""}, then one chunk per event with text (delta.content, and logprobs.content
// when asked), a last chunk with an empty delta and the finish_reason, then
// with stream_options.include_usage a chunk with "choices": [] and the usage
// (every other chunk has "usage": null), then [DONE]. Completions stream
// "text_completion" chunks with choices[0].text the same way. An internal
// error after the stream started is sent as data: {"error": {...}} before
// [DONE]. finish_reason: "stop", "length", or "abort" (cancelled, vLLM's word).
// One formatter writes one choice (ChoiceOptions: its index, echo,
// max_tokens 0); several are merged by ChoiceSet (choice_set.h), which ends
// the stream once all have finished.
//
// Tool calls (EnableToolCalls): the reply goes through a ToolCallParser
// (kvshare/runtime/tool_calls.h). Non-streaming: message.tool_calls [{"id":
// "call_<24 alphanumerics>", "type": "function", "function": {"name",
// "arguments" (JSON text)}}], content null when the reply is only calls, and
// finish_reason "tool_calls" (unless "length" / "abort"). Streaming: content
// deltas as the parser releases them, and per call two chunks, delta
// {"tool_calls": [{"index", "id", "type", "function": {"name", "arguments":
// ""}}]} then {"tool_calls": [{"index", "function": {"arguments": "<all of
// it>"}}]}; a call is sent once it is complete.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/runtime/scheduler.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "openai_request.h"

namespace kvshare::server {

// Which choice of the response a formatter writes, and how (ChoiceSet,
// choice_set.h, runs one formatter per choice).
struct ChoiceOptions {
  int index = 0;  // choices[].index
  // StreamEvent ends the stream (usage chunk, [DONE]) when this choice
  // finishes; false: the caller does, with StreamEnd, after every choice.
  bool ends_stream = true;
  // Completions' echo: the prompt's text before the choice's text; with
  // logprobs, the prompt's tokens before the choice's (the first with null
  // logprob and top_logprobs; the others from RequestEvent::prompt_logprobs).
  bool echo = false;
  std::string prompt_text;
  std::vector<std::int32_t> prompt;
  // max_tokens 0: the token the scheduler sampled is not part of the choice
  // (no text, no logprobs, not counted in usage); finish_reason "length".
  bool drop_output = false;
};

class CompletionFormatter {
 public:
  // id: "chatcmpl-..." / "cmpl-..."; created: Unix seconds. The tokenizer
  // must outlive the formatter (token text of logprobs).
  CompletionFormatter(const CompletionRequest& request, std::string id, std::int64_t created, std::string model,
                      const Tokenizer& tokenizer, ChoiceOptions choice = {});

  // SSE text to send before any event (chat: the role chunk; completions: "").
  std::string StreamStart() const;
  // SSE text for one event: the content chunk if it has text or tokens; if it
  // finishes the request, the finish chunk, the usage chunk (include_usage)
  // and [DONE]. An internal error (event.error) becomes an error event.
  std::string StreamEvent(const RequestEvent& event) const;

  // The usage chunk (include_usage) and [DONE], for `total` over all choices.
  std::string StreamEnd(const RequestUsage& total) const;

  // Non-streaming: collects events, then Final() is the response object
  // (this choice alone), Choice() this choice's entry of "choices".
  void Add(const RequestEvent& event);
  nlohmann::json Final() const;
  nlohmann::json Choice() const;
  // The usage of this choice (drop_output: no completion tokens).
  RequestUsage Usage() const;
  // Sum of the generated tokens' logprobs and their count (best_of).
  double LogprobSum() const;
  std::size_t TokenCount() const { return tokens_.size(); }
  void set_index(int index) { choice_.index = index; }
  bool finished() const { return finished_; }
  const RequestEvent& last() const { return last_; }

  // Reads tool calls out of the reply with `options`; Gemma 4's markers are
  // control tokens with no text, so their ids are turned back into marker
  // text for the parser. Call before the first event.
  void EnableToolCalls(ToolCallParserOptions options);

  static nlohmann::json UsageJson(const RequestUsage& u);
  static std::string Sse(const nlohmann::json& j);

 private:
  nlohmann::json Chunk(nlohmann::json choice) const;
  nlohmann::json ChatLogprobs(const std::vector<OutputToken>& tokens) const;
  // Completions' logprobs object; offset is the text length before these
  // tokens. With `prompt` (echo), the prompt's tokens come first.
  nlohmann::json CompletionLogprobs(const std::vector<OutputToken>& tokens, std::size_t offset,
                                    const std::vector<OutputToken>* prompt = nullptr) const;
  // Completions' echo chunk / text start: the prompt text, and its logprobs.
  nlohmann::json EchoLogprobs(const std::vector<OutputToken>& prompt_logprobs) const;
  nlohmann::json TokenEntry(std::int32_t id, float logprob) const;
  std::string TokenText(std::int32_t id) const;
  // The event's text with tool-call markers written in (see EnableToolCalls).
  std::string MarkedText(const RequestEvent& event) const;
  nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls) const;
  // Streaming chunks for a parser delta (calls numbered from streamed_calls_).
  std::string DeltaChunks(const ToolCallDelta& delta, const nlohmann::json& logprobs) const;
  // OpenAI's finish_reason values only: a cancelled or drained request
  // (kAbort) is "stop", and AddAbortCause adds "kvshare_abort": its cause.
  const char* ReasonName(kvshare::FinishReason reason, bool calls) const;
  static void AddAbortCause(nlohmann::json& choice, const RequestEvent& e);

  ChoiceOptions choice_;
  bool chat_;
  bool logprobs_;
  bool include_usage_;
  std::string id_;
  std::int64_t created_;
  std::string model_;
  const Tokenizer& tok_;
  // Non-streaming accumulation.
  std::string text_;
  std::vector<OutputToken> tokens_;
  std::vector<OutputToken> prompt_logprobs_;  // echo: RequestEvent::prompt_logprobs
  mutable bool echoed_ = false;               // streaming: the echo chunk was sent
  RequestEvent last_;
  bool finished_ = false;
  mutable std::size_t streamed_bytes_ = 0;  // completions' text_offset while streaming
  // Tool calls: the parser (none: all text is content), marker token texts.
  mutable std::optional<ToolCallParser> parser_;
  std::map<std::int32_t, std::string> markers_;
  mutable std::string content_;          // non-streaming: parsed content
  mutable std::vector<ToolCall> calls_;  // non-streaming: parsed calls, with ids
  mutable std::size_t streamed_calls_ = 0;
};

}  // namespace kvshare::server
