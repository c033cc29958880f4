// The OpenAI request body (openai_request.h ParseCompletionRequest): known
// fields, sampling options, stop, logit_bias and the completions prompt; the
// messages, tools and response_format parts have files of their own.
#include "openai_request.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "api_error.h"
#include "request_fields.h"
#include "request_messages.h"
#include "request_tools.h"
#include "response_format.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

constexpr int kMaxStops = 16;
constexpr int kMaxTopLogprobs = 20;
constexpr int kMaxPrompts = 256;

// Fields that change nothing here, and may be sent by clients.
const std::set<std::string>& Ignored() {
  static const std::set<std::string> s = {"user", "metadata", "store", "service_tier"};
  return s;
}

void CheckKnownFields(const json& body, bool chat, const RequestParsing& o, std::vector<std::string>& ignored) {
  static const std::set<std::string> common = {"model",
                                               "stream",
                                               "stream_options",
                                               "max_tokens",
                                               "temperature",
                                               "top_p",
                                               "top_k",
                                               "min_p",
                                               "repetition_penalty",
                                               "seed",
                                               "stop",
                                               "n",
                                               "presence_penalty",
                                               "frequency_penalty",
                                               "logit_bias",
                                               "logprobs",
                                               "ignore_eos",
                                               "speculative",
                                               "response_format"};
  static const std::set<std::string> chat_only = {"messages",    "max_completion_tokens", "top_logprobs",   "tools",
                                                  "tool_choice", "parallel_tool_calls",   "max_soft_tokens"};
  static const std::set<std::string> completion_only = {"prompt", "echo", "suffix", "best_of"};
  for (const auto& [k, v] : body.items()) {
    if (common.count(k) || Ignored().count(k) || (chat ? chat_only.count(k) : completion_only.count(k))) continue;
    Unknown(k, o, ignored);
  }
}

// OpenAI's logit_bias: {"<token id>": bias in [-100, 100]}; the ids are
// checked against the vocabulary in BuildRequest.
std::vector<std::pair<std::int32_t, float>> ParseLogitBias(const json& body) {
  std::vector<std::pair<std::int32_t, float>> out;
  auto lb = body.find("logit_bias");
  if (lb == body.end() || lb->is_null()) return out;
  if (!lb->is_object()) WrongType("logit_bias", "an object", *lb);
  if (lb->size() > 1024) {
    throw BadRequest("Invalid 'logit_bias': at most 1024 tokens, got " + std::to_string(lb->size()) + ".", "logit_bias",
                     "invalid_value");
  }
  for (const auto& [k, v] : lb->items()) {
    const std::string name = "logit_bias." + k;
    const bool digits = !k.empty() && k.size() <= 9 && k.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) {
      throw BadRequest(
          "Invalid 'logit_bias': the key '" + k + "' is not a token id (a non-negative integer as a string).",
          "logit_bias", "invalid_value");
    }
    if (!v.is_number()) WrongType(name, "a number", v);
    const double bias = v.get<double>();
    if (!std::isfinite(bias) || bias < -100 || bias > 100) {
      throw BadRequest("Invalid '" + name + "': the bias must be in [-100, 100], got " + Num(bias) + ".", name,
                       "invalid_value");
    }
    out.emplace_back(static_cast<std::int32_t>(std::stol(k)), static_cast<float>(bias));
  }
  return out;
}

std::vector<std::string> ParseStop(const json& body) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return {};
  std::vector<std::string> out;
  if (it->is_string()) {
    out.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->size() > static_cast<std::size_t>(kMaxStops)) {
      throw BadRequest("Invalid 'stop': array too long. Expected an array with maximum length " +
                           std::to_string(kMaxStops) + ", but got an array with length " + std::to_string(it->size()) +
                           " instead.",
                       "stop", "array_above_max_length");
    }
    for (const json& s : *it) {
      if (!s.is_string()) WrongType("stop", "a string or an array of strings", s);
      out.push_back(s.get<std::string>());
    }
  } else {
    WrongType("stop", "a string or an array of strings", *it);
  }
  for (const std::string& s : out) {
    if (s.empty()) throw BadRequest("Invalid 'stop': stop sequences must not be empty.", "stop", "invalid_value");
  }
  return out;
}

