// libFuzzer target for the OpenAI request body parser (server/openai_request.h):
// any body must either parse or be refused the way the server refuses it
// (invalid JSON or ApiError 4xx with a serializable error body). Anything
// else escaping (nlohmann type errors, std::out_of_range, ...) would be a 500
// in the server, so it aborts here. The first byte picks the endpoint and
// the strictness; the rest is the body.
//   build-fuzz/tests/fuzz/request_fuzz -max_total_time=30 corpus-request tests/fuzz/seeds/request
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api_error.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/tool_calls.h"
#include "openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) != 0;
  const kvshare::server::RequestParsing options{.strict = (data[0] & 2) != 0};
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(body);       // server.cc ParseBody: any json::exception is a 400
  } catch (const nlohmann::json::exception&) {  // parse_error, out_of_range ("1e400")
    return 0;
  }
  try {
    kvshare::server::CompletionRequest req = kvshare::server::ParseCompletionRequest(parsed, chat, options);
    kvshare::server::KeepSchemaKeyOrder(req, body);
    if (req.chat != chat || (chat && req.messages.empty()) || (!chat && req.prompts.empty())) {
      std::abort();  // a request the parser accepted without what its endpoint needs
    }
    if (!req.response_format.schema.empty()) {
      try {
        (void)kvshare::CompileJsonSchema(req.response_format.schema);
      } catch (const kvshare::Error&) {  // BuildRequest: 400 invalid_schema
      }
    }
    // ChatTemplate::ToolCallGrammar's grammars (BuildRequest): the lazy one
    // under tool_choice "auto" in both syntaxes, the forced call's schema.
    for (kvshare::ToolCallSyntax syntax : {kvshare::ToolCallSyntax::kJson, kvshare::ToolCallSyntax::kGemma4}) {
      if (req.tools.empty()) break;
      try {
        (void)kvshare::LazyToolCallGrammar(req.tools, syntax, req.parallel_tool_calls);
      } catch (const kvshare::Error&) {  // BuildRequest: 400 invalid_schema
      }
    }
    if (const std::optional<kvshare::ToolOffer> offer = kvshare::server::OfferedTools(req); offer && offer->forced()) {
      try {
        (void)kvshare::CompileJsonSchema(kvshare::ForcedToolCallSchema(*offer));
      } catch (const kvshare::Error&) {  // BuildRequest: 400 invalid_schema
      }
    }
    for (kvshare::ChatFormat f :
         {kvshare::ChatFormat::kNone, kvshare::ChatFormat::kGemma, kvshare::ChatFormat::kGemma4}) {
      try {
        (void)kvshare::FormatChat(f, req.messages);
      } catch (const kvshare::Error&) {
      }
    }
  } catch (const kvshare::server::ApiError& e) {
    if (e.status() < 400 || e.status() >= 500) std::abort();
    (void)kvshare::server::Dump(e.ToJson());
  }
  return 0;
}
