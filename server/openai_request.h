// Parsing and validation of OpenAI request bodies (/v1/chat/completions,
// /v1/completions) into what the scheduler needs, with OpenAI's error
// wording. Every problem throws ApiError (api_error.h) naming the parameter;
// nothing here touches the model except through the tokenizer and template
// the caller passes to BuildRequest. What a chat format makes of tools (the
// prompt, the call syntax, the grammar) is the runtime's
// (kvshare/runtime/chat_template.h); this layer reads OpenAI's JSON.
// Files: openai_request.cc (the body, sampling fields, the prompt),
// request_fields.* (typed field readers), request_messages.* (messages),
// request_tools.* (tools, tool_choice), response_format.* (response_format),
// build_request.cc (BuildRequest).
//
// Accepted (both endpoints): model (the served id; absent: the served model),
// stream, stream_options.include_usage (only with stream), max_tokens,
// temperature [0, 2] (default 1), top_p (0, 1], top_k (>= -1; -1 and 0 are
// off), min_p [0, 1], repetition_penalty (0, 100], presence_penalty and
// frequency_penalty [-2, 2] (OpenAI's, over the tokens generated so far:
// applied after repetition_penalty, kvshare/runtime/sampler.h), seed (integer; default
// random), stop (string or array of up to 16 non-empty strings), ignore_eos
// (vLLM / llama.cpp: generate exactly max_tokens), logit_bias ({"<token id>":
// bias in [-100, 100]}, added to the logits before the sampler), speculative (kvshare: bool,
// default true; false opts the request out of the server's speculative
// decoding), n (below),
// user / metadata / store / service_tier (ignored).
// Chat: messages (roles system / developer / user / assistant; content a
// string or an array of {"type": "text", "text"} and {"type": "image_url",
// "image_url": {"url": "data:image/png;base64,..."}} parts: several images per
// message and conversation, with kvshare serve --mmproj; http(s) URLs are
// refused), max_soft_tokens (kvshare / Gemma 4: an image's token budget, 70,
// 140, 280, 560 or 1120), max_completion_tokens,
// logprobs (bool), top_logprobs [0, 20] (needs logprobs).
// Chat tools: tools (an array of {"type": "function", "function": {"name"
// ([A-Za-z0-9_-]{1,64}, unique), "description", "parameters" (an object),
// "strict" (its parameters must compile as a grammar: a 400 names an
// unsupported keyword)}}), tool_choice ("auto" (default with tools), "none"
// (tools not offered, replies not parsed), "required", or {"type":
// "function", "function": {"name"}} naming one of the tools), and
// parallel_tool_calls (bool, default true); assistant messages may carry
// tool_calls ([{"id", "type": "function", "function": {"name", "arguments"
// (JSON text)}}], content null or absent) and "tool" messages answer them
// (tool_call_id required, content). How they are written and read back:
// kvshare/runtime/chat_template.h and kvshare/runtime/tool_calls.h; "required" and a named
// function are enforced by a grammar (see BuildRequest); under "auto", strict
// tools by a lazy grammar from the call's opening on (ChatTemplate::ToolCallGrammar). Beside a
// JSON response_format under "auto", one grammar makes the reply a JSON call
// (ForcedToolCallSchema's shape) or the format's document (BuildRequest).
// Completions: prompt (a string, an array of token ids, or an array of
// strings or of token-id arrays: one set of choices per prompt, choice
// index = prompt_index * n + i as OpenAI numbers them), logprobs [0, 20],
// echo (the prompt's text before each choice's; with logprobs, the prompt
// tokens' logprobs in front, the first one null, OpenAI's legacy format),
// max_tokens 0 (nothing generated: with echo and logprobs, what
// lm-evaluation-harness's loglikelihood requests need), best_of [n, 16]
// (best_of candidates per prompt, the n with the highest mean token logprob
// returned, as OpenAI's "highest log probability per token"; not with
// stream), suffix (empty).
// n [1, 16]: choices per prompt (both endpoints); choice i samples with the
// seed + i (mod 2^64): with a seed, choice i is reproduced by a request with
// n = 1 and seed + i. The choices of a prompt share its prefill
// (RequestOptions::prefill_from) and decode as rows of one batch.
// Both: response_format {"type": "text"}, {"type": "json_object"} (any JSON
// object; llama-server's "schema" field there is taken as a json_schema) or
// {"type": "json_schema", "json_schema": {"name", "description", "schema",
// "strict"}} (vLLM's and OpenAI's shape; "schema" absent: any JSON value),
// enforced by constrained decoding (kvshare/grammar/grammar.h: the schema subset;
// anything else is a 400 naming the keyword); not with ignore_eos.
// Any other field (top level, in a message or in stream_options) is ignored
// and listed in CompletionRequest::ignored, as vLLM and llama-server ignore
// their clients' extra fields; with RequestParsing::strict (kvshare serve
// --strict-openai) it is a 400 "Unrecognized request argument supplied: NAME"
// and `model` is required, as OpenAI's API has them. Known fields are
// type-checked either way.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/grammar/grammar_cache.h"
#include "kvshare/runtime/chat_message.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/audio_prompt.h"
#include "kvshare/runtime/image_prompt.h"
#include "kvshare/runtime/sampler.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/runtime/tool_calls.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "kvshare/vision/image.h"
#include "kvshare/vision/vision_encoder.h"

