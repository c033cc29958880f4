// The lazy grammar of tool calls under tool_choice "auto"
// (kvshare/runtime/tool_calls.h LazyToolCallGrammar): the model may answer in text,
// but a call it opens is held to the offered names and the strict tools'
// parameter schemas, in the syntax ToolCallParser reads.
#include <string>

#include <nlohmann/json.hpp>

#include "kvshare/common/error.h"
#include "kvshare/runtime/tool_calls.h"
#include "grammar/grammar_ir.h"
#include "grammar/json_grammar.h"

namespace kvshare {
namespace {

using Json = nlohmann::ordered_json;
using detail::GrammarBuilder;
using detail::operator+;

// A tool with no parameters takes no arguments: {} only.
constexpr std::string_view kNoArguments = R"({"type": "object", "additionalProperties": false})";

std::string_view Parameters(const ToolFunction& f) {
  return f.parameters.empty() ? kNoArguments : std::string_view(f.parameters);
}

[[noreturn]] void FailTool(const LazyTool& t, const Error& e) {
  throw Error("tool \"" + t.function.name + "\": its parameters cannot be enforced: " + e.what());
}

Json Closed(Json properties) {
  Json required = Json::array();
  for (const auto& [k, v] : properties.items()) required.push_back(k);
  return Json{{"type", "object"}, {"properties", std::move(properties)}, {"required", required}, {"additionalProperties", false}};
}

// The JSON convention: {"tool_call": CALL}, or {"tool_calls": [CALL, ...]}.
std::shared_ptr<const Grammar> JsonBody(std::span<const LazyTool> tools, bool parallel) {
  Json branches = Json::array();
  for (const LazyTool& t : tools) {
    Json args = Json{{"type", "object"}};
    if (t.strict || t.function.parameters.empty()) {
      try {
        CompileJsonSchema(Parameters(t.function));  // names the tool when it fails
        args = Json::parse(Parameters(t.function));
      } catch (const Error& e) {
        FailTool(t, e);
      }
    }
    branches.push_back(Closed(Json{{"name", {{"const", t.function.name}}}, {"arguments", args}}));
  }
  const Json call = branches.size() == 1 ? branches[0] : Json{{"anyOf", branches}};
  Json top = Closed(Json{{"tool_call", call}});
  if (parallel) {
    top = Json{{"anyOf", {top, Closed(Json{{"tool_calls", {{"type", "array"}, {"items", call}, {"minItems", 1}}}})}}};
  }
  return CompileJsonSchema(top.dump());
}

// '{', the gap's whitespace, then "tool_call: the start both forms share.
std::shared_ptr<const Grammar> JsonTrigger() {
  detail::JsonGrammar j({});
  GrammarBuilder& b = j.builder();
  const std::uint32_t r = b.NewRule();
  b.Alt(r, GrammarBuilder::Seq{b.Byte('{')} + j.Ws() + b.Lit("\"tool_call"));
  return std::make_shared<const Grammar>(b.Finish(r));
}

// Gemma 4: <|tool_call>call:NAME{...}<tool_call|>.
std::shared_ptr<const Grammar> Gemma4Body(std::span<const LazyTool> tools) {
  detail::JsonGrammar j({}, detail::Notation::kGemma);
  GrammarBuilder& b = j.builder();
  const std::uint32_t calls = b.NewRule();
  for (const LazyTool& t : tools) {
    std::uint32_t args = 0;
    if (t.strict || t.function.parameters.empty()) {
      try {
        args = detail::CompileSchemaRule(j, Parameters(t.function));
      } catch (const Error& e) {
        FailTool(t, e);
      }
    } else {
      args = j.Map(j.AnyValue());
    }
    b.Alt(calls, b.Lit(t.function.name) + GrammarBuilder::Seq{GrammarBuilder::Ref(args)});
  }
  const std::uint32_t root = b.NewRule();
  b.Alt(root, b.Lit("<|tool_call>call:") + GrammarBuilder::Seq{GrammarBuilder::Ref(calls)} + b.Lit("<tool_call|>"));
  return std::make_shared<const Grammar>(b.Finish(root));
}

}  // namespace

std::shared_ptr<const Grammar> LazyToolCallGrammar(std::span<const LazyTool> tools, ToolCallSyntax syntax, bool parallel,
                                                   std::vector<std::pair<std::int32_t, std::string>> marker_tokens) {
  if (tools.empty()) throw Error("LazyToolCallGrammar: no tools");
  LazyGrammarOptions o;
  if (syntax == ToolCallSyntax::kGemma4) {
    o.trigger = LiteralGrammar("<|tool_call>");
    o.token_text = std::move(marker_tokens);
    o.repeat = parallel;  // after a call, another, or the end
    return LazyGrammar(Gemma4Body(tools), std::move(o));
  }
  o.trigger = JsonTrigger();
  return LazyGrammar(JsonBody(tools, parallel), std::move(o));
}

}  // namespace kvshare
