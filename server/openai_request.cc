#include "openai_request.h"

#include <cctype>
#include <cmath>
#include <random>
#include <set>
#include <string>

#include "api_error.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

constexpr int kMaxStops = 16;
constexpr int kMaxTopLogprobs = 20;
constexpr int kDefaultCompletionTokens = 16;  // OpenAI's legacy completions default

std::string TypeName(const json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a decimal";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

[[noreturn]] void WrongType(const std::string& name, const std::string& expected, const json& v) {
  throw BadRequest("Invalid type for '" + name + "': expected " + expected + ", but got " + TypeName(v) + " instead.",
                   name, "invalid_type");
}

// 2 (not 2.0) for whole numbers, as OpenAI writes them.
std::string Num(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<long long>(x));
  return json(x).dump();
}

// A number (or null when allowed: nullopt) in [lo, hi], ends open as asked.
std::optional<double> Number(const json& body, const std::string& name, double lo, double hi, bool lo_open = false) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) WrongType(name, "a decimal", *it);
  const double v = it->get<double>();
  if (!std::isfinite(v)) throw BadRequest("Invalid '" + name + "': must be a finite number.", name, "invalid_value");
  if (lo_open ? v <= lo : v < lo) {
    throw BadRequest("Invalid '" + name + "': decimal below minimum value. Expected a value " + (lo_open ? "> " : ">= ") +
                         Num(lo) + ", but got " + Num(v) + " instead.",
                     name, "decimal_below_min_value");
  }
  if (v > hi) {
    throw BadRequest("Invalid '" + name + "': decimal above maximum value. Expected a value <= " + Num(hi) +
                         ", but got " + Num(v) + " instead.",
                     name, "decimal_above_max_value");
  }
  return v;
}

std::optional<std::int64_t> Integer(const json& body, const std::string& name, std::int64_t lo, std::int64_t hi) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  std::int64_t v = 0;
  if (it->is_number_integer() || it->is_number_unsigned()) {
    if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      v = INT64_MAX;
    } else {
      v = it->get<std::int64_t>();
    }
  } else {
    WrongType(name, "an integer", *it);
  }
  if (v < lo) {
    throw BadRequest("Invalid '" + name + "': integer below minimum value. Expected a value >= " + std::to_string(lo) +
                         ", but got " + std::to_string(v) + " instead.",
                     name, "integer_below_min_value");
  }
  if (v > hi) {
    throw BadRequest("Invalid '" + name + "': integer above maximum value. Expected a value <= " + std::to_string(hi) +
                         ", but got " + std::to_string(v) + " instead.",
                     name, "integer_above_max_value");
  }
  return v;
}

std::optional<bool> Bool(const json& body, const std::string& name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) WrongType(name, "a boolean", *it);
  return it->get<bool>();
}

[[noreturn]] void Unsupported(const std::string& name, const std::string& what) {
  throw BadRequest("'" + name + "' " + what + " is not supported by this server.", name, "unsupported_parameter");
}

// Fields that change nothing here, and may be sent by clients.
const std::set<std::string>& Ignored() {
  static const std::set<std::string> s = {"user", "metadata", "store", "service_tier"};
  return s;
}

// Refuses an unknown field (strict) or notes it in `ignored`.
void Unknown(const std::string& path, const RequestParsing& o, std::vector<std::string>& ignored) {
  if (o.strict) throw BadRequest("Unrecognized request argument supplied: " + path, path, "unknown_parameter");
  ignored.push_back(path);
}

