// Gemma 4's tool-call syntax (internal to src/runtime/chat/; gemma4.cc writes
// it into prompts, gemma4_calls.cc reads it and constrains it, the streaming
// parser finds its markers).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvshare/grammar/tool_call_grammar.h"

namespace kvshare::chat::gemma4 {

// <|tool_call>call:NAME{key:value,...}<tool_call|>, strings in <|"|>…<|"|>.
constexpr std::string_view kCallOpen = "<|tool_call>";
constexpr std::string_view kCallClose = "<tool_call|>";
constexpr std::string_view kQuote = "<|\"|>";

// LazyToolCallGrammar for ToolCallSyntax::kGemma4 (see tool_calls.h).
std::shared_ptr<const Grammar> CallGrammar(std::span<const CallableFunction> functions, bool parallel,
                                           std::vector<std::pair<std::int32_t, std::string>> marker_tokens);

}  // namespace kvshare::chat::gemma4
