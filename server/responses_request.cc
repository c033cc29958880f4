#include "responses_request.h"

#include <algorithm>
#include <regex>

#include "request_fields.h"
#include "responses_format.h"

namespace kvshare::server {

using nlohmann::json;

namespace {

// The request fields of OpenAI's Responses API; others are unknown (Unknown).
// clang-format off
constexpr std::string_view kFields[] = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "max_output_tokens",
    "temperature", "top_p", "seed", "stream", "metadata", "store", "previous_response_id", "truncation",
    "background", "reasoning", "include", "conversation", "prompt", "max_tool_calls", "top_logprobs", "user",
    "safety_identifier", "prompt_cache_key", "service_tier", "stream_options"};
// clang-format on

[[noreturn]] void Missing(const std::string& name) {
  throw BadRequest("Missing required parameter: '" + name + "'.", name, "missing_required_parameter");
}

[[noreturn]] void Refused(const std::string& name, const std::string& why) {
  throw BadRequest("'" + name + "' is not supported by kvshare serve: " + why, name, "unsupported_parameter");
}

const json* Field(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

std::string String(const json& o, const char* key, const std::string& name, bool required) {
  const json* v = Field(o, key);
  if (v == nullptr) {
    if (required) Missing(name + "." + key);
    return "";
  }
  if (!v->is_string()) WrongType(name + "." + key, "a string", *v);
  return v->get<std::string>();
}

// Checks that object `o` (at `name`) has only `known` keys (and "type").
void OnlyKnown(const json& o, const std::string& name, std::initializer_list<const char*> known,
               const RequestParsing& opt, std::vector<std::string>& ignored) {
  for (const auto& [k, v] : o.items()) {
    bool ok = k == "type";
    for (const char* n : known) ok = ok || k == n;
    if (!ok) Unknown(name + "." + k, opt, ignored);
  }
}

// A message's content as chat content: a string, or chat parts.
json Content(const json& c, const std::string& name, bool assistant) {
  if (c.is_string()) return c;
  if (!c.is_array()) WrongType(name, "a string or an array of content parts", c);
  json parts = json::array();
  for (std::size_t i = 0; i < c.size(); ++i) {
    const json& p = c[i];
    const std::string pn = name + "[" + std::to_string(i) + "]";
    if (!p.is_object()) WrongType(pn, "an object", p);
    const std::string type = String(p, "type", pn, true);
    if (type == "input_text" || type == "output_text" || type == "refusal") {
      const char* key = type == "refusal" ? "refusal" : "text";
      parts.push_back({{"type", "text"}, {"text", String(p, key, pn, true)}});
    } else if (type == "input_image" && !assistant) {
      if (Field(p, "file_id")) Refused(pn + ".file_id", "images are taken as data: URLs in image_url only.");
      json part = {{"type", "image_url"}, {"image_url", {{"url", String(p, "image_url", pn, true)}}}};
      parts.push_back(std::move(part));
    } else {
      throw BadRequest("Invalid value for '" + pn + ".type': '" + type + "'. Supported values are 'input_text'" +
                           (assistant ? ", 'output_text' and 'refusal'." : " and 'input_image'."),
                       pn + ".type", "invalid_value");
    }
  }
  return parts;
}

// A function_call item as a chat tool call.
json ToolCall(const json& item, const std::string& name) {
  std::string args = String(item, "arguments", name, true);
  return {{"id", String(item, "call_id", name, true)},
          {"type", "function"},
          {"function", {{"name", String(item, "name", name, true)}, {"arguments", std::move(args)}}}};
}

// Appends the input items (or a string) to `messages`, noting each message's source.
void AddInput(const json& input, json& messages, std::vector<std::string>& sources, const RequestParsing& opt,
              std::vector<std::string>& ignored) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    sources.push_back("input");
    return;
  }
  if (!input.is_array()) WrongType("input", "a string or an array of input items", input);
  for (std::size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string name = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) WrongType(name, "an object", item);
    const std::string type = Field(item, "type") ? String(item, "type", name, true) : "message";
    if (type == "message") {
      OnlyKnown(item, name, {"role", "content", "id", "status"}, opt, ignored);
      std::string role = String(item, "role", name, true);
      const json* c = Field(item, "content");
      if (c == nullptr) Missing(name + ".content");
      if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
        throw BadRequest("Invalid value for '" + name + ".role': '" + role +
                             "'. Supported values are 'user', 'assistant', 'system' and 'developer'.",
                         name + ".role", "invalid_value");
      }
      messages.push_back({{"role", role}, {"content", Content(*c, name + ".content", role == "assistant")}});
      sources.push_back(name);
    } else if (type == "function_call") {
      OnlyKnown(item, name, {"call_id", "name", "arguments", "id", "status"}, opt, ignored);
      // Calls join the assistant message before them (its text, or other calls).
      if (messages.empty() || messages.back()["role"] != "assistant") {
        messages.push_back({{"role", "assistant"}, {"content", nullptr}});
        sources.push_back(name);
      }
      messages.back()["tool_calls"].push_back(ToolCall(item, name));
    } else if (type == "function_call_output") {
      OnlyKnown(item, name, {"call_id", "output", "id", "status"}, opt, ignored);
      const json* out = Field(item, "output");
      if (out == nullptr) Missing(name + ".output");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", String(item, "call_id", name, true)},
                          {"content", Content(*out, name + ".output", false)}});
      sources.push_back(name);
    } else if (type == "item_reference" || type == "reasoning") {
      Refused(name + ".type", "'" + type + "' items are not served; send messages, function_call and " +
                                  "function_call_output items (or previous_response_id).");
    } else {
      throw BadRequest("Invalid value for '" + name + ".type': '" + type +
                           "'. Supported values are 'message', 'function_call' and 'function_call_output'.",
                       name + ".type", "invalid_value");
    }
  }
}