void CheckKnownFields(const json& body, bool chat, const RequestParsing& o, std::vector<std::string>& ignored) {
  static const std::set<std::string> common = {
      "model",        "stream",       "stream_options",   "max_tokens",        "temperature",
      "top_p",        "top_k",        "min_p",            "repetition_penalty", "seed",
      "stop",         "n",            "presence_penalty", "frequency_penalty", "logit_bias",
      "logprobs",     "ignore_eos",   "speculative",      "response_format"};
  static const std::set<std::string> chat_only = {"messages", "max_completion_tokens", "top_logprobs", "tools",
                                                  "tool_choice", "parallel_tool_calls"};
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
      throw BadRequest("Invalid 'logit_bias': the key '" + k + "' is not a token id (a non-negative integer as a string).",
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

std::string ContentText(const json& content, std::size_t index) {
  const std::string name = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (!content.is_array()) WrongType(name, "a string or an array of content parts", content);
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string pname = name + "[" + std::to_string(i) + "]";
    if (!part.is_object()) WrongType(pname, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      throw BadRequest("Missing required parameter: '" + pname + ".type'.", pname + ".type", "missing_required_parameter");
    }
    if (type->get<std::string>() != "text") {
      throw BadRequest("Invalid '" + pname + ".type': only \"text\" content parts are supported by this server, got \"" +
                           type->get<std::string>() + "\".",
                       pname + ".type", "unsupported_parameter");
    }
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) WrongType(pname + ".text", "a string", t == part.end() ? json() : *t);
    text += t->get<std::string>();
  }
  return text;
}

// One entry of an assistant message's tool_calls.
ToolCall ParseToolCall(const json& c, const std::string& name) {
  if (!c.is_object()) WrongType(name, "an object", c);
  if (auto t = c.find("type"); t != c.end() && !t->is_null() && (!t->is_string() || t->get<std::string>() != "function")) {
    throw BadRequest("Invalid '" + name + ".type': only \"function\" tool calls are supported.", name + ".type",
                     "invalid_value");
  }
  ToolCall call;
  if (auto id = c.find("id"); id != c.end() && !id->is_null()) {
    if (!id->is_string()) WrongType(name + ".id", "a string", *id);
    call.id = id->get<std::string>();
  }
  auto f = c.find("function");
  if (f == c.end() || f->is_null()) {
    throw BadRequest("Missing required parameter: '" + name + ".function'.", name + ".function",
                     "missing_required_parameter");
  }
  if (!f->is_object()) WrongType(name + ".function", "an object", *f);
  auto n = f->find("name");
  if (n == f->end() || n->is_null()) {
    throw BadRequest("Missing required parameter: '" + name + ".function.name'.", name + ".function.name",
                     "missing_required_parameter");
  }
  if (!n->is_string()) WrongType(name + ".function.name", "a string", *n);
  call.name = n->get<std::string>();
  if (auto a = f->find("arguments"); a != f->end() && !a->is_null()) {
    if (a->is_object()) {
      call.arguments = a->dump();  // lenient: an object instead of its JSON text
    } else if (a->is_string()) {
      call.arguments = a->get<std::string>();
      if (!call.arguments.empty() && !json::accept(call.arguments)) {
        throw BadRequest("Invalid '" + name + ".function.arguments': it must be the JSON text of an object, got '" +
                             call.arguments.substr(0, 60) + "'.",
                         name + ".function.arguments", "invalid_value");
      }
    } else {
      WrongType(name + ".function.arguments", "a string", *a);
    }
  }
  return call;
}

bool ValidToolName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

