// Parsing and validation of OpenAI request bodies (/v1/chat/completions,
// /v1/completions) into what the scheduler needs, with OpenAI's error
// wording. Every problem throws ApiError (api_error.h) naming the parameter;
// nothing here touches the model except through the tokenizer and template
// the caller passes to BuildRequest.
//
// Accepted (both endpoints): model (the served id; absent: the served model),
// stream, stream_options.include_usage (only with stream), max_tokens,
// temperature [0, 2] (default 1), top_p (0, 1], top_k (>= -1; -1 and 0 are
// off), min_p [0, 1], repetition_penalty (0, 100], seed (integer; default
// random), stop (string or array of up to 16 non-empty strings), ignore_eos
// (vLLM / llama.cpp: generate exactly max_tokens), speculative (kvshare: bool,
// default true; false opts the request out of the server's speculative
// decoding), n (1 only),
// user / metadata / store / service_tier / parallel_tool_calls (ignored),
// presence_penalty and frequency_penalty (0 only), logit_bias (empty only).
// Chat: messages (roles system / developer / user / assistant; content a
// string or an array of {"type": "text", "text"} parts), max_completion_tokens,
// logprobs (bool), top_logprobs [0, 20] (needs logprobs), tools (empty),
// tool_choice ("none" / "auto").
// Completions: prompt (a string, token ids, or a one-element array of
// either), logprobs [0, 20], echo (false), suffix (empty), best_of (1).
// Both: response_format {"type": "text"}, {"type": "json_object"} (any JSON
// object; llama-server's "schema" field there is taken as a json_schema) or
// {"type": "json_schema", "json_schema": {"name", "description", "schema",
// "strict"}} (vLLM's and OpenAI's shape; "schema" absent: any JSON value),
// enforced by constrained decoding (kvshare/grammar.h: the schema subset;
// anything else is a 400 naming the keyword); not with ignore_eos.
// Any other field (top level, in a message or in stream_options) is ignored
// and listed in CompletionRequest::ignored, as vLLM and llama-server ignore
// their clients' extra fields; with RequestParsing::strict (kvshare serve
// --strict-openai) it is a 400 "Unrecognized request argument supplied: NAME"
// and `model` is required, as OpenAI's API has them. Known fields are
// type-checked either way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/chat_template.h"
#include "kvshare/sampler.h"
#include "kvshare/scheduler.h"
#include "kvshare/tokenizer.h"

namespace kvshare::server {

struct CompletionRequest {
  bool chat = false;
  std::string model;
  std::vector<ChatMessage> messages;             // chat
  std::optional<std::string> prompt_text;        // completions
  std::optional<std::vector<std::int32_t>> prompt_tokens;  // completions, as ids
  bool stream = false;
  bool include_usage = false;
  std::optional<int> max_tokens;
  SamplerOptions sampler;                        // temperature default 1.0
  bool seed_given = false;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool speculative = true;
  bool logprobs = false;
  int top_logprobs = 0;
  // response_format: kText (unconstrained), kJsonObject, kJsonSchema.
  struct ResponseFormat {
    enum class Type { kText, kJsonObject, kJsonSchema } type = Type::kText;
    std::string name;    // json_schema.name (informational)
    std::string schema;  // the JSON Schema as JSON text; empty: none (json_object: any object)
    bool strict = false; // json_schema.strict (the schema is enforced either way)
  } response_format;
  std::vector<std::string> ignored;  // unknown fields, by path ("foo", "messages[0].bar")
};

struct RequestParsing {
  // OpenAI's strictness: unknown fields are a 400, `model` is required.
  bool strict = false;
};

// Parses `body` (any JSON value). `chat` picks the endpoint's fields.
// Throws ApiError (400) for wrong types, out-of-range values, unsupported
// options and, with options.strict, unknown fields and a missing model.
CompletionRequest ParseCompletionRequest(const nlohmann::json& body, bool chat, const RequestParsing& options = {});

// The parsed body's objects lose their key order (nlohmann::json sorts
// them); this takes response_format's schema again from the raw body, so
// that properties are generated in the order the schema declares them.
void KeepSchemaKeyOrder(CompletionRequest& req, std::string_view body);

// What the model side needs to turn a request into scheduler input.
struct ModelContext {
  std::string model_id;        // the served name (/v1/models)
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat = nullptr;  // the chat format (kNone: plain completion)
  std::string chat_unavailable;        // why chat requests are refused (format kNone), or empty
  int max_context = 0;                 // per request: prompt + max_tokens
};

// Checks the model name (404 model_not_found; none given: the served one),
// applies the chat template or
// tokenizes the prompt (400 for an empty prompt or ids out of range), picks
// max_tokens (chat: the rest of the context when absent; completions: 16) and
// checks the context (400 context_length_exceeded, OpenAI's message). A
// random seed is drawn when none was given. response_format's schema is
// compiled into RequestOptions::grammar (400 invalid_schema naming what is
// unsupported or wrong).
RequestOptions BuildRequest(const CompletionRequest& req, const ModelContext& ctx);

}  // namespace kvshare::server
