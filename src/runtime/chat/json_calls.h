// The JSON convention of tool calls (internal to src/runtime/chat/; the
// convention is described in include/kvshare/runtime/tool_calls.h):
// reading a reply written in it, its lazy grammar, and the text helpers the
// call readers share.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/grammar/tool_call_grammar.h"
#include "kvshare/runtime/chat_message.h"

namespace kvshare::chat {

using OrderedJson = nlohmann::ordered_json;

// The whitespace around calls and their parts: ' ', '\t', '\n', '\r' (JSON's).
bool IsCallSpace(char c);
std::string_view TrimCallSpace(std::string_view s);

// Arguments as compact JSON; bytes that are not UTF-8 (model output can hold
// them) become U+FFFD instead of making dump() throw.
std::string DumpArguments(const OrderedJson& args);

// `text` (trimmed) as {"tool_call": CALL} or {"tool_calls": [CALL, ...]}
// (CALL: {"name", "arguments"}, arguments an object or the JSON text of
// one), its calls appended to `calls` with compact arguments and no id;
// false when it is neither (`calls` may then hold some of them).
bool ReadJsonToolCalls(std::string_view text, std::vector<ToolCall>& calls);

// LazyToolCallGrammar for ToolCallSyntax::kJson (see tool_calls.h).
std::shared_ptr<const Grammar> JsonCallGrammar(std::span<const CallableFunction> functions, bool parallel);

}  // namespace kvshare::chat