std::vector<OfferedTool> ParseTools(const json& body, const RequestParsing& o, std::vector<std::string>& ignored) {
  std::vector<OfferedTool> out;
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_array()) WrongType("tools", "an array", *it);
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string name = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) WrongType(name, "an object", t);
    if (auto ty = t.find("type"); ty != t.end() && !ty->is_null() && (!ty->is_string() || ty->get<std::string>() != "function")) {
      throw BadRequest("Invalid '" + name + ".type': only \"function\" tools are supported.", name + ".type",
                       "invalid_value");
    }
    for (const auto& [k, v] : t.items()) {
      if (k != "type" && k != "function") Unknown(name + "." + k, o, ignored);
    }
    auto f = t.find("function");
    if (f == t.end() || f->is_null()) {
      throw BadRequest("Missing required parameter: '" + name + ".function'.", name + ".function",
                       "missing_required_parameter");
    }
    if (!f->is_object()) WrongType(name + ".function", "an object", *f);
    for (const auto& [k, v] : f->items()) {
      if (k != "name" && k != "description" && k != "parameters" && k != "strict") {
        Unknown(name + ".function." + k, o, ignored);
      }
    }
    OfferedTool tool;
    auto n = f->find("name");
    if (n == f->end() || n->is_null()) {
      throw BadRequest("Missing required parameter: '" + name + ".function.name'.", name + ".function.name",
                       "missing_required_parameter");
    }
    if (!n->is_string()) WrongType(name + ".function.name", "a string", *n);
    tool.function.name = n->get<std::string>();
    if (!ValidToolName(tool.function.name)) {
      throw BadRequest("Invalid '" + name + ".function.name': '" + tool.function.name +
                           "' must be 1 to 64 characters of a-z, A-Z, 0-9, underscores and dashes.",
                       name + ".function.name", "invalid_value");
    }
    for (const OfferedTool& other : out) {
      if (other.function.name == tool.function.name) {
        throw BadRequest("Invalid '" + name + ".function.name': the name '" + tool.function.name +
                             "' is used by another tool; tool names must be unique.",
                         name + ".function.name", "invalid_value");
      }
    }
    if (auto d = f->find("description"); d != f->end() && !d->is_null()) {
      if (!d->is_string()) WrongType(name + ".function.description", "a string", *d);
      tool.function.description = d->get<std::string>();
    }
    if (auto p = f->find("parameters"); p != f->end() && !p->is_null()) {
      if (!p->is_object()) WrongType(name + ".function.parameters", "an object (a JSON Schema)", *p);
      tool.function.parameters = p->dump();
    }
    if (auto st = f->find("strict"); st != f->end() && !st->is_null()) {
      if (!st->is_boolean()) WrongType(name + ".function.strict", "a boolean", *st);
      tool.strict = st->get<bool>();
    }
    if (tool.strict) {
      try {
        CompileJsonSchema(tool.function.parameters.empty() ? "{\"type\": \"object\"}" : tool.function.parameters);
      } catch (const Error& e) {
        throw BadRequest("Invalid '" + name + ".function.parameters': " + e.what() +
                             " (with strict: true the parameters must be a schema this server can enforce; drop "
                             "the keyword or set strict to false).",
                         name + ".function.parameters", "invalid_schema");
      }
    }
    out.push_back(std::move(tool));
  }
  return out;
}

CompletionRequest::ToolChoice ParseToolChoice(const json& body, const std::vector<OfferedTool>& tools) {
  using Mode = CompletionRequest::ToolChoice::Mode;
  CompletionRequest::ToolChoice c;
  auto tc = body.find("tool_choice");
  if (tc == body.end() || tc->is_null()) return c;
  if (tc->is_string()) {
    const std::string v = tc->get<std::string>();
    if (v == "auto") {
      c.mode = Mode::kAuto;
    } else if (v == "none") {
      c.mode = Mode::kNone;
    } else if (v == "required") {
      c.mode = Mode::kRequired;
    } else {
      throw BadRequest("Invalid value: '" + v + "'. Supported values are: 'none', 'auto', 'required' and an object "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}.",
                       "tool_choice", "invalid_value");
    }
  } else if (tc->is_object()) {
    auto f = tc->find("function");
    if (auto t = tc->find("type"); t != tc->end() && (!t->is_string() || t->get<std::string>() != "function")) {
      throw BadRequest("Invalid 'tool_choice.type': only \"function\" is supported.", "tool_choice.type",
                       "invalid_value");
    }
    if (f == tc->end() || !f->is_object()) {
      throw BadRequest("Missing required parameter: 'tool_choice.function' (an object with the name of the tool to "
                       "call).",
                       "tool_choice.function", "missing_required_parameter");
    }
    auto n = f->find("name");
    if (n == f->end() || !n->is_string()) {
      throw BadRequest("Missing required parameter: 'tool_choice.function.name'.", "tool_choice.function.name",
                       "missing_required_parameter");
    }
    c.mode = Mode::kFunction;
    c.name = n->get<std::string>();
    std::string names;
    bool found = false;
    for (const OfferedTool& t : tools) {
      found = found || t.function.name == c.name;
      names += (names.empty() ? "" : ", ") + t.function.name;
    }
    if (!found) {
      throw BadRequest("Invalid 'tool_choice.function.name': no tool named '" + c.name + "' in 'tools' (" +
                           (names.empty() ? std::string("none given") : "tools: " + names) + ").",
                       "tool_choice.function.name", "invalid_value");
    }
  } else {
    WrongType("tool_choice", "a string or an object", *tc);
  }
  if (c.mode == Mode::kRequired && tools.empty()) {
    throw BadRequest("Invalid 'tool_choice': \"required\" needs at least one tool in 'tools'.", "tool_choice",
                     "invalid_value");
  }
  return c;
}