// Responses' flat function tools as chat tools; echo gets them with strict filled in.
json Tools(const json& tools, json& echo) {
  if (!tools.is_array()) WrongType("tools", "an array", tools);
  json out = json::array();
  echo = json::array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string name = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) WrongType(name, "an object", t);
    const std::string type = String(t, "type", name, true);
    if (type != "function") {
      Refused(name + ".type", "'" + type + "' is a built-in tool of OpenAI's; this server runs function tools only.");
    }
    json f = {{"name", String(t, "name", name, true)}};
    for (const char* k : {"description", "parameters"}) {
      if (const json* v = Field(t, k)) f[k] = *v;
    }
    const std::optional<bool> strict = Bool(t, "strict");
    f["strict"] = strict.value_or(true);  // OpenAI's default for Responses
    json e = t;
    e["strict"] = f["strict"];
    if (!e.contains("description")) e["description"] = nullptr;
    if (!e.contains("parameters")) e["parameters"] = nullptr;
    echo.push_back(std::move(e));
    out.push_back({{"type", "function"}, {"function", std::move(f)}});
  }
  return out;
}

json ToolChoice(const json& c) {
  if (c.is_string()) return c;
  if (!c.is_object()) WrongType("tool_choice", "a string or an object", c);
  const std::string type = String(c, "type", "tool_choice", true);
  if (type != "function") {
    Refused("tool_choice.type",
            "'" + type + "'; choose 'auto', 'none', 'required' or {\"type\": \"function\", " + "\"name\": ...}.");
  }
  return {{"type", "function"}, {"function", {{"name", String(c, "name", "tool_choice", true)}}}};
}

// text.format as a chat response_format.
json Format(const json& text, const RequestParsing& opt, std::vector<std::string>& ignored) {
  if (!text.is_object()) WrongType("text", "an object", text);
  OnlyKnown(text, "text", {"format", "verbosity"}, opt, ignored);
  const json* f = Field(text, "format");
  if (f == nullptr) return {{"type", "text"}};
  if (!f->is_object()) WrongType("text.format", "an object", *f);
  const std::string type = String(*f, "type", "text.format", true);
  if (type != "json_schema") return {{"type", type}};  // text, json_object; the chat parser checks the rest
  json js = {{"name", String(*f, "name", "text.format", true)}};
  for (const char* k : {"schema", "description", "strict"}) {
    if (const json* v = Field(*f, k)) js[k] = *v;
  }
  if (!js.contains("schema")) Missing("text.format.schema");
  return {{"type", "json_schema"}, {"json_schema", std::move(js)}};
}

