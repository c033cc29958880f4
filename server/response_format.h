// response_format (both endpoints): text, json_object (optionally with
// llama-server's "schema") or json_schema (OpenAI's and vLLM's shape), and
// the schema's key order taken again from the raw body.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "openai_request.h"

namespace kvshare::server {

// body["response_format"] (absent or null: text). Throws ApiError 400 for
// wrong types, a missing json_schema and an unknown type; unknown fields go
// through Unknown (request_fields.h).
CompletionRequest::ResponseFormat ParseResponseFormat(const nlohmann::json& body, const RequestParsing& o,
                                                      std::vector<std::string>& ignored);

}  // namespace kvshare::server