std::vector<ChatMessage> ParseMessages(const json& body, const RequestParsing& o, std::vector<std::string>& ignored) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) {
    throw BadRequest("Missing required parameter: 'messages'.", "messages", "missing_required_parameter");
  }
  if (!it->is_array()) WrongType("messages", "an array", *it);
  if (it->empty()) {
    throw BadRequest("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array "
                     "instead.",
                     "messages", "empty_array");
  }
  std::vector<ChatMessage> out;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) WrongType(name, "an object", m);
    auto role = m.find("role");
    if (role == m.end()) {
      throw BadRequest("Missing required parameter: '" + name + ".role'.", name + ".role", "missing_required_parameter");
    }
    if (!role->is_string()) WrongType(name + ".role", "a string", *role);
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      throw BadRequest("Invalid value: '" + role->get<std::string>() + "'. Supported values are: 'system', 'developer', "
                       "'user', 'assistant' and 'tool'.",
                       name + ".role", "invalid_value");
    }
    auto content = m.find("content");
    if (content == m.end() && r != "assistant") {
      throw BadRequest("Missing required parameter: '" + name + ".content'.", name + ".content",
                       "missing_required_parameter");
    }
    for (const auto& [k, v] : m.items()) {
      if (k == "role" || k == "content" || k == "name") continue;
      if (k == "tool_calls" && r == "assistant") continue;
      if (k == "tool_call_id" && r == "tool") continue;
      Unknown(name + "." + k, o, ignored);
    }
    ChatMessage msg{r, content == m.end() ? std::string() : ContentText(*content, i)};
    if (r == "tool") {
      auto id = m.find("tool_call_id");
      if (id == m.end() || id->is_null()) {
        throw BadRequest("Missing required parameter: '" + name + ".tool_call_id' (a tool message must name the "
                         "call it answers: the id of one of the previous assistant message's tool_calls).",
                         name + ".tool_call_id", "missing_required_parameter");
      }
      if (!id->is_string()) WrongType(name + ".tool_call_id", "a string", *id);
      msg.tool_call_id = id->get<std::string>();
      if (auto n = m.find("name"); n != m.end() && n->is_string()) msg.name = n->get<std::string>();
    }
    if (auto tc = m.find("tool_calls"); r == "assistant" && tc != m.end() && !tc->is_null()) {
      if (!tc->is_array()) WrongType(name + ".tool_calls", "an array", *tc);
      for (std::size_t j = 0; j < tc->size(); ++j) msg.tool_calls.push_back(ParseToolCall((*tc)[j], name + ".tool_calls[" + std::to_string(j) + "]"));
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::vector<std::int32_t> TokenArray(const json& a, const std::string& name) {
  std::vector<std::int32_t> ids;
  for (const json& t : a) {
    if (!t.is_number_integer() && !t.is_number_unsigned()) WrongType(name, "a string or an array of integers", t);
    const std::int64_t v = t.is_number_unsigned() ? static_cast<std::int64_t>(std::min<std::uint64_t>(t.get<std::uint64_t>(), INT32_MAX))
                                                  : t.get<std::int64_t>();
    if (v < 0 || v > INT32_MAX) throw BadRequest("Invalid 'prompt': token id " + std::to_string(v) + " is out of range.", name, "invalid_value");
    ids.push_back(static_cast<std::int32_t>(v));
  }
  return ids;
}

void ParsePrompt(const json& body, CompletionRequest& r) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) {
    throw BadRequest("Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter");
  }
  const json* p = &*it;
  if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    if (p->size() != 1) {
      throw BadRequest("Invalid 'prompt': " + std::to_string(p->size()) +
                           " prompts in one request are not supported by this server; send one prompt per request.",
                       "prompt", "unsupported_parameter");
    }
    p = &p->front();
  }
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array()) {
    r.prompt_tokens = TokenArray(*p, "prompt");
  } else {
    WrongType("prompt", "a string or an array of integers", *p);
  }
}

