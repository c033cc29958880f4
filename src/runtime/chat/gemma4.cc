// The gemma4 chat format: Gemma 4 (include/kvshare/runtime/chat_template.h),
// the text of google/gemma-4-*-it's chat_template.jinja written in C++
// (thinking off): turns between "<|turn>" and "<turn|>", tools declared in
// the system turn in Gemma's notation, calls and their responses inside the
// model turn with the template's own markers (gemma4.h). Its calls are read
// and constrained in that syntax (gemma4_calls.cc); "<|tool_response>" ends
// generation while tools are offered.
#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/family.h"
#include "runtime/chat/gemma4.h"

namespace kvshare::chat {
namespace {

// "<turn|>" first: it ends a turn.
constexpr std::array<std::string_view, 4> kMarkers = {"<turn|>", "<|turn>", "<|channel>", "<channel|>"};
constexpr std::array<std::string_view, 3> kToolCallMarkers = {gemma4::kCallOpen, gemma4::kCallClose, gemma4::kQuote};

// Gemma 4's strip_thinking macro: drop every "<|channel>…<channel|>" span (a
// part with an opener keeps only its text before it), then trim.
std::string StripThinking(std::string_view text) {
  std::string out;
  for (std::size_t start = 0;;) {
    const std::size_t close = text.find("<channel|>", start);
    std::string_view part =
        text.substr(start, close == std::string_view::npos ? std::string_view::npos : close - start);
    if (const std::size_t open = part.find("<|channel>"); open != std::string_view::npos) part = part.substr(0, open);
    out += part;
    if (close == std::string_view::npos) break;
    start = close + std::string_view("<channel|>").size();
  }
  return std::string(Trim(out));
}

// ---- Gemma 4's tool notation (the template's macros, in C++) ----

using Json = nlohmann::json;

// Jinja's dictsort: keys compared without case.
std::vector<std::pair<std::string, const Json*>> DictSort(const Json& object) {
  std::vector<std::pair<std::string, const Json*>> items;
  for (auto it = object.begin(); it != object.end(); ++it) items.emplace_back(it.key(), &it.value());
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  std::stable_sort(items.begin(), items.end(),
                   [&](const auto& a, const auto& b) { return lower(a.first) < lower(b.first); });
  return items;
}

// Jinja truthiness of a (possibly absent) JSON value.
bool Truthy(const Json* v) {
  if (v == nullptr || v->is_null()) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_string()) return !v->get<std::string>().empty();
  if (v->is_array() || v->is_object()) return !v->empty();
  if (v->is_number_integer() || v->is_number_unsigned()) return v->get<std::int64_t>() != 0;
  return v->get<double>() != 0;
}

const Json* Field(const Json& v, const char* key) {
  if (!v.is_object()) return nullptr;
  auto it = v.find(key);
  return it == v.end() ? nullptr : &*it;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// `value['type'] | upper` (absent or not a string: "").
std::string TypeUpper(const Json& v) {
  const Json* t = Field(v, "type");
  return t && t->is_string() ? Upper(t->get<std::string>()) : std::string();
}

constexpr std::string_view kQ = gemma4::kQuote;

// The template's format_argument.
std::string FormatArgument(const Json& v, bool escape_keys) {
  if (v.is_string()) return std::string(kQ) + v.get<std::string>() + std::string(kQ);
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : DictSort(v)) {
      if (!first) out += ",";
      first = false;
      out += escape_keys ? std::string(kQ) + k + std::string(kQ) : k;
      out += ":" + FormatArgument(*x, escape_keys);
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + FormatArgument(v[i], escape_keys);
    return out + "]";
  }
  if (v.is_null()) return "None";  // Python's str(None)
  return v.dump();
}

std::string RequiredList(const Json& required) {
  std::string out = "required:[";
  if (required.is_array()) {
    for (std::size_t i = 0; i < required.size(); ++i) {
      out += (i ? "," : "") + std::string(kQ) +
             (required[i].is_string() ? required[i].get<std::string>() : required[i].dump()) + std::string(kQ);
    }
  }
  return out + "]";
}

// The template's format_parameters (its `required` argument is unused there too).
std::string FormatParameters(const Json& properties) {
  static const std::array<std::string_view, 5> kStandard = {"description", "type", "properties", "required",
                                                            "nullable"};
  std::string out;
  bool found_first = false;
  for (const auto& [key, vp] : DictSort(properties)) {
    const Json& value = *vp;
    if (std::find(kStandard.begin(), kStandard.end(), key) != kStandard.end()) continue;
    if (found_first) out += ",";
    found_first = true;
    out += key + ":{";
    bool add_comma = false;
    auto comma = [&] {
      if (add_comma) out += ",";
      add_comma = true;
    };
    if (const Json* d = Field(value, "description"); Truthy(d)) {
      out += "description:" + std::string(kQ) + (d->is_string() ? d->get<std::string>() : d->dump()) + std::string(kQ);
      add_comma = true;
    }
    const std::string type = TypeUpper(value);
    if (type == "STRING") {
      if (const Json* e = Field(value, "enum"); Truthy(e)) {
        comma();
        out += "enum:" + FormatArgument(*e, true);
      }
    } else if (type == "ARRAY") {
      if (const Json* items = Field(value, "items"); items && items->is_object() && !items->empty()) {
        comma();
        out += "items:{";
        bool items_first = true;
        for (const auto& [ik, iv] : DictSort(*items)) {
          if (iv->is_null()) continue;
          if (!items_first) out += ",";
          items_first = false;
          if (ik == "properties") {
            out += "properties:{";
            if (iv->is_object()) out += FormatParameters(*iv);
            out += "}";
          } else if (ik == "required") {
            out += RequiredList(*iv);
          } else if (ik == "type") {
            if (iv->is_string()) {
              out += "type:" + FormatArgument(Json(Upper(iv->get<std::string>())), true);
            } else {
              Json upper = Json::array();
              if (iv->is_array()) {
                for (const Json& t : *iv) upper.push_back(t.is_string() ? Json(Upper(t.get<std::string>())) : t);
              }
              out += "type:" + FormatArgument(upper, true);
            }
          } else {
            out += ik + ":" + FormatArgument(*iv, true);
          }
        }
        out += "}";
      }
    }
    if (Truthy(Field(value, "nullable"))) {
      comma();
      out += "nullable:true";
    }
    if (type == "OBJECT") {
      const Json* props = Field(value, "properties");
      comma();
      out += "properties:{" + FormatParameters(props && props->is_object() ? *props : value) + "}";
      if (const Json* r = Field(value, "required"); Truthy(r)) {
        comma();
        out += RequiredList(*r);
      }
    }
    comma();
    out += "type:" + std::string(kQ) + type + std::string(kQ) + "}";
  }
  return out;
}

Json ParseJsonOr(const std::string& text, Json fallback) {
  if (Trim(text).empty()) return fallback;
  try {
    return Json::parse(text);
  } catch (const Json::parse_error&) {
    return fallback;
  }
}

// The template's format_function_declaration (OpenAI tools have no
// "response" field, so that part never applies).
std::string FunctionDeclaration(const ToolFunction& t) {
  std::string out = "declaration:" + t.name + "{description:" + std::string(kQ) + t.description + std::string(kQ);
  const Json params = ParseJsonOr(t.parameters, Json());
  if (Truthy(&params)) {
    out += ",parameters:{";
    if (const Json* p = Field(params, "properties"); Truthy(p)) {
      out += "properties:{" + (p->is_object() ? FormatParameters(*p) : std::string()) + "},";
    }
    if (const Json* r = Field(params, "required"); Truthy(r)) out += RequiredList(*r) + ",";
    // The template closes "parameters:{" only here, when a type is given.
    if (Truthy(Field(params, "type"))) out += "type:" + std::string(kQ) + TypeUpper(params) + std::string(kQ) + "}";
  }
  return std::string(Trim(out + "}"));
}

// An assistant call: arguments that are a JSON object in Gemma's notation,
// any other text as it is (the template's two cases).
std::string Gemma4CallText(const ToolCall& c) {
  std::string out = std::string(gemma4::kCallOpen) + "call:" + c.name + "{";
  const Json args = ParseJsonOr(c.arguments, Json::object());
  if (args.is_object()) {
    bool first = true;
    for (const auto& [k, v] : DictSort(args)) {
      if (!first) out += ",";
      first = false;
      out += k + ":" + FormatArgument(*v, false);
    }
  } else {
    out += c.arguments;
  }
  return out + "}" + std::string(gemma4::kCallClose);
}

void Render(std::span<const ChatMessage> messages, const ChatTemplateOptions& options, Segments& out) {
  CheckToolMessages(ChatFormat::kGemma4, messages);
  std::size_t first = 0;
  const bool system = !messages.empty() && messages[0].role == "system";
  if (system || !options.tools.empty()) {
    out.Markup("<|turn>system\n");
    if (system) Content(out, Gemma4Family(), messages[0], Trim);
    // Tool declarations are written as markup: their <|"|> quotes are tokens.
    for (const ToolFunction& t : options.tools) out.Markup("<|tool>" + FunctionDeclaration(t) + "<tool|>");
    out.Markup("<turn|>\n");
    first = system ? 1 : 0;
  }
  // What the last written message left open: its calls awaiting responses
  // ("tool_call") or responses in the model turn ("tool_response").
  std::string_view last = "";
  for (std::size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") continue;  // written after the calls they answer
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "model") {
      BadRole(ChatFormat::kGemma4, i, m.role);
    }
    last = "";
    const bool model = m.role == "assistant" || m.role == "model";
    // The template continues the model turn when the previous non-tool
    // message's role (as given) was "assistant".
    std::size_t prev = i;
    while (prev > first && messages[prev - 1].role == "tool") --prev;
    const bool continues = model && prev > first && messages[prev - 1].role == "assistant";
    if (!continues) {
      out.Markup("<|turn>");
      out.Markup(model ? "model" : m.role);
      out.Markup("\n");
    }
    for (const ToolCall& c : m.tool_calls) {
      out.Markup(Gemma4CallText(c));
      last = "tool_call";
    }
    bool responses = false;
    if (!m.tool_calls.empty()) {
      for (std::size_t k = i + 1; k < messages.size() && messages[k].role == "tool"; ++k) {
        out.Markup("<|tool_response>response:" + ToolResponseName(messages, k) + "{value:" + std::string(kQ));
        out.Text(messages[k].content);
        out.Markup(std::string(kQ) + "}<tool_response|>");
        responses = true;
        last = "tool_response";
      }
    }
    if (model) {
      if (m.has_media()) NoImagesIn(ChatFormat::kGemma4, i, m.role);
      out.Text(StripThinking(m.content));
    } else {
      Content(out, Gemma4Family(), m, Trim);
    }
    if (last == "tool_call" && !responses) {
      out.Markup("<|tool_response>");
    } else if (!(responses && m.content.empty())) {
      out.Markup("<turn|>\n");
    }
  }
  if (options.add_generation_prompt && last.empty()) out.Markup("<|turn>model\n<|channel>thought\n<channel|>");
}

}  // namespace

const Family& Gemma4Family() {
  static const Family f{.format = ChatFormat::kGemma4,
                        .template_marker = "<|turn>",
                        .markers = kMarkers,
                        .tool_stop = "<|tool_response>",
                        .tool_syntax = ToolCallSyntax::kGemma4,
                        .tool_call_markers = kToolCallMarkers,
                        .image_placeholder = "<|image|>",
                        .audio_placeholder = "<|audio|>",
                        .render = Render};
  return f;
}

}  // namespace kvshare::chat