// The raw body's text and tools in the request's key order (the schemas of
// text.format and of the tools' parameters), or null.
nlohmann::ordered_json OrderedSchemas(std::string_view raw) {
  using Ordered = nlohmann::ordered_json;
  try {
    return Ordered::parse(raw, [](int depth, Ordered::parse_event_t event, Ordered& parsed) {
      return !(event == Ordered::parse_event_t::key && depth == 1 && parsed != "text" && parsed != "tools");
    });
  } catch (const nlohmann::json::exception&) {
    return nullptr;
  }
}

void RefuseSet(const json& body, const char* key, const std::string& why) {
  const json* v = Field(body, key);
  if (v == nullptr || (v->is_boolean() && !v->get<bool>()) || (v->is_array() && v->empty())) return;
  Refused(key, why);
}

}  // namespace

ResponsesRequest ParseResponsesRequest(const json& body, std::string_view raw, const ResponseStore& store,
                                       const RequestParsing& opt) {
  if (!body.is_object())
    throw BadRequest("Invalid request body: expected a JSON object.", std::nullopt, "invalid_type");
  ResponsesRequest r;
  for (const auto& [k, v] : body.items()) {
    if (std::find(std::begin(kFields), std::end(kFields), k) == std::end(kFields)) Unknown(k, opt, r.ignored);
  }
  RefuseSet(body, "background", "responses run in the foreground only.");
  RefuseSet(body, "include", "no extra output is served.");
  RefuseSet(body, "conversation", "conversations are not stored; use previous_response_id.");
  RefuseSet(body, "prompt", "stored prompt templates are not served.");
  RefuseSet(body, "max_tool_calls", "it is not enforced.");
  RefuseSet(body, "top_logprobs", "logprobs are served by /v1/chat/completions.");
  if (const json* t = Field(body, "truncation"); t != nullptr && *t != "disabled") {
    Refused("truncation", "only \"disabled\" (a conversation longer than the context is a 400).");
  }
  if (const json* re = Field(body, "reasoning"); re != nullptr) {
    if (!re->is_object()) WrongType("reasoning", "an object", *re);
    if (Field(*re, "effort") || Field(*re, "summary")) {
      Refused("reasoning.effort", "the served model has no reasoning effort setting.");
    }
  }
  json chat = {{"messages", json::array()}};
  json& messages = chat["messages"];
  r.echo = {{"instructions", nullptr},
            {"metadata", json::object()},
            {"previous_response_id", nullptr},
            {"tools", json::array()},
            {"tool_choice", "auto"},
            {"parallel_tool_calls", true},
            {"temperature", 1.0},
            {"top_p", 1.0},
            {"max_output_tokens", nullptr},
            {"text", {{"format", {{"type", "text"}}}}},
            {"truncation", "disabled"},
            {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
            {"user", nullptr},
            {"background", false}};
  if (const json* ins = Field(body, "instructions")) {
    if (!ins->is_string()) WrongType("instructions", "a string", *ins);
    messages.push_back({{"role", "system"}, {"content", *ins}});
    r.sources.push_back("instructions");
    r.echo["instructions"] = *ins;
  }
  if (const json* prev = Field(body, "previous_response_id")) {
    if (!prev->is_string()) WrongType("previous_response_id", "a string", *prev);
    const std::string id = prev->get<std::string>();
    std::optional<StoredResponse> stored = store.Get(id);
    if (!stored) {
      throw BadRequest("Previous response with id '" + id + "' not found (never stored, stored with \"store\": " +
                           "false, or evicted: this server keeps the last " + std::to_string(store.capacity()) +
                           " responses, kvshare serve --responses-kept).",
                       "previous_response_id", "previous_response_not_found");
    }
    for (const json& m : stored->messages) {
      messages.push_back(m);
      r.history.push_back(m);
      r.sources.push_back("previous_response_id");
    }
    r.echo["previous_response_id"] = id;
  }
  const json* input = Field(body, "input");
  if (input == nullptr) Missing("input");
  const std::size_t before = messages.size();
  AddInput(*input, messages, r.sources, opt, r.ignored);
  for (std::size_t i = before; i < messages.size(); ++i) r.history.push_back(messages[i]);
  r.input_items = InputItems(*input);
  if (const json* m = Field(body, "model")) chat["model"] = *m;
  if (const json* t = Field(body, "tools")) chat["tools"] = Tools(*t, r.echo["tools"]);
  if (const json* c = Field(body, "tool_choice")) {
    chat["tool_choice"] = ToolChoice(*c);
    r.echo["tool_choice"] = *c;
  }
  if (const json* text = Field(body, "text")) {
    chat["response_format"] = Format(*text, opt, r.ignored);
    r.echo["text"] = {{"format", text->value("format", json{{"type", "text"}})}};
  }
  for (const char* k : {"temperature", "top_p", "seed", "parallel_tool_calls"}) {
    if (const json* v = Field(body, k)) {
      chat[k] = *v;
      if (r.echo.contains(k)) r.echo[k] = *v;
    }
  }
  if (const json* v = Field(body, "max_output_tokens")) {
    chat["max_completion_tokens"] = *v;
    r.echo["max_output_tokens"] = *v;
  }
  if (const json* u = Field(body, "user")) r.echo["user"] = *u;
  if (const json* md = Field(body, "metadata")) {
    if (!md->is_object()) WrongType("metadata", "an object", *md);
    if (md->size() > 16) {
      throw BadRequest("Invalid 'metadata': at most 16 keys, got " + std::to_string(md->size()) + ".", "metadata",
                       "invalid_value");
    }
    for (const auto& [k, v] : md->items()) {
      if (!v.is_string()) WrongType("metadata." + k, "a string", v);
    }
    r.echo["metadata"] = *md;
  }
  r.stream = Bool(body, "stream").value_or(false);
  r.store = Bool(body, "store").value_or(true);
  r.echo["store"] = r.store;
  chat["stream"] = r.stream;
  if (r.stream) chat["stream_options"] = {{"include_usage", true}};
  nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(chat.dump());
  const nlohmann::ordered_json in_order = OrderedSchemas(raw);
  if (chat.contains("response_format") && chat["response_format"].contains("json_schema")) {
    try {
      ordered["response_format"]["json_schema"]["schema"] = in_order.at("text").at("format").at("schema");
    } catch (const nlohmann::json::exception&) {
    }
  }
  // Tools map one to one (Tools): their parameters as declared.
  if (ordered.contains("tools") && in_order.is_object() && in_order.contains("tools") && in_order["tools"].is_array() &&
      in_order["tools"].size() == ordered["tools"].size()) {
    for (std::size_t i = 0; i < ordered["tools"].size(); ++i) {
      const nlohmann::ordered_json& t = in_order["tools"][i];
      if (t.is_object() && t.contains("parameters") && t["parameters"].is_object()) {
        ordered["tools"][i]["function"]["parameters"] = t["parameters"];
      }
    }
  }
  r.chat_body = ordered.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

ApiError RenameChatError(const ApiError& e, const ResponsesRequest& req) {
  static const std::regex kMessage(R"(messages\[(\d+)\])");
  static const std::pair<std::regex, const char*> kNames[] = {
      {std::regex(R"(response_format\.json_schema)"), "text.format"},
      {std::regex(R"(response_format)"), "text.format"},
      {std::regex(R"(max_completion_tokens)"), "max_output_tokens"},
      {std::regex(R"((tools\[\d+\])\.function)"), "$1"},
      {std::regex(R"(tool_choice\.function\.name)"), "tool_choice.name"},
  };
  auto rename = [&](std::string s) {
    std::string out;
    auto begin = std::sregex_iterator(s.begin(), s.end(), kMessage);
    std::size_t last = 0;
    for (auto it = begin; it != std::sregex_iterator(); ++it) {
      const std::size_t i = std::stoul((*it)[1].str());
      out += s.substr(last, it->position() - last);
      out += i < req.sources.size() ? req.sources[i] : it->str();
      last = it->position() + it->length();
    }
    out += s.substr(last);
    for (const auto& [rx, to] : kNames) out = std::regex_replace(out, rx, to);
    return out;
  };
  std::optional<std::string> param;
  if (e.param()) param = rename(*e.param());
  return ApiError(e.status(), rename(e.message()), e.type(), param, e.code());
}

}  // namespace kvshare::server