// The schema node of a response_format, or null (json_object without one).
template <typename Json>
const Json* SchemaNode(const Json& rf) {
  if (!rf.is_object()) return nullptr;
  auto t = rf.find("type");
  if (t == rf.end() || !t->is_string()) return nullptr;
  if (t->template get<std::string>() == "json_object") {
    auto s = rf.find("schema");
    return s != rf.end() && !s->is_null() ? &*s : nullptr;
  }
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object()) return nullptr;
  auto s = js->find("schema");
  return s != js->end() && !s->is_null() ? &*s : nullptr;
}

CompletionRequest::ResponseFormat ParseResponseFormat(const json& body, const RequestParsing& o,
                                                      std::vector<std::string>& ignored) {
  using Type = CompletionRequest::ResponseFormat::Type;
  CompletionRequest::ResponseFormat f;
  auto rf = body.find("response_format");
  if (rf == body.end() || rf->is_null()) return f;
  if (!rf->is_object()) WrongType("response_format", "an object", *rf);
  auto t = rf->find("type");
  if (t == rf->end() || t->is_null()) {
    throw BadRequest("Missing required parameter: 'response_format.type'.", "response_format.type",
                     "missing_required_parameter");
  }
  if (!t->is_string()) WrongType("response_format.type", "a string", *t);
  const std::string type = t->get<std::string>();
  auto schema_type = [](const json& s, const std::string& name) {
    if (!s.is_object() && !s.is_boolean()) WrongType(name, "an object", s);
  };
  if (type == "text") {
    for (const auto& [k, v] : rf->items()) {
      if (k != "type") Unknown("response_format." + k, o, ignored);
    }
  } else if (type == "json_object") {
    f.type = Type::kJsonObject;
    for (const auto& [k, v] : rf->items()) {
      if (k != "type" && k != "schema") Unknown("response_format." + k, o, ignored);
    }
    if (const json* s = SchemaNode(*rf)) {
      schema_type(*s, "response_format.schema");
      f.schema = s->dump();
    }
  } else if (type == "json_schema") {
    f.type = Type::kJsonSchema;
    auto js = rf->find("json_schema");
    if (js == rf->end() || js->is_null()) {
      throw BadRequest("Missing required parameter: 'response_format.json_schema'.", "response_format.json_schema",
                       "missing_required_parameter");
    }
    if (!js->is_object()) WrongType("response_format.json_schema", "an object", *js);
    for (const auto& [k, v] : rf->items()) {
      if (k != "type" && k != "json_schema") Unknown("response_format." + k, o, ignored);
    }
    for (const auto& [k, v] : js->items()) {
      if (k != "name" && k != "description" && k != "schema" && k != "strict") {
        Unknown("response_format.json_schema." + k, o, ignored);
      }
    }
    if (auto n = js->find("name"); n != js->end() && !n->is_null()) {
      if (!n->is_string()) WrongType("response_format.json_schema.name", "a string", *n);
      f.name = n->get<std::string>();
    }
    if (auto d = js->find("description"); d != js->end() && !d->is_null() && !d->is_string()) {
      WrongType("response_format.json_schema.description", "a string", *d);
    }
    if (auto st = js->find("strict"); st != js->end() && !st->is_null()) {
      if (!st->is_boolean()) WrongType("response_format.json_schema.strict", "a boolean", *st);
      f.strict = st->get<bool>();
    }
    if (const json* s = SchemaNode(*rf)) {
      schema_type(*s, "response_format.json_schema.schema");
      f.schema = s->dump();
    } else {
      f.schema = "{}";  // no schema: any JSON value
    }
  } else {
    throw BadRequest("Invalid value: '" + type + "'. Supported values are: 'text', 'json_object' and 'json_schema'.",
                     "response_format.type", "invalid_value");
  }
  return f;
}

}  // namespace

