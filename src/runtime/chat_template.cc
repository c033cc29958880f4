// Chat formats (include/kvshare/runtime/chat_template.h): choosing one the way
// llama.cpp does, and writing Gemma 3 / Gemma 4 conversations without Jinja.
#include "kvshare/runtime/chat_template.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "kvshare/runtime/tool_calls.h"

namespace kvshare {
namespace {

constexpr std::array<std::string_view, 3> kNames = {"gemma", "gemma4", "none"};

// The marker a template text must contain, per format (llama.cpp's rule for
// gemma; "<|turn>" is Gemma 4's turn opener).
constexpr std::string_view kGemmaMarker = "<start_of_turn>";
constexpr std::string_view kGemma4Marker = "<|turn>";

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Gemma 4's strip_thinking macro: drop every "<|channel>…<channel|>" span (a
// part with an opener keeps only its text before it), then trim.
std::string StripThinking(std::string_view text) {
  std::string out;
  for (std::size_t start = 0;;) {
    const std::size_t close = text.find("<channel|>", start);
    std::string_view part = text.substr(start, close == std::string_view::npos ? std::string_view::npos : close - start);
    if (const std::size_t open = part.find("<|channel>"); open != std::string_view::npos) part = part.substr(0, open);
    out += part;
    if (close == std::string_view::npos) break;
    start = close + std::string_view("<channel|>").size();
  }
  return std::string(Trim(out));
}

// The conversation as alternating pieces: markup (encoded with parse_special)
// and message text (taken literally unless the caller asks otherwise).
struct Segment {
  std::string text;
  bool markup;
};

class Segments {
 public:
  void Markup(std::string_view t) { Add(t, true); }
  void Text(std::string_view t) { Add(t, false); }
  std::vector<Segment> Take() { return std::move(segs_); }

 private:
  void Add(std::string_view text, bool markup) {
    if (text.empty()) return;
    if (!segs_.empty() && segs_.back().markup == markup) {
      segs_.back().text += text;
    } else {
      segs_.push_back({std::string(text), markup});
    }
  }
  std::vector<Segment> segs_;
};

[[noreturn]] void BadRole(ChatFormat format, std::size_t i, const std::string& role) {
  throw Error("chat template " + std::string(ChatFormatName(format)) + ": messages[" + std::to_string(i) +
              "].role must be \"system\", \"user\", \"assistant\", \"model\" or \"tool\", got \"" + role +
              "\"");
}

void CheckToolMessages(ChatFormat format, std::span<const ChatMessage> messages) {
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "tool" && messages[i].tool_call_id.empty()) {
      throw Error("chat template " + std::string(ChatFormatName(format)) + ": messages[" + std::to_string(i) +
                  "] (role \"tool\") has no tool_call_id: it must name the call it answers");
    }
  }
}

// The name of the function tool message i answers: from the calls of the
// assistant message before the run of tool messages it is in (matched by
// id), else its own name, else "unknown" (Gemma 4's template's rule).
std::string ToolResponseName(std::span<const ChatMessage> messages, std::size_t i) {
  std::size_t j = i;
  while (j > 0 && messages[j - 1].role == "tool") --j;
  if (j > 0) {
    for (const ToolCall& c : messages[j - 1].tool_calls) {
      if (c.id == messages[i].tool_call_id) return c.name;
    }
  }
  return messages[i].name.empty() ? "unknown" : messages[i].name;
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
  std::stable_sort(items.begin(), items.end(), [&](const auto& a, const auto& b) { return lower(a.first) < lower(b.first); });
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

constexpr std::string_view kQ = "<|\"|>";

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
      out += (i ? "," : "") + std::string(kQ) + (required[i].is_string() ? required[i].get<std::string>() : required[i].dump()) + std::string(kQ);
    }
  }
  return out + "]";
}

// The template's format_parameters (its `required` argument is unused there too).
std::string FormatParameters(const Json& properties) {
  static const std::array<std::string_view, 5> kStandard = {"description", "type", "properties", "required", "nullable"};
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
  std::string out = "<|tool_call>call:" + c.name + "{";
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
  return out + "}<tool_call|>";
}

