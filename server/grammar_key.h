// The keys under which the server keeps compiled grammars
// (kvshare/grammar/grammar_cache.h): each names exactly the inputs of one
// compile path, serialized as a JSON array, so that two requests share a
// grammar only when the compile would give the same one. The schema texts
// are the server's own serialization of the parsed body (nlohmann's dump:
// no whitespace, escapes normalized, the order of the keys kept where the
// compiler reads it: openai_request.h KeepSchemaKeyOrder), so the same
// schema sent with other spacing shares an entry.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kvshare/grammar/grammar.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/tool_calls.h"
#include "kvshare/tokenizer/tokenizer.h"

namespace kvshare::server {

// What a chat format's tool-call grammars take from the served model: the
// format (its call syntax, marker texts and the wrapping of calls) and a
// fingerprint of the vocabulary (the markers' token ids come from it: every
// token's bytes and type). Computed once when the model loads.
std::string ToolGrammarIdentity(ChatFormat format, const Tokenizer& tokenizer);

// CompileJsonSchema(schema, options): the schema text and the options.
std::string SchemaGrammarKey(std::string_view schema, const JsonGrammarOptions& options);

// BuildRequest's response_format grammar: the schema (empty: json_object
// without one, AnyJsonObjectGrammar), the options, and with tools offered
// freely (tool_choice "auto") the tools that ForcedToolCallSchema writes
// into its anyOf (names, parameters, strict). Descriptions are not inputs.
std::string ResponseFormatGrammarKey(std::string_view schema, const JsonGrammarOptions& options,
                                     const std::optional<ToolOffer>& free_tools);

// ChatTemplate::ToolCallGrammar(offer): tool_choice (and its function), the
// tools' names, parameters and strict flags; for tool_choice "auto" also
// parallel_tool_calls and `identity` (ToolGrammarIdentity: the format's
// syntax and markers). A forced call is the JSON convention's schema, which
// neither parallel nor the vocabulary changes.
std::string ToolCallGrammarKey(const ToolOffer& offer, const std::string& identity);

}  // namespace kvshare::server
