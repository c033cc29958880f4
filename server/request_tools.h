// The chat endpoint's tools, tool_choice and whether a request offers its
// tools (OpenAI's shapes; what a chat format makes of them is
// kvshare/runtime/chat_template.h's).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/runtime/tool_calls.h"
#include "openai_request.h"

namespace kvshare::server {

// body["tools"]: function tools with valid, unique names; a strict tool's
// parameters must compile as a grammar (400 invalid_schema otherwise).
std::vector<OfferedTool> ParseTools(const nlohmann::json& body, const RequestParsing& o,
                                    std::vector<std::string>& ignored);
// body["tool_choice"] against the parsed `tools` ("required" needs one, a
// named function must be one of them).
CompletionRequest::ToolChoice ParseToolChoice(const nlohmann::json& body, const std::vector<OfferedTool>& tools);

}  // namespace kvshare::server