void GemmaSegments(std::span<const ChatMessage> messages, const ChatTemplateOptions& options, Segments& out) {
  CheckToolMessages(ChatFormat::kGemma, messages);
  std::string system_prompt;
  bool tools_pending = !options.tools.empty();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      system_prompt += Trim(m.content);
      continue;
    }
    std::string_view role;
    if (m.role == "user" || m.role == "tool") {
      role = "user";
    } else if (m.role == "assistant" || m.role == "model") {
      role = "model";
    } else {
      BadRole(ChatFormat::kGemma, i, m.role);
    }
    out.Markup("<start_of_turn>");
    out.Markup(role);
    out.Markup("\n");
    if (tools_pending && role != "model") {
      // The tool list joins the system text, where Gemma reads instructions.
      const std::string tools = ToolCallInstructions(options.tools, options.parallel_tool_calls);
      system_prompt = system_prompt.empty() ? tools : system_prompt + "\n\n" + tools;
      tools_pending = false;
    }
    if (!system_prompt.empty() && role != "model") {
      out.Text(system_prompt);
      out.Markup("\n\n");
      system_prompt.clear();
    }
    if (m.role == "tool") {
      // A run of tool results forms one user turn, one JSON line each.
      for (;; ++i) {
        nlohmann::ordered_json r = {{"name", ToolResponseName(messages, i)}, {"content", messages[i].content}};
        out.Text(nlohmann::ordered_json{{"tool_response", r}}.dump());
        if (i + 1 >= messages.size() || messages[i + 1].role != "tool") break;
        out.Text("\n");
      }
    } else if (!m.tool_calls.empty()) {
      const std::string_view text = Trim(m.content);
      out.Text(text);
      if (!text.empty()) out.Text("\n");
      out.Text(JsonToolCallText(m.tool_calls));
    } else {
      out.Text(Trim(m.content));
    }
    out.Markup("<end_of_turn>\n");
  }
  if (options.add_generation_prompt) out.Markup("<start_of_turn>model\n");
}

void Gemma4Segments(std::span<const ChatMessage> messages, const ChatTemplateOptions& options, Segments& out) {
  CheckToolMessages(ChatFormat::kGemma4, messages);
  std::size_t first = 0;
  const bool system = !messages.empty() && messages[0].role == "system";
  if (system || !options.tools.empty()) {
    out.Markup("<|turn>system\n");
    if (system) out.Text(Trim(messages[0].content));
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
      out.Text(StripThinking(m.content));
    } else {
      out.Text(Trim(m.content));
    }
    if (last == "tool_call" && !responses) {
      out.Markup("<|tool_response>");
    } else if (!(responses && m.content.empty())) {
      out.Markup("<turn|>\n");
    }
  }
  if (options.add_generation_prompt && last.empty()) out.Markup("<|turn>model\n<|channel>thought\n<channel|>");
}

std::vector<Segment> BuildSegments(ChatFormat format, std::span<const ChatMessage> messages,
                                   const ChatTemplateOptions& options, bool bos_text) {
  Segments out;
  if (bos_text) out.Markup("<bos>");
  switch (format) {
    case ChatFormat::kNone:
      for (const ChatMessage& m : messages) out.Text(m.content);
      break;
    case ChatFormat::kGemma: GemmaSegments(messages, options, out); break;
    case ChatFormat::kGemma4: Gemma4Segments(messages, options, out); break;
  }
  return out.Take();
}

// The marker tokens a format needs in the vocabulary; the first is the one
// that ends a turn.
std::vector<std::string_view> MarkerTokens(ChatFormat format) {
  switch (format) {
    case ChatFormat::kNone: return {};
    case ChatFormat::kGemma: return {"<end_of_turn>", "<start_of_turn>"};
    case ChatFormat::kGemma4: return {"<turn|>", "<|turn>", "<|channel>", "<channel|>"};
  }
  return {};
}

// The first `n` characters of a template, quoted on one line, for messages.
std::string Excerpt(std::string_view text, std::size_t n = 60) {
  std::string out = "\"";
  for (char c : text.substr(0, n)) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out + (text.size() > n ? "...\"" : "\"");
}

}  // namespace

std::string_view ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kNone: return "none";
    case ChatFormat::kGemma: return "gemma";
    case ChatFormat::kGemma4: return "gemma4";
  }
  return "unknown";
}

std::span<const std::string_view> ChatFormatNames() { return kNames; }

ChatFormat ChatFormatFromName(std::string_view name) {
  for (ChatFormat f : {ChatFormat::kGemma, ChatFormat::kGemma4, ChatFormat::kNone}) {
    if (ChatFormatName(f) == name) return f;
  }
  throw Error("unknown chat template \"" + std::string(name) +
              "\": valid names are gemma (Gemma 2/3), gemma4 (Gemma 4) and none (plain completion)");
}

