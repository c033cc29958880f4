// kvshare/runtime/chat_message.h — the conversation a chat format writes: its
// messages, the function calls an assistant made and the functions offered
// to the model (OpenAI's shapes). How they are written: kvshare/runtime/chat_template.h;
// how calls are read back from output: kvshare/runtime/tool_calls.h.
#pragma once

#include <cstddef>
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
  // Where this message's images sit in `content` (OpenAI content parts in
  // order): byte offsets, non-decreasing, each <= content.size(). The text
  // between them is written as separate parts (each trimmed where the
  // format trims a message). Images are numbered across the conversation in
  // message order (ChatTemplate::Encode's image_slots).
  std::vector<std::size_t> image_at;
  // Where its audio clips sit, the same way (ChatTemplate::Encode's
  // audio_slots); at an offset that also holds images, the images come first.
  std::vector<std::size_t> audio_at;

  bool has_media() const { return !image_at.empty() || !audio_at.empty(); }
};

}  // namespace kvshare
