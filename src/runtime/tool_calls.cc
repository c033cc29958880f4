// Function calls in model output (include/kvshare/runtime/tool_calls.h): the JSON
// convention's prompt text, and the streaming parser for it and for Gemma 4's
// own call markers.
#include "kvshare/runtime/tool_calls.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "kvshare/common/error.h"
#include "common/utf8.h"

namespace kvshare {
namespace {

using Json = nlohmann::ordered_json;

// Arguments as compact JSON; bytes that are not UTF-8 (model output can hold
// them) become U+FFFD instead of making dump() throw.
std::string DumpArguments(const Json& args) { return args.dump(-1, ' ', false, Json::error_handler_t::replace); }

constexpr std::string_view kCallOpen = "<|tool_call>";
constexpr std::string_view kCallClose = "<tool_call|>";
constexpr std::string_view kQuote = "<|\"|>";

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Arguments text as JSON: "" is {}; text that is not JSON becomes a string.
Json ArgumentsJson(const std::string& text) {
  if (Trim(text).empty()) return Json::object();
  try {
    return Json::parse(text);
  } catch (const Json::exception&) {
    return Json(text);
  }
}

// The length of the longest suffix of `text` that is a proper prefix of `marker`.
std::size_t PartialMarker(std::string_view text, std::string_view marker) {
  for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// A recursive-descent reader of Gemma's value notation.
class GemmaValueReader {
 public:
  explicit GemmaValueReader(std::string_view s) : s_(s) {}

  bool Value(Json& out) {
    if (s_.substr(pos_, kQuote.size()) == kQuote) {
      pos_ += kQuote.size();
      const std::size_t end = s_.find(kQuote, pos_);
      if (end == std::string_view::npos) return false;
      out = std::string(s_.substr(pos_, end - pos_));
      pos_ = end + kQuote.size();
      return true;
    }
    if (pos_ >= s_.size()) return false;
    if (s_[pos_] == '{') return Object(out);
    if (s_[pos_] == '[') {
      ++pos_;
      out = Json::array();
      if (Peek(']')) return ++pos_, true;
      for (;;) {
        Json v;
        if (!Value(v)) return false;
        out.push_back(std::move(v));
        if (Peek(',')) {
          ++pos_;
        } else if (Peek(']')) {
          return ++pos_, true;
        } else {
          return false;
        }
      }
    }
    // A scalar: up to the next delimiter, read as JSON (number, true, false, null).
    const std::size_t end = s_.find_first_of(",}]", pos_);
    const std::string_view word = Trim(s_.substr(pos_, end == std::string_view::npos ? end : end - pos_));
    if (word.empty()) return false;
    try {
      out = Json::parse(word);
    } catch (const Json::exception&) {
      return false;
    }
    if (!out.is_primitive() || out.is_string()) return false;
    pos_ = end == std::string_view::npos ? s_.size() : end;
    return true;
  }

  // {key:value,...} with bare keys.
  bool Object(Json& out) {
    if (!Peek('{')) return false;
    ++pos_;
    out = Json::object();
    if (Peek('}')) return ++pos_, true;
    for (;;) {
      const std::size_t colon = s_.find(':', pos_);
      if (colon == std::string_view::npos) return false;
      std::string_view key = Trim(s_.substr(pos_, colon - pos_));
      if (key.size() >= 2 * kQuote.size() && key.substr(0, kQuote.size()) == kQuote &&
          key.substr(key.size() - kQuote.size()) == kQuote) {
        key = key.substr(kQuote.size(), key.size() - 2 * kQuote.size());
      }
      if (key.empty() || key.find_first_of("{}[],") != std::string_view::npos) return false;
      pos_ = colon + 1;
      Json v;
      if (!Value(v)) return false;
      out[std::string(key)] = std::move(v);
      if (Peek(',')) {
        ++pos_;
      } else if (Peek('}')) {
        return ++pos_, true;
      } else {
        return false;
      }
    }
  }

  bool AtEnd() const { return pos_ == s_.size(); }

 private:
  bool Peek(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  std::string_view s_;
  std::size_t pos_ = 0;
};

// One {"name", "arguments"} entry as a call; false when it is not one.
bool JsonCallEntry(const Json& e, ToolCall& out) {
  if (!e.is_object()) return false;
  auto name = e.find("name");
  if (name == e.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  for (const auto& [k, v] : e.items()) {
    if (k != "name" && k != "arguments") return false;
  }
  Json args = Json::object();
  if (auto a = e.find("arguments"); a != e.end()) {
    args = *a;
    // Arguments written as a JSON string of an object are taken as that object.
    if (args.is_string()) {
      try {
        args = Json::parse(args.get<std::string>());
      } catch (const Json::exception&) {
        return false;
      }
    }
    if (!args.is_object()) return false;
  }
  out.id.clear();
  out.name = name->get<std::string>();
  out.arguments = DumpArguments(args);
  return true;
}

}  // namespace

std::string ToolCallInstructions(std::span<const ToolFunction> tools, bool parallel) {
  std::string text =
      "You can call these tools (functions). Each line is one tool: its name, what it does, and the JSON Schema of "
      "its arguments.\n";
  for (const ToolFunction& t : tools) {
    Json j = {{"name", t.name}};
    if (!t.description.empty()) j["description"] = t.description;
    if (!t.parameters.empty()) {
      try {
        j["parameters"] = Json::parse(t.parameters);
      } catch (const Json::exception& e) {
        throw Error("tool \"" + t.name + "\": parameters are not valid JSON: " + e.what());
      }
    }
    text += j.dump() + "\n";
  }
  text +=
      "\nTo call a tool, reply with only this JSON object and nothing else:\n"
      "{\"tool_call\": {\"name\": \"<tool name>\", \"arguments\": {<the arguments>}}}\n";
  if (parallel) {
    text +=
        "To call several tools at once, reply with only:\n"
        "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<the arguments>}}, ...]}\n";
  }
  text +=
      "The results come back as {\"tool_response\": {\"name\": ..., \"content\": ...}}. When no tool is needed, "
      "reply normally.";
  return text;
}

std::string JsonToolCallText(std::span<const ToolCall> calls) {
  auto entry = [](const ToolCall& c) { return Json{{"name", c.name}, {"arguments", ArgumentsJson(c.arguments)}}; };
  if (calls.size() == 1) return Json{{"tool_call", entry(calls[0])}}.dump();
  Json list = Json::array();
  for (const ToolCall& c : calls) list.push_back(entry(c));
  return Json{{"tool_calls", list}}.dump();
}

bool ParseGemma4Call(std::string_view body, ToolCall& out) {
  body = Trim(body);
  if (body.substr(0, 5) != "call:") return false;
  body.remove_prefix(5);
  const std::size_t brace = body.find('{');
  if (brace == std::string_view::npos) return false;
  const std::string_view name = Trim(body.substr(0, brace));
  if (name.empty() || name.find_first_of(" \t\n:,{}[]") != std::string_view::npos) return false;
  GemmaValueReader reader(body.substr(brace));
  Json args;
  if (!reader.Object(args) || !reader.AtEnd()) return false;
  out.id.clear();
  out.name.clear();
  runtime::AppendWellFormedUtf8(name, true, &out.name);
  out.arguments = DumpArguments(args);
  return true;
}

ToolCallParser::ToolCallParser(ToolCallParserOptions options) : options_(std::move(options)) {}

bool ToolCallParser::KnownName(const std::string& name) const {
  return options_.names.empty() || std::find(options_.names.begin(), options_.names.end(), name) != options_.names.end();
}

void ToolCallParser::EmitContent(std::string_view text, ToolCallDelta& out) {
  // Trailing whitespace waits: it is dropped if a call or the end follows.
  std::size_t body = text.size();
  while (body > 0 && IsSpace(text[body - 1])) --body;
  if (body > 0) {
    out.content += space_;
    out.content += text.substr(0, body);
    space_.clear();
  }
  space_ += text.substr(body);
}

void ToolCallParser::ParseJsonHeld(ToolCallDelta& out) {
  std::vector<ToolCall> calls;
  bool ok = false;
  try {
    const Json j = Json::parse(Trim(held_));
    if (j.is_object() && j.size() == 1) {
      if (auto one = j.find("tool_call"); one != j.end()) {
        ToolCall c;
        ok = JsonCallEntry(*one, c);
        if (ok) calls.push_back(std::move(c));
      } else if (auto many = j.find("tool_calls"); many != j.end() && many->is_array() && !many->empty()) {
        ok = true;
        for (const Json& e : *many) {
          ToolCall c;
          if (!JsonCallEntry(e, c)) {
            ok = false;
            break;
          }
          calls.push_back(std::move(c));
        }
      }
    }
  } catch (const Json::exception&) {
    ok = false;
  }
  for (const ToolCall& c : calls) ok = ok && KnownName(c.name);
  if (ok) {
    space_.clear();
    for (ToolCall& c : calls) out.calls.push_back(std::move(c));
  } else {
    EmitContent(held_, out);
  }
  held_.clear();
}

ToolCallDelta ToolCallParser::Feed(std::string_view text) {
  ToolCallDelta out;
  if (options_.syntax == ToolCallSyntax::kJson) {
    if (json_started_) {
      held_ += text;
      return out;
    }
    const std::size_t brace = text.find('{');
    if (brace == std::string_view::npos) {
      EmitContent(text, out);
    } else {
      EmitContent(text.substr(0, brace), out);
      json_started_ = true;
      held_ = std::string(text.substr(brace));
    }
    return out;
  }
  held_ += text;
  for (;;) {
    if (!in_call_) {
      const std::size_t open = held_.find(kCallOpen);
      if (open == std::string::npos) {
        const std::size_t keep = PartialMarker(held_, kCallOpen);
        EmitContent(std::string_view(held_).substr(0, held_.size() - keep), out);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      EmitContent(std::string_view(held_).substr(0, open), out);
      held_.erase(0, open + kCallOpen.size());
      in_call_ = true;
    }
    const std::size_t close = held_.find(kCallClose);
    if (close == std::string::npos) return out;
    ToolCall c;
    const std::string_view body = std::string_view(held_).substr(0, close);
    if (ParseGemma4Call(body, c) && KnownName(c.name)) {
      space_.clear();
      out.calls.push_back(std::move(c));
    } else {
      EmitContent(std::string(kCallOpen) + std::string(body) + std::string(kCallClose), out);
    }
    held_.erase(0, close + kCallClose.size());
    in_call_ = false;
  }
}

ToolCallDelta ToolCallParser::Finish() {
  ToolCallDelta out;
  if (options_.syntax == ToolCallSyntax::kJson) {
    if (json_started_) ParseJsonHeld(out);
  } else {
    // An unclosed call, or a partial opener: text.
    EmitContent((in_call_ ? std::string(kCallOpen) : std::string()) + held_, out);
    held_.clear();
    in_call_ = false;
  }
  space_.clear();
  return out;
}

}  // namespace kvshare