std::optional<ChatFormat> DetectChatFormat(std::string_view text) {
  for (ChatFormat f : {ChatFormat::kGemma, ChatFormat::kGemma4, ChatFormat::kNone}) {
    if (ChatFormatName(f) == text) return f;
  }
  if (text.find(kGemma4Marker) != std::string_view::npos) return ChatFormat::kGemma4;
  if (text.find(kGemmaMarker) != std::string_view::npos) return ChatFormat::kGemma;
  return std::nullopt;
}

ChatFormatChoice ChooseChatFormat(std::optional<std::string_view> file_template, std::optional<std::string_view> name) {
  if (name) return {ChatFormatFromName(*name), ChatFormatSource::kNamed, "named by the caller"};
  if (!file_template || file_template->empty()) {
    return {ChatFormat::kNone, ChatFormatSource::kFileHasNone,
            "the file has no tokenizer.chat_template"};
  }
  const std::optional<ChatFormat> f = DetectChatFormat(*file_template);
  if (!f) {
    return {ChatFormat::kNone, ChatFormatSource::kFileUnrecognized,
            "the file's tokenizer.chat_template is not a format kvshare knows (gemma: contains \"" +
                std::string(kGemmaMarker) + "\"; gemma4: contains \"" + std::string(kGemma4Marker) +
                "\"); it starts " + Excerpt(*file_template)};
  }
  std::string why = "the file's tokenizer.chat_template ";
  if (*file_template == ChatFormatName(*f)) {
    why += "names it";
  } else {
    why += std::string("contains \"") + std::string(*f == ChatFormat::kGemma4 ? kGemma4Marker : kGemmaMarker) + "\"";
  }
  return {*f, ChatFormatSource::kFile, why};
}

ChatFormatChoice ChooseChatFormat(const GgufFile& file, std::optional<std::string_view> name) {
  return ChooseChatFormat(file.GetStringOpt("tokenizer.chat_template"), name);
}

std::string FormatChat(ChatFormat format, std::span<const ChatMessage> messages, const ChatTemplateOptions& options) {
  std::string out;
  for (const Segment& s : BuildSegments(format, messages, options, options.bos_text)) out += s.text;
  return out;
}

ChatTemplate::ChatTemplate(ChatFormat format, const Tokenizer& tokenizer) : format_(format), tokenizer_(&tokenizer) {
  const std::vector<std::string_view> markers = MarkerTokens(format);
  for (std::string_view m : markers) {
    if (!tokenizer.TokenId(m)) {
      throw Error("chat template " + std::string(ChatFormatName(format)) + " needs the token \"" + std::string(m) +
                  "\", which this model's vocabulary does not have: the model does not use this format; choose "
                  "another chat template (or none for plain completion)");
    }
  }
  if (!markers.empty()) end_of_turn_ = *tokenizer.TokenId(markers.front());
  if (format == ChatFormat::kGemma4) tool_response_ = tokenizer.TokenId("<|tool_response>").value_or(-1);
}

std::vector<std::int32_t> ChatTemplate::Encode(std::span<const ChatMessage> messages,
                                               const ChatTemplateOptions& options) const {
  std::vector<std::int32_t> ids;
  if (options.add_bos && tokenizer_->bos_id() >= 0) ids.push_back(tokenizer_->bos_id());
  for (const Segment& s : BuildSegments(format_, messages, options, /*bos_text=*/false)) {
    const auto part = tokenizer_->Encode(
        s.text, {.add_bos = false, .add_eos = false, .parse_special = s.markup || options.parse_special_in_content});
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::vector<std::int32_t> ChatTemplate::StopTokens() const {
  if (end_of_turn_ < 0) return {};
  return {end_of_turn_};
}

std::vector<std::int32_t> ChatTemplate::ToolStopTokens() const {
  if (tool_response_ < 0) return {};
  return {tool_response_};
}

std::vector<std::int32_t> ChatTemplate::CloseModelTurn(bool ended_with_end_of_turn) const {
  if (format_ == ChatFormat::kNone) return {};
  std::vector<std::int32_t> ids;
  if (!ended_with_end_of_turn) ids.push_back(end_of_turn_);
  const auto nl = tokenizer_->Encode("\n", {.add_bos = false, .add_eos = false, .parse_special = false});
  ids.insert(ids.end(), nl.begin(), nl.end());
  return ids;
}

}  // namespace kvshare
