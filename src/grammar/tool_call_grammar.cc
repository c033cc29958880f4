// Lazy grammars of function calls (include/kvshare/grammar/tool_call_grammar.h):
// marked calls built from the JSON grammar's pieces in a notation, and calls
// written as one JSON object compiled from their schema.
#include "kvshare/grammar/tool_call_grammar.h"

#include <string>

#include "grammar/grammar_ir.h"
#include "grammar/json_grammar.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace {

using detail::GrammarBuilder;
using detail::operator+;

// A function with no parameters takes no arguments: {} only.
constexpr std::string_view kNoArguments = R"({"type": "object", "additionalProperties": false})";

std::string_view Parameters(const CallableFunction& f) {
  return f.parameters.empty() ? kNoArguments : std::string_view(f.parameters);
}

[[noreturn]] void FailFunction(const CallableFunction& f, const Error& e) {
  throw Error("tool \"" + f.name + "\": its parameters cannot be enforced: " + e.what());
}

// OPEN (NAME ARGUMENTS | ...) CLOSE.
std::shared_ptr<const Grammar> MarkedBody(std::span<const CallableFunction> functions, const MarkedCallSyntax& syntax) {
  detail::JsonGrammar j({},
                        syntax.notation == CallNotation::kGemma ? detail::Notation::kGemma : detail::Notation::kJson);
  GrammarBuilder& b = j.builder();
  const std::uint32_t calls = b.NewRule();
  for (const CallableFunction& f : functions) {
    std::uint32_t args = 0;
    if (f.enforce || f.parameters.empty()) {
      try {
        args = detail::CompileSchemaRule(j, Parameters(f));
      } catch (const Error& e) {
        FailFunction(f, e);
      }
    } else {
      args = j.Map(j.AnyValue());
    }
    b.Alt(calls, b.Lit(f.name) + GrammarBuilder::Seq{GrammarBuilder::Ref(args)});
  }
  const std::uint32_t root = b.NewRule();
  b.Alt(root, b.Lit(syntax.open) + GrammarBuilder::Seq{GrammarBuilder::Ref(calls)} + b.Lit(syntax.close));
  return std::make_shared<const Grammar>(b.Finish(root));
}

// '{', the gap's whitespace, then key_start.
std::shared_ptr<const Grammar> JsonObjectTrigger(std::string_view key_start) {
  detail::JsonGrammar j({});
  GrammarBuilder& b = j.builder();
  const std::uint32_t r = b.NewRule();
  b.Alt(r, GrammarBuilder::Seq{b.Byte('{')} + j.Ws() + b.Lit(key_start));
  return std::make_shared<const Grammar>(b.Finish(r));
}

}  // namespace

std::string CallArgumentsSchema(const CallableFunction& f) {
  if (!f.enforce && !f.parameters.empty()) return R"({"type": "object"})";
  try {
    CompileJsonSchema(Parameters(f));  // names the function when it fails
  } catch (const Error& e) {
    FailFunction(f, e);
  }
  return std::string(Parameters(f));
}

std::shared_ptr<const Grammar> MarkedCallGrammar(std::span<const CallableFunction> functions,
                                                 const MarkedCallSyntax& syntax, MarkedCallOptions options) {
  if (functions.empty()) throw Error("MarkedCallGrammar: no functions");
  LazyGrammarOptions o;
  o.trigger = LiteralGrammar(syntax.trigger);
  o.token_text = std::move(options.token_text);
  o.repeat = options.repeat;
  return LazyGrammar(MarkedBody(functions, syntax), std::move(o));
}

std::shared_ptr<const Grammar> JsonObjectCallGrammar(std::string_view schema, std::string_view key_start) {
  LazyGrammarOptions o;
  o.trigger = JsonObjectTrigger(key_start);
  return LazyGrammar(CompileJsonSchema(schema), std::move(o));
}

}  // namespace kvshare
