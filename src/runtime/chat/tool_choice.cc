// What a request's tool offer gets in a chat format
// (include/kvshare/runtime/chat_template.h ToolCallParsing,
// ChatTemplate::ToolCallGrammar; tool_calls.h LazyToolCallGrammar): forced
// calls are JSON (a grammar cannot emit the control tokens of a format's own
// markers), free calls use the family's syntax (family.h).
#include <string>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/grammar/tool_call_grammar.h"
#include "kvshare/runtime/chat_template.h"
#include "runtime/chat/family.h"
#include "runtime/chat/gemma4.h"
#include "runtime/chat/json_calls.h"

namespace kvshare {

ToolCallParserOptions ToolCallParsing(ChatFormat format, const ToolOffer& offer) {
  ToolCallParserOptions p;
  p.syntax = offer.forced() ? ToolCallSyntax::kJson : chat::FamilyOf(format).tool_syntax;
  for (const OfferedTool& t : offer.tools) {
    if (offer.choice != ToolOffer::Choice::kFunction || t.function.name == offer.function) {
      p.names.push_back(t.function.name);
    }
  }
  return p;
}

std::shared_ptr<const Grammar> LazyToolCallGrammar(std::span<const OfferedTool> tools, ToolCallSyntax syntax,
                                                   bool parallel,
                                                   std::vector<std::pair<std::int32_t, std::string>> marker_tokens) {
  if (tools.empty()) throw Error("LazyToolCallGrammar: no tools");
  std::vector<CallableFunction> functions;
  for (const OfferedTool& t : tools) functions.push_back({t.function.name, t.function.parameters, t.strict});
  if (syntax == ToolCallSyntax::kGemma4)
    return chat::gemma4::CallGrammar(functions, parallel, std::move(marker_tokens));
  return chat::JsonCallGrammar(functions, parallel);
}

std::shared_ptr<const Grammar> ChatTemplate::ToolCallGrammar(const ToolOffer& offer) const {
  if (offer.forced()) return CompileJsonSchema(ForcedToolCallSchema(offer));
  bool strict = false;
  for (const OfferedTool& t : offer.tools) strict = strict || t.strict;
  if (!strict) return nullptr;  // free text, calls parsed as they come
  return LazyToolCallGrammar(offer.tools, ToolCallParsing(format_, offer).syntax, offer.parallel, tool_call_markers_);
}

}  // namespace kvshare
