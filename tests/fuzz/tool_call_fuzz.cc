// libFuzzer target for the tool-call output parser (kvshare/runtime/tool_calls.h):
// the input is model output text. For each syntax (the JSON convention and
// Gemma 4's markers), with and without a list of known names, the parser
// must not crash, and feeding the text in two pieces split at a point the
// input chooses (its first byte) must give the same content and calls as
// feeding it whole (the parser's contract). Call arguments must be JSON
// objects.
//   build-fuzz/tests/fuzz/tool_call_fuzz -max_total_time=30 corpus-tool_call tests/fuzz/seeds/tool_call
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/runtime/tool_calls.h"

namespace {

struct Result {
  std::string content;
  std::vector<kvshare::ToolCall> calls;
};

void Append(Result& r, kvshare::ToolCallDelta d) {
  r.content += d.content;
  for (kvshare::ToolCall& c : d.calls) r.calls.push_back(std::move(c));
}

Result Run(const kvshare::ToolCallParserOptions& opt, std::string_view text, std::size_t split) {
  kvshare::ToolCallParser p(opt);
  Result r;
  Append(r, p.Feed(text.substr(0, split)));
  Append(r, p.Feed(text.substr(split)));
  Append(r, p.Finish());
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t split = data[0] % size;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (const kvshare::ToolCallSyntax syntax : {kvshare::ToolCallSyntax::kJson, kvshare::ToolCallSyntax::kGemma4}) {
    for (const bool named : {false, true}) {
      kvshare::ToolCallParserOptions opt{.syntax = syntax};
      if (named) opt.names = {"get_weather", "search"};
      const Result whole = Run(opt, text, text.size());
      const Result parts = Run(opt, text, split < text.size() ? split : text.size());
      if (whole.content != parts.content || whole.calls.size() != parts.calls.size()) std::abort();
      for (std::size_t i = 0; i < whole.calls.size(); ++i) {
        if (whole.calls[i].name != parts.calls[i].name || whole.calls[i].arguments != parts.calls[i].arguments) {
          std::abort();
        }
        const std::string& a = whole.calls[i].arguments;
        if (!a.empty() && !nlohmann::json::parse(a, nullptr, false).is_object()) std::abort();
      }
    }
  }
  return 0;
}
