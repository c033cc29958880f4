// The chat endpoint's messages (OpenAI's shapes: roles system / developer /
// user / assistant / tool, content a string or text parts, an assistant's
// tool_calls, a tool message's tool_call_id, image_url parts) read into
// ChatMessage.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/runtime/chat_message.h"
#include "openai_request.h"

namespace kvshare::server {

// body["messages"]: a non-empty array; "developer" becomes "system". Throws
// ApiError 400 naming the message and field; unknown fields of a message go
// through Unknown (request_fields.h). image_url parts go to `images` in
// order (request_images.h), each marked in its message's image_at;
// input_audio parts likewise to `audio` and audio_at (request_audio.h).
std::vector<ChatMessage> ParseMessages(const nlohmann::json& body, const RequestParsing& o,
                                       std::vector<RequestImage>& images, std::vector<RequestAudio>& audio,
                                       std::vector<std::string>& ignored);

}  // namespace kvshare::server
