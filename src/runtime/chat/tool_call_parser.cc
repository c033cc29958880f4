// The streaming parser of calls in model output (include/kvshare/runtime/tool_calls.h
// ToolCallParser): text before a call is released as it comes, a call is
// held until it is complete and then read in its syntax (the JSON
// convention, json_calls.cc; Gemma 4's markers, gemma4_calls.cc).
#include <algorithm>
#include <string>

#include "kvshare/runtime/tool_calls.h"
#include "runtime/chat/gemma4.h"
#include "runtime/chat/json_calls.h"

namespace kvshare {
namespace {

namespace gemma4 = chat::gemma4;

// The length of the longest suffix of `text` that is a proper prefix of `marker`.
std::size_t PartialMarker(std::string_view text, std::string_view marker) {
  for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

ToolCallParser::ToolCallParser(ToolCallParserOptions options) : options_(std::move(options)) {}

bool ToolCallParser::KnownName(const std::string& name) const {
  return options_.names.empty() ||
         std::find(options_.names.begin(), options_.names.end(), name) != options_.names.end();
}

void ToolCallParser::EmitContent(std::string_view text, ToolCallDelta& out) {
  // Trailing whitespace waits: it is dropped if a call or the end follows.
  std::size_t body = text.size();
  while (body > 0 && chat::IsCallSpace(text[body - 1])) --body;
  if (body > 0) {
    out.content += space_;
    out.content += text.substr(0, body);
    space_.clear();
  }
  space_ += text.substr(body);
}

void ToolCallParser::ParseJsonHeld(ToolCallDelta& out) {
  std::vector<ToolCall> calls;
  bool ok = chat::ReadJsonToolCalls(held_, calls);
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
      const std::size_t open = held_.find(gemma4::kCallOpen);
      if (open == std::string::npos) {
        const std::size_t keep = PartialMarker(held_, gemma4::kCallOpen);
        EmitContent(std::string_view(held_).substr(0, held_.size() - keep), out);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      EmitContent(std::string_view(held_).substr(0, open), out);
      held_.erase(0, open + gemma4::kCallOpen.size());
      in_call_ = true;
    }
    const std::size_t close = held_.find(gemma4::kCallClose);
    if (close == std::string::npos) return out;
    ToolCall c;
    const std::string_view body = std::string_view(held_).substr(0, close);
    if (ParseGemma4Call(body, c) && KnownName(c.name)) {
      space_.clear();
      out.calls.push_back(std::move(c));
    } else {
      EmitContent(std::string(gemma4::kCallOpen) + std::string(body) + std::string(gemma4::kCallClose), out);
    }
    held_.erase(0, close + gemma4::kCallClose.size());
    in_call_ = false;
  }
}

ToolCallDelta ToolCallParser::Finish() {
  ToolCallDelta out;
  if (options_.syntax == ToolCallSyntax::kJson) {
    if (json_started_) ParseJsonHeld(out);
  } else {
    // A partial opener is text; an unclosed call (the reply was cut) is
    // dropped, never shown as markup.
    if (!in_call_) EmitContent(held_, out);
    held_.clear();
    in_call_ = false;
  }
  space_.clear();
  return out;
}

}  // namespace kvshare