bool OffersTools(const CompletionRequest& req) {
  return !req.tools.empty() && req.tool_choice.mode != CompletionRequest::ToolChoice::Mode::kNone;
}

std::optional<ToolOffer> OfferedTools(const CompletionRequest& req) {
  using Mode = CompletionRequest::ToolChoice::Mode;
  if (!OffersTools(req)) return std::nullopt;
  ToolOffer offer{.tools = req.tools, .function = req.tool_choice.name, .parallel = req.parallel_tool_calls};
  if (req.tool_choice.mode == Mode::kRequired) offer.choice = ToolOffer::Choice::kRequired;
  if (req.tool_choice.mode == Mode::kFunction) offer.choice = ToolOffer::Choice::kFunction;
  return offer;
}

void KeepSchemaKeyOrder(CompletionRequest& req, std::string_view body) {
  if (req.response_format.schema.empty()) return;
  using Ordered = nlohmann::ordered_json;
  struct TooWide {};
  try {
    // ordered_json looks keys up by a linear scan: an object of n members
    // costs n^2 / 2 comparisons, so top-level fields other than
    // response_format are dropped and an object of more than 1024 members
    // (beyond what CompileJsonSchema takes) stops the reordering.
    std::vector<int> members;
    const auto ordered = Ordered::parse(body, [&members](int depth, Ordered::parse_event_t event, Ordered& parsed) {
      if (event == Ordered::parse_event_t::object_start) members.push_back(0);
      if (event == Ordered::parse_event_t::object_end && !members.empty()) members.pop_back();
      if (event == Ordered::parse_event_t::key) {
        if (!members.empty() && ++members.back() > 1024) throw TooWide{};
        if (depth == 1 && parsed != "response_format") return false;
      }
      return true;
    });
    auto rf = ordered.find("response_format");
    if (rf == ordered.end()) return;
    if (const nlohmann::ordered_json* s = SchemaNode(*rf)) req.response_format.schema = s->dump();
  } catch (const nlohmann::json::exception&) {
    // The body parsed once already; keep the sorted schema.
  } catch (const TooWide&) {
  }
}

