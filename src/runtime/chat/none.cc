// The "none" chat format: plain completion. The message contents as they
// are, no markup, no marker tokens; tools are not written (a request that
// offers them anyway is read and constrained in the JSON convention).
#include "runtime/chat/family.h"

namespace kvshare::chat {
namespace {

std::string_view AsIs(std::string_view s) { return s; }

void Render(std::span<const ChatMessage> messages, const ChatTemplateOptions&, Segments& out) {
  for (const ChatMessage& m : messages) Content(out, NoneFamily(), m, AsIs);
}

}  // namespace

const Family& NoneFamily() {
  // No template marker, marker tokens or tool stop token.
  static const Family f{.format = ChatFormat::kNone, .tool_syntax = ToolCallSyntax::kJson, .render = Render};
  return f;
}

}  // namespace kvshare::chat
