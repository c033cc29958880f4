// kvshare/runtime/tool_calls.h — function calls in model output: the JSON convention
// used where a model has no tool format of its own (Gemma 2 / 3), a
// streaming parser that splits a reply into text and calls, and the grammars
// that hold a call to the offered tools (runtime layer, src/runtime/chat/;
// the server's tools / tool_calls build on it, the prompt side and the choice
// per chat format are in kvshare/runtime/chat_template.h).
//
// JSON convention (ChatFormat::kGemma; also what a grammar forces for gemma4,
// whose call markers are special tokens that the grammar cannot emit): the
// system text gains ToolCallInstructions(tools), which lists each tool as
// {"name", "description", "parameters"} JSON on its own line and asks for a
// reply that is only
//   {"tool_call": {"name": "NAME", "arguments": {...}}}
// or, for several calls at once,
//   {"tool_calls": [{"name": "NAME", "arguments": {...}}, ...]}
// Tool results come back as user text {"tool_response": {"name", "content"}}.
//
// Gemma 4's own format (ToolCallSyntax::kGemma4):
//   <|tool_call>call:NAME{key:value,...}<tool_call|>
// values in Gemma's notation: strings <|"|>text<|"|>, numbers, true, false,
// null, [a,b], {key:value} (keys bare). The markers are special tokens; the
// caller writes the text of those that decode to none (CONTROL) into what it
// feeds (see ToolCallParser).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvshare/grammar/grammar.h"
#include "kvshare/runtime/chat_message.h"

namespace kvshare {

// The system-prompt section of the JSON convention for `tools` (see above).
// `parallel`: also describe the several-calls form. Throws kvshare::Error
// for a tool whose parameters are not valid JSON.
std::string ToolCallInstructions(std::span<const ToolFunction> tools, bool parallel = true);

// The model-turn text of `calls` in the JSON convention: {"tool_call": ...}
// for one, {"tool_calls": [...]} for several. Arguments that are not valid
// JSON are written as a JSON string.
std::string JsonToolCallText(std::span<const ToolCall> calls);

enum class ToolCallSyntax {
  kJson,    // the JSON convention: the reply's text from its first '{' on
  kGemma4,  // <|tool_call>call:NAME{...}<tool_call|>, anywhere in the reply
};

struct ToolCallParserOptions {
  ToolCallSyntax syntax = ToolCallSyntax::kJson;
  // The offered tools' names: a call of any other name is not a call (its
  // text stays text). Empty: any name.
  std::vector<std::string> names;
};

// What a piece of output turned into: text to show, and the calls completed
// in it (id empty: the caller names them).
struct ToolCallDelta {
  std::string content;
  std::vector<ToolCall> calls;
};

// Splits a reply into content and calls as its text arrives. Feeding the text
// in any split gives the same concatenated content and the same calls as
// feeding it whole. Rules:
//   kJson: text before the first '{' is content at once; from the first '{'
//     on, everything is held until Finish, then it is a call if it (trimmed)
//     is one of the two objects above with known names, else content.
//   kGemma4: text outside the markers is content (a partial "<|tool_call>"
//     at the end is held); a marked call whose body does not parse (or names
//     an unknown tool) stays content, markers included; a call still open at
//     Finish (the reply was cut, e.g. by max_tokens) is dropped: neither
//     content nor a call.
//   Both: whitespace-only content next to a call or at the end is dropped
//     (content is never just the spaces around calls).
// Arguments come back as compact JSON text of an object.
class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallParserOptions options);
  ToolCallDelta Feed(std::string_view text);
  // The end of the reply: what was held back.
  ToolCallDelta Finish();

 private:
  void EmitContent(std::string_view text, ToolCallDelta& out);
  bool KnownName(const std::string& name) const;
  void ParseJsonHeld(ToolCallDelta& out);

  ToolCallParserOptions options_;
  std::string held_;           // text not yet decided
  std::string space_;          // whitespace-only content waiting for more text
  bool in_call_ = false;       // kGemma4: inside <|tool_call>…
  bool json_started_ = false;  // kJson: a '{' has been seen
};

// Gemma 4's call body "call:NAME{...}" (between the markers) as a call with
// JSON arguments; false when it does not parse.
bool ParseGemma4Call(std::string_view body, ToolCall& out);

// A tool offered to the model (OpenAI's tools[i]): `strict` ones have their
// arguments held to their parameters by the grammars below, the others take
// any object (a tool without parameters takes {} only either way).
struct OfferedTool {
  ToolFunction function;
  bool strict = false;
};

// What a request offers: its tools (non-empty) and how the model must use
// them (OpenAI's tool_choice other than "none", and parallel_tool_calls).
struct ToolOffer {
  std::vector<OfferedTool> tools;
  enum class Choice {
    kAuto,      // the model may call any of them, or answer in text
    kRequired,  // it must call one of them
    kFunction,  // it must call `function`
  };
  Choice choice = Choice::kAuto;
  std::string function;  // kFunction: the name of one of `tools`
  bool parallel = true;  // several calls in one reply
  // kRequired and kFunction: the reply must be a call.
  bool forced() const { return choice != Choice::kAuto; }
};

// The JSON Schema (JSON text) that forces one call in the JSON convention:
// {"tool_call": {"name": <one of the offered names, or the kFunction one>,
// "arguments": <the tool's parameters; {} when it has none; any object when
// they do not compile as a grammar and the tool is not strict>}}.
std::string ForcedToolCallSchema(const ToolOffer& offer);

// The lazy grammar (kvshare/grammar/grammar.h LazyGrammar) of calls under
// tool_choice "auto": free text until the call's opening, then one call to
// one of `tools` (the name one of theirs, a strict tool's arguments valid
// against its parameters), which ToolCallParser reads as a call:
//   kGemma4: trigger "<|tool_call>"; body
//     <|tool_call>call:NAME{args in Gemma's notation}<tool_call|>
//     (strings <|"|>…<|"|> without '<' inside, keys bare, no spaces); after
//     it free text again when `parallel` (more calls, or the end), else
//     only the end.
//   kJson: trigger '{', up to 8 whitespace bytes, "tool_call (the opening of
//     both forms); body {"tool_call": {"name", "arguments"}} or, when
//     `parallel`, also {"tool_calls": [...]}; then only the end (the parser
//     reads one object).
// marker_tokens: the vocabulary's special tokens (IsSpecialToken) for
// "<|tool_call>", "<tool_call|>" and "<|\"|>" with their text (kGemma4;
// TokenTrie leaves special tokens out). Throws kvshare::Error for no tools, or a strict
// tool's parameters that do not compile (the message names the tool).
std::shared_ptr<const Grammar> LazyToolCallGrammar(
    std::span<const OfferedTool> tools, ToolCallSyntax syntax, bool parallel,
    std::vector<std::pair<std::int32_t, std::string>> marker_tokens = {});

}  // namespace kvshare