CompletionRequest ParseCompletionRequest(const json& body, bool chat, const RequestParsing& o) {
  if (!body.is_object()) {
    throw BadRequest("Invalid request body: expected a JSON object, but got " + TypeName(body) + " instead.", std::nullopt,
                     "invalid_type");
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
    r.messages = ParseMessages(body, o, r.ignored);
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
  std::optional<std::int64_t> mt = Integer(body, "max_tokens", 1, INT32_MAX);
  if (chat) {
    if (auto mct = Integer(body, "max_completion_tokens", 1, INT32_MAX)) mt = mct;
  }
  if (mt) r.max_tokens = static_cast<int>(*mt);
  r.sampler.temperature = static_cast<float>(Number(body, "temperature", 0, 2).value_or(1.0));
  r.sampler.top_p = static_cast<float>(Number(body, "top_p", 0, 1, /*lo_open=*/true).value_or(1.0));
  const std::int64_t top_k = Integer(body, "top_k", -1, INT32_MAX).value_or(0);
  r.sampler.top_k = static_cast<std::int32_t>(top_k < 0 ? 0 : top_k);
  r.sampler.min_p = static_cast<float>(Number(body, "min_p", 0, 1).value_or(0.0));
  r.sampler.repetition_penalty = static_cast<float>(Number(body, "repetition_penalty", 0, 100, true).value_or(1.0));
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
    throw BadRequest("Invalid 'ignore_eos': it cannot be combined with a JSON 'response_format' (generation ends when "
                     "the JSON is complete).",
                     "ignore_eos", "invalid_value");
  }
  r.speculative = Bool(body, "speculative").value_or(true);
  if (Integer(body, "n", 1, 128).value_or(1) != 1) {
    throw BadRequest("Invalid 'n': only n = 1 is supported by this server (one choice per request).", "n",
                     "unsupported_parameter");
  }
  for (const char* p : {"presence_penalty", "frequency_penalty"}) {
    if (Number(body, p, -2, 2).value_or(0) != 0) Unsupported(p, "other than 0");
  }
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
    if (OffersTools(r) && r.response_format.type != CompletionRequest::ResponseFormat::Type::kText) {
      throw BadRequest("Invalid 'response_format': it cannot be combined with 'tools' (the reply is either tool calls "
                       "or text); send tool_choice \"none\" or drop response_format.",
                       "response_format", "invalid_value");
    }
    if (OffersTools(r) && r.ignore_eos) {
      throw BadRequest("Invalid 'ignore_eos': it cannot be combined with 'tools'.", "ignore_eos", "invalid_value");
    }
  } else {
    if (auto lp = Integer(body, "logprobs", 0, kMaxTopLogprobs)) {
      r.logprobs = true;
      r.top_logprobs = static_cast<int>(*lp);
    }
    if (Bool(body, "echo").value_or(false)) Unsupported("echo", "= true");
    if (auto s = body.find("suffix"); s != body.end() && !s->is_null()) {
      if (!s->is_string()) WrongType("suffix", "a string", *s);
      if (!s->get<std::string>().empty()) Unsupported("suffix", "(insertion)");
    }
    if (Integer(body, "best_of", 1, 128).value_or(1) != 1) Unsupported("best_of", "other than 1");
  }
  return r;
}