std::vector<std::int32_t> TokenArray(const json& a, const std::string& name) {
  std::vector<std::int32_t> ids;
  for (const json& t : a) {
    if (!t.is_number_integer() && !t.is_number_unsigned()) WrongType(name, "a string or an array of integers", t);
    const std::int64_t v = t.is_number_unsigned()
                               ? static_cast<std::int64_t>(std::min<std::uint64_t>(t.get<std::uint64_t>(), INT32_MAX))
                               : t.get<std::int64_t>();
    if (v < 0 || v > INT32_MAX)
      throw BadRequest("Invalid 'prompt': token id " + std::to_string(v) + " is out of range.", name, "invalid_value");
    ids.push_back(static_cast<std::int32_t>(v));
  }
  return ids;
}

// OpenAI's prompt: a string, an array of token ids, or an array of strings
// or of token-id arrays (a list of prompts).
void ParsePrompt(const json& body, CompletionRequest& r) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) {
    throw BadRequest("Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter");
  }
  const json& p = *it;
  auto one = [&](const json& v) {
    CompletionRequest::Prompt out;
    if (v.is_string()) {
      out.text = v.get<std::string>();
    } else if (v.is_array()) {
      out.tokens = TokenArray(v, "prompt");
    } else {
      WrongType("prompt", "a string, an array of integers, or an array of strings or of integer arrays", v);
    }
    r.prompts.push_back(std::move(out));
  };
  if (p.is_array() && !p.empty() && (p.front().is_string() || p.front().is_array())) {
    if (p.size() > static_cast<std::size_t>(kMaxPrompts)) {
      throw BadRequest("Invalid 'prompt': at most " + std::to_string(kMaxPrompts) + " prompts per request, got " +
                           std::to_string(p.size()) + ".",
                       "prompt", "array_above_max_length");
    }
    for (const json& v : p) {
      if (!v.is_string() && !v.is_array()) {
        WrongType("prompt", "a string, an array of integers, or an array of strings or of integer arrays", v);
      }
      one(v);
    }
  } else {
    one(p);
  }
}

}  // namespace

