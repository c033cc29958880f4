// Response objects and streamed events of the Responses API (POST
// /v1/responses), translated from what /v1/chat/completions answers for the
// request's chat form (responses_request.h): the chat.completion object, or
// its chat.completion.chunk server-sent events.
//
// The response: {"id": "resp_...", "object": "response", "created_at",
// "status": "completed" | "incomplete" (incomplete_details.reason
// "max_output_tokens"; a cancelled or drained request: "interrupted", its
// cause in "kvshare_abort") | "failed" (streams: an internal error), "model",
// "output": a message item {"id": "msg_...", "type": "message", "role":
// "assistant", "status", "content": [{"type": "output_text", "text",
// "annotations": []}]} when there is text, then one function_call item
// {"id": "fc_...", "type": "function_call", "status": "completed",
// "call_id", "name", "arguments"} per call, "usage": {"input_tokens",
// "input_tokens_details": {"cached_tokens"}, "output_tokens",
// "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens"}, and the
// request's fields (instructions, tools, metadata, ...)}.
//
// Streaming, "event: TYPE\ndata: {..., "type", "sequence_number"}\n\n" in
// OpenAI's order: response.created, response.in_progress; for text
// response.output_item.added, response.content_part.added,
// response.output_text.delta ..., response.output_text.done,
// response.content_part.done, response.output_item.done; per call
// response.output_item.added, response.function_call_arguments.delta,
// response.function_call_arguments.done, response.output_item.done; then
// response.completed (or response.incomplete, response.failed) with the
// whole response. No [DONE].
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvshare::server {

struct ResponseHead {
  std::string id;  // "resp_..."
  std::int64_t created_at = 0;
  std::string model;
  nlohmann::json echo;  // ResponsesRequest::echo
};

// A new id: prefix ("resp_", "msg_", "fc_") and 32 hexadecimal digits.
std::string NewResponseId(const char* prefix);

// The response for a finished chat.completion object.
nlohmann::json ResponseFromChat(const nlohmann::json& completion, const ResponseHead& head);

// A response's output as chat messages (an assistant message with its text
// and tool calls), for the store.
nlohmann::json OutputMessages(const nlohmann::json& response);

// A request's `input` (a string or checked items, responses_request.h) as
// OpenAI's input items for GET /v1/responses/{id}/input_items: each with an
// id (the item's own, else a new "msg_" / "fc_" / "fco_" one) and status
// "completed"; a string content becomes one input_text part (output_text
// with annotations for an assistant).
nlohmann::json InputItems(const nlohmann::json& input);

// Translates a chat stream into Responses events.
class ResponseEventStream {
 public:
  explicit ResponseEventStream(ResponseHead head);

  // response.created and response.in_progress.
  std::string Start();
  // The events for the chat SSE text `sse` (any split: an incomplete event
  // waits for the rest); after the chat stream's [DONE], the last event.
  std::string Feed(std::string_view sse);
  bool finished() const { return finished_; }
  // The final response (status completed, incomplete or failed) once finished.
  const nlohmann::json& response() const { return response_; }

 private:
  std::string Event(const char* type, nlohmann::json fields);
  std::string Chunk(const nlohmann::json& chunk);
  std::string OpenMessage();
  std::string CloseMessage();
  std::string Finish();

  ResponseHead head_;
  std::string pending_;  // chat SSE text not yet a whole event
  std::int64_t seq_ = 0;
  nlohmann::json output_ = nlohmann::json::array();
  nlohmann::json usage_;
  int message_ = -1;  // output index of the open message, or -1
  std::string text_;  // the open message's text
  int call_ = -1;     // output index of the call awaiting its arguments, or -1
  std::string finish_reason_;
  nlohmann::json abort_;  // kvshare_abort, or null
  nlohmann::json error_;  // an error event's error, or null
  bool finished_ = false;
  nlohmann::json response_;
};

}  // namespace kvshare::server
