// Test helper: the prompt text kvshare serve writes for a chat request.
//   chat_format_dump FORMAT < BODY.json  -> FormatChat's text, "<bos>" first
// BODY is a /v1/chat/completions body (messages, tools, tool_choice,
// parallel_tool_calls), parsed by the server's own request parser, so the
// text is what the server encodes (tools left out for tool_choice "none").
// FORMAT: gemma, gemma4. A body the server refuses exits 1 with its message.
#include <cstdio>
#include <exception>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "kvshare/runtime/chat_template.h"
#include "openai_request.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: chat_format_dump gemma|gemma4 < body.json\n");
    return 2;
  }
  try {
    const std::string body((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const auto req = kvshare::server::ParseCompletionRequest(nlohmann::json::parse(body), /*chat=*/true);
    kvshare::ChatTemplateOptions o;
    o.bos_text = true;
    if (kvshare::server::OffersTools(req)) {
      for (const auto& t : req.tools) o.tools.push_back(t.function);
      o.parallel_tool_calls = req.parallel_tool_calls;
    }
    std::cout << kvshare::FormatChat(kvshare::ChatFormatFromName(argv[1]), req.messages, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