CompletionRequest ParseCompletionRequest(const json& body, bool chat, const RequestParsing& o) {
  if (!body.is_object()) {
    throw BadRequest("Invalid request body: expected a JSON object, but got " + TypeName(body) + " instead.",
                     std::nullopt, "invalid_type");
  }
  CompletionRequest r;
  CheckKnownFields(body, chat, o, r.ignored);
  r.chat = chat;
  auto model = body.find("model");
  if (model == body.end() || model->is_null()) {
    if (o.strict) throw BadRequest("You must provide a model parameter.", "model", "missing_required_parameter");
  } else {
    if (!model->is_string()) WrongType("model", "a string", *model);
    r.model = model->get<std::string>();
  }
  if (chat) {
    r.messages = ParseMessages(body, o, r.images, r.audio, r.ignored);
    if (auto b = Integer(body, "max_soft_tokens", 1, INT32_MAX)) {
      if (*b != 70 && *b != 140 && *b != 280 && *b != 560 && *b != 1120) {
        throw BadRequest("Invalid 'max_soft_tokens': " + std::to_string(*b) +
                             " is not one of Gemma 4's image token budgets 70, 140, 280, 560, 1120.",
                         "max_soft_tokens", "invalid_value");
      }
      r.max_soft_tokens = static_cast<int>(*b);
    }
  } else {
    ParsePrompt(body, r);
  }
  r.stream = Bool(body, "stream").value_or(false);
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) WrongType("stream_options", "an object", *so);
    if (!r.stream) {
      throw BadRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options",
                       "invalid_value");
    }
    for (const auto& [k, v] : so->items()) {
      if (k != "include_usage" && k != "continuous_usage_stats") Unknown("stream_options." + k, o, r.ignored);
    }
    r.include_usage = Bool(*so, "include_usage").value_or(false);
  }
  // Completions take max_tokens 0 (OpenAI: the prompt alone, with echo).
  std::optional<std::int64_t> mt = Integer(body, "max_tokens", chat ? 1 : 0, INT32_MAX);
  if (chat) {
    if (auto mct = Integer(body, "max_completion_tokens", 1, INT32_MAX)) mt = mct;
  }
  if (mt && *mt == 0) {
    r.max_tokens_zero = true;
    mt = 1;
  }
  if (mt) r.max_tokens = static_cast<int>(*mt);
  r.sampler.temperature = static_cast<float>(Number(body, "temperature", 0, 2).value_or(1.0));
  r.sampler.top_p = static_cast<float>(Number(body, "top_p", 0, 1, /*lo_open=*/true).value_or(1.0));
  const std::int64_t top_k = Integer(body, "top_k", -1, INT32_MAX).value_or(0);
  r.sampler.top_k = static_cast<std::int32_t>(top_k < 0 ? 0 : top_k);
  r.sampler.min_p = static_cast<float>(Number(body, "min_p", 0, 1).value_or(0.0));
  r.sampler.repetition_penalty = static_cast<float>(Number(body, "repetition_penalty", 0, 100, true).value_or(1.0));
  r.sampler.presence_penalty = static_cast<float>(Number(body, "presence_penalty", -2, 2).value_or(0.0));
  r.sampler.frequency_penalty = static_cast<float>(Number(body, "frequency_penalty", -2, 2).value_or(0.0));
  if (auto seed = body.find("seed"); seed != body.end() && !seed->is_null()) {
    if (seed->is_number_unsigned()) {
      r.sampler.seed = seed->get<std::uint64_t>();
    } else if (seed->is_number_integer()) {
      r.sampler.seed = static_cast<std::uint64_t>(seed->get<std::int64_t>());
    } else {
      WrongType("seed", "an integer", *seed);
    }
    r.seed_given = true;
  }
  r.response_format = ParseResponseFormat(body, o, r.ignored);
  r.stop = ParseStop(body);
  r.ignore_eos = Bool(body, "ignore_eos").value_or(false);
  if (r.ignore_eos && r.response_format.type != CompletionRequest::ResponseFormat::Type::kText) {
    throw BadRequest(
        "Invalid 'ignore_eos': it cannot be combined with a JSON 'response_format' (generation ends when "
        "the JSON is complete).",
        "ignore_eos", "invalid_value");
  }
  r.speculative = Bool(body, "speculative").value_or(true);
  r.n = static_cast<int>(Integer(body, "n", 1, kMaxChoices).value_or(1));
  r.best_of = r.n;
  r.logit_bias = ParseLogitBias(body);
  if (chat) {
    r.logprobs = Bool(body, "logprobs").value_or(false);
    if (auto tl = Integer(body, "top_logprobs", 0, kMaxTopLogprobs)) {
      if (!r.logprobs) {
        throw BadRequest("Invalid 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.",
                         "top_logprobs", "invalid_value");
      }
      r.top_logprobs = static_cast<int>(*tl);
    }
    r.tools = ParseTools(body, o, r.ignored);
    r.tool_choice = ParseToolChoice(body, r.tools);
    r.parallel_tool_calls = Bool(body, "parallel_tool_calls").value_or(true);
    if (OffersTools(r) && r.ignore_eos) {
      throw BadRequest("Invalid 'ignore_eos': it cannot be combined with 'tools'.", "ignore_eos", "invalid_value");
    }
  } else {
    if (auto lp = Integer(body, "logprobs", 0, kMaxTopLogprobs)) {
      r.logprobs = true;
      r.top_logprobs = static_cast<int>(*lp);
    }
    r.echo = Bool(body, "echo").value_or(false);
    if (auto s = body.find("suffix"); s != body.end() && !s->is_null()) {
      if (!s->is_string()) WrongType("suffix", "a string", *s);
      if (!s->get<std::string>().empty()) Unsupported("suffix", "(insertion)");
    }
    r.best_of = static_cast<int>(Integer(body, "best_of", 1, kMaxChoices).value_or(r.n));
    if (r.best_of < r.n) {
      throw BadRequest(
          "Invalid 'best_of': it must be >= n (" + std::to_string(r.n) + "), got " + std::to_string(r.best_of) + ".",
          "best_of", "invalid_value");
    }
    if (r.best_of > r.n && r.stream) {
      throw BadRequest("Invalid 'best_of': best_of > n cannot be streamed (the best choices are known at the end).",
                       "best_of", "invalid_value");
    }
  }
  return r;
}

}  // namespace kvshare::server
