// kvshare/grammar/tool_call_grammar.h — lazy grammars of function calls in model
// output (grammar layer, src/grammar/tool_call_grammar.cc): free text until a
// call opens, then a call to one of the given functions whose arguments are
// held to their schema. This is the machinery in grammar terms (functions,
// marker texts, a value notation, a JSON Schema); which syntax a chat format
// uses for its calls, and when a call is grammar-bound at all, is decided in
// the runtime layer (kvshare/runtime/tool_calls.h, kvshare/runtime/chat_template.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvshare/grammar/grammar.h"

namespace kvshare {

// A function a call may name, as a grammar sees it.
struct CallableFunction {
  std::string name;        // written as it is
  std::string parameters;  // JSON Schema of the arguments (JSON text); empty: none, so {} only
  // True: the arguments are held to `parameters`. False: any object, except
  // that a function without parameters still takes {} only.
  bool enforce = false;
};

// The JSON Schema (JSON text) that `f`'s arguments are held to: `parameters`
// when enforced, {"type": "object", "additionalProperties": false} when there
// are none, else {"type": "object"} (any object). Throws kvshare::Error
// "tool \"NAME\": its parameters cannot be enforced: WHY" when they are
// enforced (or absent) and do not compile (CompileJsonSchema's reasons).
std::string CallArgumentsSchema(const CallableFunction& f);

// How the values of a marked call's arguments are written.
enum class CallNotation {
  kJson,   // JSON, compact
  kGemma,  // Gemma 4's: strings <|"|>raw text<|"|> (no '<' inside, so the
           // closing quote cannot be forged), keys bare, no whitespace;
           // numbers, true, false, null and arrays as in JSON
};

// Calls written between marker texts: OPEN NAME ARGUMENTS CLOSE, the
// arguments one object in `notation`.
struct MarkedCallSyntax {
  std::string trigger;  // the text that opens a call in free text (non-empty; a prefix of `open`)
  std::string open;     // the call's text before the name, e.g. "<|tool_call>call:"
  std::string close;    // after the arguments, e.g. "<tool_call|>"
  CallNotation notation = CallNotation::kJson;
};

struct MarkedCallOptions {
  // After a call: true, free text again (another call, or the end); false,
  // only the end.
  bool repeat = false;
  // Control tokens the output may hold, with the text they stand for (the
  // markers, when the vocabulary has them as such): LazyGrammarOptions::token_text.
  std::vector<std::pair<std::int32_t, std::string>> token_text;
};

// The lazy grammar (LazyGrammar) of calls in `syntax` to one of `functions`:
// free text until `syntax.trigger`, then OPEN, one of the names, arguments as
// CallArgumentsSchema holds them (any object in the notation when not
// enforced), CLOSE. Throws kvshare::Error for no functions, as
// CallArgumentsSchema does, and for a property name the notation cannot
// write (kGemma: one with ':'), naming the function.
std::shared_ptr<const Grammar> MarkedCallGrammar(std::span<const CallableFunction> functions,
                                                 const MarkedCallSyntax& syntax, MarkedCallOptions options = {});

// The lazy grammar of a call written as one JSON object: free text until '{',
// up to 8 whitespace bytes (JsonGrammarOptions{}.max_whitespace) and
// `key_start` (the start of the object's first key, its opening quote
// included, e.g. "\"tool_call"); from that '{' on, one document of `schema`
// (JSON Schema text, compiled by CompileJsonSchema, whose errors it throws);
// after it only the end.
std::shared_ptr<const Grammar> JsonObjectCallGrammar(std::string_view schema, std::string_view key_start);

}  // namespace kvshare
