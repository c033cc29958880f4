// Gemma 4's calls read back and constrained (gemma4.h; the syntax in
// include/kvshare/runtime/tool_calls.h): the body "call:NAME{...}" in Gemma's
// value notation as a call with JSON arguments, and the lazy grammar that
// holds a call written in it to the offered tools.
#include <string>

#include "common/utf8.h"
#include "kvshare/runtime/tool_calls.h"
#include "runtime/chat/gemma4.h"
#include "runtime/chat/json_calls.h"

namespace kvshare {
namespace chat {
namespace {

// A recursive-descent reader of Gemma's value notation.
class GemmaValueReader {
 public:
  explicit GemmaValueReader(std::string_view s) : s_(s) {}

  bool Value(OrderedJson& out) {
    if (s_.substr(pos_, gemma4::kQuote.size()) == gemma4::kQuote) {
      pos_ += gemma4::kQuote.size();
      const std::size_t end = s_.find(gemma4::kQuote, pos_);
      if (end == std::string_view::npos) return false;
      out = std::string(s_.substr(pos_, end - pos_));
      pos_ = end + gemma4::kQuote.size();
      return true;
    }
    if (pos_ >= s_.size()) return false;
    if (s_[pos_] == '{') return Object(out);
    if (s_[pos_] == '[') {
      ++pos_;
      out = OrderedJson::array();
      if (Peek(']')) return ++pos_, true;
      for (;;) {
        OrderedJson v;
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
    const std::string_view word = TrimCallSpace(s_.substr(pos_, end == std::string_view::npos ? end : end - pos_));
    if (word.empty()) return false;
    try {
      out = OrderedJson::parse(word);
    } catch (const OrderedJson::exception&) {
      return false;
    }
    if (!out.is_primitive() || out.is_string()) return false;
    pos_ = end == std::string_view::npos ? s_.size() : end;
    return true;
  }

  // {key:value,...} with bare keys.
  bool Object(OrderedJson& out) {
    if (!Peek('{')) return false;
    ++pos_;
    out = OrderedJson::object();
    if (Peek('}')) return ++pos_, true;
    for (;;) {
      const std::size_t colon = s_.find(':', pos_);
      if (colon == std::string_view::npos) return false;
      std::string_view key = TrimCallSpace(s_.substr(pos_, colon - pos_));
      if (key.size() >= 2 * gemma4::kQuote.size() && key.substr(0, gemma4::kQuote.size()) == gemma4::kQuote &&
          key.substr(key.size() - gemma4::kQuote.size()) == gemma4::kQuote) {
        key = key.substr(gemma4::kQuote.size(), key.size() - 2 * gemma4::kQuote.size());
      }
      if (key.empty() || key.find_first_of("{}[],") != std::string_view::npos) return false;
      pos_ = colon + 1;
      OrderedJson v;
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

}  // namespace

namespace gemma4 {

std::shared_ptr<const Grammar> CallGrammar(std::span<const CallableFunction> functions, bool parallel,
                                           std::vector<std::pair<std::int32_t, std::string>> marker_tokens) {
  const MarkedCallSyntax syntax{.trigger = std::string(kCallOpen),
                                .open = std::string(kCallOpen) + "call:",
                                .close = std::string(kCallClose),
                                .notation = CallNotation::kGemma};
  // After a call, another one or the end when several are allowed.
  return MarkedCallGrammar(functions, syntax, {.repeat = parallel, .token_text = std::move(marker_tokens)});
}

}  // namespace gemma4
}  // namespace chat

using chat::DumpArguments;
using chat::GemmaValueReader;
using chat::OrderedJson;
using chat::TrimCallSpace;

bool ParseGemma4Call(std::string_view body, ToolCall& out) {
  body = TrimCallSpace(body);
  if (body.substr(0, 5) != "call:") return false;
  body.remove_prefix(5);
  const std::size_t brace = body.find('{');
  if (brace == std::string_view::npos) return false;
  const std::string_view name = TrimCallSpace(body.substr(0, brace));
  if (name.empty() || name.find_first_of(" \t\n:,{}[]") != std::string_view::npos) return false;
  GemmaValueReader reader(body.substr(brace));
  OrderedJson args;
  if (!reader.Object(args) || !reader.AtEnd()) return false;
  out.id.clear();
  out.name.clear();
  runtime::AppendWellFormedUtf8(name, true, &out.name);
  out.arguments = DumpArguments(args);
  return true;
}

}  // namespace kvshare
