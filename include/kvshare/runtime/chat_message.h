// kvshare/runtime/chat_message.h — the conversation a chat format writes: its
// messages, the function calls an assistant made and the functions offered
// to the model (OpenAI's shapes). How they are written: kvshare/runtime/chat_template.h;
// how calls are read back from output: kvshare/runtime/tool_calls.h.
#pragma once

#include <string>
#include <vector>

namespace kvshare {

// One function call of an assistant message (OpenAI's tool_calls[i]).
struct ToolCall {
  std::string id;  // "call_..." (may be empty)
  std::string name;
  std::string arguments;  // JSON text, normally an object ("" means {})
};

// A function the model may call (OpenAI's tools[i].function).
struct ToolFunction {
  std::string name;
  std::string description;
  std::string parameters;  // JSON Schema of the arguments as JSON text; empty: none
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "model" or "tool"
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant: the calls it made
  std::string tool_call_id;          // tool: the call this message answers
  std::string name;                  // tool: the function's name, when known
};

}  // namespace kvshare