RequestOptions BuildRequest(const CompletionRequest& req, const ModelContext& ctx) {
  if (!req.model.empty() && req.model != ctx.model_id) {
    throw ApiError(404, "The model `" + req.model + "` does not exist. This server serves `" + ctx.model_id + "`.",
                   "invalid_request_error", "model", "model_not_found");
  }
  RequestOptions r;
  const std::string what = req.chat ? "messages" : "prompt";
  if (req.chat) {
    if (!ctx.chat_unavailable.empty()) {
      throw BadRequest("This model has no chat template (" + ctx.chat_unavailable +
                           "); start kvshare serve with --chat-template gemma|gemma4, or use /v1/completions.",
                       "messages", "chat_template_missing");
    }
    const std::optional<ToolOffer> offer = OfferedTools(req);
    ChatTemplateOptions co;
    if (offer) {
      for (const OfferedTool& t : offer->tools) co.tools.push_back(t.function);
      co.parallel_tool_calls = offer->parallel;
    }
    try {
      r.prompt = ctx.chat->Encode(req.messages, co);
    } catch (const Error& e) {
      throw BadRequest(std::string("Invalid 'messages': ") + e.what() + ".", "messages", "invalid_value");
    }
    r.stop_tokens = ctx.chat->StopTokens();
    if (offer) {
      for (std::int32_t t : ctx.chat->ToolStopTokens()) r.stop_tokens.push_back(t);
      try {
        r.grammar = ctx.chat->ToolCallGrammar(*offer);
      } catch (const Error& e) {
        throw BadRequest(std::string(offer->forced() ? "Invalid 'tools': the call cannot be enforced: "
                                                     : "Invalid 'tools': the strict calls cannot be enforced: ") +
                             e.what() + ".",
                         "tools", "invalid_schema");
      }
    }
  } else if (req.prompt_tokens) {
    if (req.prompt_tokens->empty()) throw BadRequest("Invalid 'prompt': the prompt is empty.", "prompt", "invalid_value");
    for (std::int32_t t : *req.prompt_tokens) {
      if (t >= ctx.tokenizer->vocab_size()) {
        throw BadRequest("Invalid 'prompt': token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                             std::to_string(ctx.tokenizer->vocab_size()) + ").",
                         "prompt", "invalid_value");
      }
    }
    r.prompt = *req.prompt_tokens;
  } else {
    if (req.prompt_text->empty()) throw BadRequest("Invalid 'prompt': the prompt is empty.", "prompt", "invalid_value");
    const std::vector<ChatMessage> msgs = {{"user", *req.prompt_text}};
    // Plain completion, as `kvshare generate --raw`: <bos> and the text as is.
    r.prompt = ChatTemplate(ChatFormat::kNone, *ctx.tokenizer).Encode(msgs);
  }
  const std::int64_t n = static_cast<std::int64_t>(r.prompt.size());
  if (n >= ctx.max_context) {
    throw BadRequest("This model's maximum context length is " + std::to_string(ctx.max_context) +
                         " tokens. However, your " + what + " resulted in " + std::to_string(n) +
                         " tokens. Please reduce the length of the " + what + ".",
                     what, "context_length_exceeded");
  }
  const int max_tokens = req.max_tokens.value_or(
      req.chat ? static_cast<int>(ctx.max_context - n) : std::min<int>(kDefaultCompletionTokens, static_cast<int>(ctx.max_context - n)));
  if (n + max_tokens > ctx.max_context) {
    throw BadRequest("This model's maximum context length is " + std::to_string(ctx.max_context) +
                         " tokens. However, you requested " + std::to_string(n + max_tokens) + " tokens (" +
                         std::to_string(n) + " in the " + what + ", " + std::to_string(max_tokens) +
                         " in the completion). Please reduce the length of the " + what + " or completion.",
                     what, "context_length_exceeded");
  }
  r.max_tokens = max_tokens;
  r.sampler = req.sampler;
  if (!req.seed_given) r.sampler.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  r.stop = req.stop;
  r.ignore_eos = req.ignore_eos;
  r.speculative = req.speculative;
  r.top_logprobs = req.logprobs ? req.top_logprobs : -1;
  for (const auto& [id, bias] : req.logit_bias) {
    if (id >= ctx.tokenizer->vocab_size()) {
      throw BadRequest("Invalid 'logit_bias': token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(ctx.tokenizer->vocab_size()) + ").",
                       "logit_bias", "invalid_value");
    }
  }
  r.logit_bias = req.logit_bias;
  using Type = CompletionRequest::ResponseFormat::Type;
  if (req.response_format.type != Type::kText) {
    const std::string where =
        req.response_format.type == Type::kJsonObject ? "response_format.schema" : "response_format.json_schema.schema";
    try {
      r.grammar = req.response_format.schema.empty() ? AnyJsonObjectGrammar()
                                                     : CompileJsonSchema(req.response_format.schema);
    } catch (const Error& e) {
      throw BadRequest("Invalid '" + where + "': " + e.what() + ".", where, "invalid_schema");
    }
  }
  return r;
}

}  // namespace kvshare::server