namespace kvshare::server {

// One image_url content part's image (request_images.h).
struct RequestImage {
  std::vector<std::uint8_t> bytes;  // the file, as sent
  std::string param;                // where it was: "messages[0].content[1].image_url.url"
};

// Most choices per prompt (n, best_of): more is a 400.
constexpr int kMaxChoices = 16;

// One input_audio content part's clip (request_audio.h).
struct RequestAudio {
  std::vector<std::uint8_t> bytes;  // the file, as sent
  std::string format;               // as the part names it: "wav", "mp3", "flac" or "ogg"
  std::string param;                // where it was: "messages[0].content[1].input_audio"
};

struct CompletionRequest {
  bool chat = false;
  std::string model;
  std::vector<ChatMessage> messages;   // chat
  std::vector<RequestImage> images;    // chat: image_url parts, in message and part order
  std::vector<RequestAudio> audio;     // chat: input_audio parts, in message and part order
  std::optional<int> max_soft_tokens;  // chat: Gemma 4's image token budget
  // Completions: the prompts (one, or a list: one set of choices each).
  struct Prompt {
    std::optional<std::string> text;   // a string prompt
    std::vector<std::int32_t> tokens;  // token ids (text absent)
  };
  std::vector<Prompt> prompts;
  int n = 1;                     // choices per prompt, [1, kMaxChoices]
  int best_of = 1;               // completions: candidates per prompt, [n, kMaxChoices]; the n best are returned
  bool echo = false;             // completions: the prompt's text (and logprobs) before each choice's
  bool max_tokens_zero = false;  // completions: max_tokens 0 (nothing generated; with echo, only the prompt)
  bool stream = false;
  bool include_usage = false;
  std::optional<int> max_tokens;
  SamplerOptions sampler;  // temperature default 1.0
  bool seed_given = false;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool speculative = true;
  bool logprobs = false;
  int top_logprobs = 0;
  // response_format: kText (unconstrained), kJsonObject, kJsonSchema.
  struct ResponseFormat {
    enum class Type { kText, kJsonObject, kJsonSchema } type = Type::kText;
    std::string name;     // json_schema.name (informational)
    std::string schema;   // the JSON Schema as JSON text; empty: none (json_object: any object)
    bool strict = false;  // json_schema.strict (the schema is enforced either way)
  } response_format;
  // Tools (chat); strict: function.strict, its parameters checked to compile as a grammar.
  std::vector<OfferedTool> tools;
  struct ToolChoice {
    enum class Mode { kAuto, kNone, kRequired, kFunction } mode = Mode::kAuto;
    std::string name;  // kFunction
  } tool_choice;
  bool parallel_tool_calls = true;
  std::vector<std::pair<std::int32_t, float>> logit_bias;  // token id, bias in [-100, 100]
  std::vector<std::string> ignored;                        // unknown fields, by path ("foo", "messages[0].bar")
};

// Whether the request offers its tools to the model (some tools, tool_choice
// not "none").
bool OffersTools(const CompletionRequest& req);

// The request's tools as the runtime takes them (tool_choice "auto",
// "required" or a named function, parallel_tool_calls); nullopt when it
// offers none (OffersTools false).
std::optional<ToolOffer> OfferedTools(const CompletionRequest& req);

struct RequestParsing {
  // OpenAI's strictness: unknown fields are a 400, `model` is required.
  bool strict = false;
  // http(s) image URLs (kvshare serve --allow-image-urls): fetching is not
  // built, so they are refused either way, with a message that says which.
  bool allow_image_urls = false;
  // Compiled grammars kept across requests (kvshare serve --grammar-cache):
  // strict tools' parameters are compiled to check them; null: compiled
  // every time.
  GrammarCache* grammars = nullptr;
};

// Parses `body` (any JSON value). `chat` picks the endpoint's fields.
// Throws ApiError (400) for wrong types, out-of-range values, unsupported
// options and, with options.strict, unknown fields and a missing model.
CompletionRequest ParseCompletionRequest(const nlohmann::json& body, bool chat, const RequestParsing& options = {});

// The parsed body's objects lose their key order (nlohmann::json sorts
// them); this takes response_format's schema and the tools' parameters
// again from the raw body, so that properties are generated (and tools
// declared) in the order the schema declares them.
void KeepSchemaKeyOrder(CompletionRequest& req, std::string_view body);

// What the model side needs to turn a request into scheduler input.
struct ModelContext {
  std::string model_id;       // the served name (/v1/models)
  bool strict_model = false;  // another model name is a 404 (--strict-openai); else it is served
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat = nullptr;  // the chat format (kNone: plain completion)
  std::string chat_unavailable;        // why chat requests are refused (format kNone), or empty
  // Why image and audio parts are refused whatever the mmproj (the model's
  // device, runtime/device_support.h), or empty.
  std::string media_unavailable;
  int max_context = 0;                 // per request: prompt + max_tokens
  // Compiled grammars kept across requests (kvshare serve --grammar-cache),
  // under grammar_key.h's keys; null: every request compiles its own.
  GrammarCache* grammars = nullptr;
  std::string tool_grammar_identity;  // ToolGrammarIdentity(chat->format(), *tokenizer)
  // Images (kvshare serve --mmproj); no encoder: image parts are a 400.
  struct Images {
    const VisionEncoder* encoder = nullptr;
    const ImageSplicer* splicer = nullptr;
    ImageLimits limits;
    int max_soft_tokens = 280;  // Gemma 4's budget when a request names none (--image-max-soft-tokens)
    int max_image_tokens = 0;   // one image's soft tokens must fit a step: step_tokens - slots + 1
    // The encoder's own pool (--image-threads), for one request at a time:
    // AttachImages holds pool_mu while it encodes (null pool: inline).
    ThreadPool* pool = nullptr;
    std::mutex* pool_mu = nullptr;
  } images;
  // Audio (an --mmproj with an audio encoder); none: input_audio parts are a
  // 400. Encoded on images' pool under its mutex.
  struct AudioInput {
    const AudioEncoder* encoder = nullptr;
    const AudioSplicer* splicer = nullptr;
    int max_clip_tokens = 0;  // one clip's span must fit a step, as an image's
  } audio;
};

// Checks the model name (with strict_model another name is a 404
// model_not_found; otherwise any name, or none, gets the served model),
// applies the chat template or
// tokenizes the prompt (400 for an empty prompt or ids out of range), picks
// max_tokens (chat: the rest of the context when absent; completions: 16) and
// checks the context (400 context_length_exceeded, OpenAI's message). A
// random seed is drawn when none was given. response_format's schema is
// compiled into RequestOptions::grammar (400 invalid_schema naming what is
// unsupported or wrong). With tools offered: they are written into the
// prompt, the format's tool stop tokens end generation, and the grammar is
// ChatTemplate::ToolCallGrammar's (400 invalid_schema when the call cannot be
// enforced). Both grammars come from ctx.grammars when it is set (kept under
// grammar_key.h's keys), else are compiled.
// Completions build one prompt of the list (prompt_index); with echo and
// logprobs the request asks for prompt logprobs; max_tokens 0 runs one
// token (the scheduler's least), which the response drops.
RequestOptions BuildRequest(const CompletionRequest& req, const ModelContext& ctx, std::size_t prompt_index = 0);

}  // namespace kvshare::server
