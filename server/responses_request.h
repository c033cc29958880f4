// POST /v1/responses bodies (OpenAI's Responses API) mapped onto the chat
// request /v1/chat/completions serves (openai_request.h), so that both share
// one parser, prompt builder, tool and schema handling.
//
// Accepted: model, input (a string, or an array of items: messages {"type":
// "message" (optional), "role": user / system / developer / assistant,
// "content": a string or parts input_text / output_text {"text"} and
// input_image {"image_url": "data:..."}}, function_call {"call_id", "name",
// "arguments"} and function_call_output {"call_id", "output": a string or
// input_text parts}; an item's id / status and a part's annotations /
// logprobs are taken and dropped, as the SDK sends a response's output back
// as input), instructions (a system message, not carried over by
// previous_response_id, as OpenAI), tools (function tools in the Responses'
// flat shape {"type": "function", "name", "description", "parameters",
// "strict" (default true, as OpenAI: the parameters must compile as a
// grammar)}), tool_choice ("auto", "none", "required", {"type": "function",
// "name"}), parallel_tool_calls, text.format ({"type": "text"},
// {"type": "json_object"}, {"type": "json_schema", "name", "schema",
// "description", "strict"}), max_output_tokens, temperature, top_p, seed,
// stream, metadata (up to 16 string values, echoed), store (default true),
// previous_response_id (a stored response; unknown or evicted: 400 naming
// it), truncation "disabled", background false, reasoning null or without an
// effort; user, safety_identifier, prompt_cache_key, service_tier,
// stream_options and text.verbosity are ignored.
// Refused with a 400 naming the field: built-in tools (web_search,
// file_search, ...), reasoning effort, background true, truncation "auto",
// include, conversation, prompt, max_tool_calls, top_logprobs, input_file /
// file ids, item references and reasoning items. Other unknown fields:
// ignored and listed (strict: 400), as on the chat endpoints.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api_error.h"
#include "openai_request.h"
#include "response_store.h"

namespace kvshare::server {

struct ResponsesRequest {
  // The /v1/chat/completions body it maps onto, as JSON text (the schema of
  // text.format keeps the request's key order; stream_options.include_usage
  // is set when streaming, for the usage of response.completed).
  std::string chat_body;
  // The request fields the response object repeats (instructions, tools,
  // metadata, temperature, ...), in OpenAI's names and defaults.
  nlohmann::json echo;
  // The conversation so far as chat messages (previous_response_id's, then
  // this input), without instructions: what the store keeps with the output.
  nlohmann::json history = nlohmann::json::array();
  // This request's input as OpenAI's input items (InputItems, responses_format.h).
  nlohmann::json input_items = nlohmann::json::array();
  // Per message of chat_body: the request field it came from
  // ("instructions", "input[2]", "previous_response_id"), for errors.
  std::vector<std::string> sources;
  std::vector<std::string> ignored;  // unknown fields, by path
  bool stream = false;
  bool store = true;
};

// Parses and checks `body` (`raw`: its text, for the schema's key order).
// Throws ApiError 400 naming the field for wrong shapes, refused features
// and an unknown previous_response_id; values the chat parser checks
// (temperature's range, a schema's keywords, ...) are checked when the chat
// body is parsed, and RenameChatError names their Responses field.
ResponsesRequest ParseResponsesRequest(const nlohmann::json& body, std::string_view raw, const ResponseStore& store,
                                       const RequestParsing& options);

// An error of the chat parser with the Responses' names: messages[i] becomes
// its source, response_format text.format, max_completion_tokens
// max_output_tokens, tools[i].function tools[i].
ApiError RenameChatError(const ApiError& e, const ResponsesRequest& req);

}  // namespace kvshare::server
