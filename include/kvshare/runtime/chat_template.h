// kvshare/runtime/chat_template.h — chat prompt formats, chosen the way llama.cpp
// chooses them: from the GGUF's `tokenizer.chat_template`, or by name.
//
// No Jinja engine: a template text is recognized by the markers it contains
// (llama.cpp `llm_chat_detect_template`), and each known format is written out
// in C++:
//   gemma   Gemma 2 / 3 (llama.cpp LLM_CHAT_TEMPLATE_GEMMA; the template
//           contains "<start_of_turn>"). Each turn is
//           "<start_of_turn>{role}\n{trim(content)}<end_of_turn>\n", role
//           "assistant" written as "model". System messages form no turn: their
//           trimmed text (several joined directly) is prepended to the next
//           non-model turn followed by "\n\n". Generation prompt
//           "<start_of_turn>model\n". Ends a turn: "<end_of_turn>".
//   gemma4  Gemma 4 (the template contains "<|turn>"; the text of
//           google/gemma-4-*-it's chat_template.jinja without tools, with
//           thinking off). A first system message becomes
//           "<|turn>system\n{trim(content)}<turn|>\n"; every other message
//           "<|turn>{role}\n{trim(content)}<turn|>\n", role "assistant" written
//           as "model", whose content loses its thought channels
//           ("<|channel>…<channel|>") before the trim. A model message right
//           after an "assistant" message continues that turn (no second
//           "<|turn>model\n"), as the template does. Generation prompt
//           "<|turn>model\n<|channel>thought\n<channel|>" (an empty thought
//           channel: thinking off). Ends a turn: "<turn|>".
//   none    plain completion: the message contents as they are, no markup.
//
// Tools (ChatTemplateOptions::tools, ChatMessage::tool_calls, role "tool"):
//   gemma4  the template's own tool format: after the system text, one
//           "<|tool>declaration:NAME{description:<|"|>…<|"|>,parameters:{…}}
//           <tool|>" per tool (the template's format_function_declaration,
//           properties sorted by name); an assistant message's calls
//           "<|tool_call>call:NAME{key:value,…}<tool_call|>" (arguments that
//           are a JSON object in Gemma's notation: keys bare and sorted,
//           strings in <|"|>…<|"|>; any other text as it is); the "tool"
//           messages right after it, inside the same model turn, as
//           "<|tool_response>response:NAME{value:<|"|>CONTENT<|"|>}
//           <tool_response|>" (NAME from the call whose id is tool_call_id,
//           else the message's name, else "unknown"), the turn left open when
//           the message has no text; calls without responses end with
//           "<|tool_response>". No generation prompt after calls or
//           responses: the model continues its turn. A tool message that
//           follows no calls is not written (as in the template).
//   gemma   no native format: the JSON convention of kvshare/runtime/tool_calls.h.
//           ToolCallInstructions(tools) joins the system text ("\n\n"
//           between); a call is written in the model turn as
//           {"tool_call": {"name": …, "arguments": {…}}} (several:
//           {"tool_calls": [{"name", "arguments"}, …]}), after the message's
//           text and "\n" if it has any; consecutive "tool" messages form one
//           user turn, one line each:
//           {"tool_response": {"name": …, "content": …}}.
// A model file without a template gets plain completion; a template that is
// none of the above also gets plain completion, and the caller should warn.
//
// Each format is one family in src/runtime/chat/ (none.cc, gemma.cc,
// gemma4.cc): its rendering, its marker tokens, its tool stop token and the
// syntax its calls are read and constrained in.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvshare/grammar/grammar.h"
#include "kvshare/runtime/chat_message.h"
#include "kvshare/runtime/tool_calls.h"

namespace kvshare {

class GgufFile;
class Tokenizer;

enum class ChatFormat {
  kNone,    // plain completion
  kGemma,   // Gemma 2 / 3
  kGemma4,  // Gemma 4
};

// "none", "gemma" (llama.cpp's --chat-template name) or "gemma4".
std::string_view ChatFormatName(ChatFormat format);
// Every name ChatFormatFromName accepts: "gemma", "gemma4", "none".
std::span<const std::string_view> ChatFormatNames();
// The format of a name. Throws kvshare::Error naming the unknown name and the
// valid ones.
ChatFormat ChatFormatFromName(std::string_view name);

// The format a chat template text uses, or nullopt if it is none kvshare knows.
// A text that is exactly a format name means that format (llama.cpp does the
// same); otherwise "<|turn>" means gemma4 and "<start_of_turn>" gemma.
std::optional<ChatFormat> DetectChatFormat(std::string_view template_text);

// Where ChooseChatFormat's answer came from.
enum class ChatFormatSource {
  kNamed,             // the caller named a format
  kFile,              // recognized in the file's tokenizer.chat_template
  kFileHasNone,       // no (or an empty) tokenizer.chat_template: plain completion
  kFileUnrecognized,  // a template kvshare does not know: plain completion; warn
};

struct ChatFormatChoice {
  ChatFormat format = ChatFormat::kNone;
  ChatFormatSource source = ChatFormatSource::kFileHasNone;
  // Why, in words, for logs and warnings, e.g. "the file's
  // tokenizer.chat_template contains \"<start_of_turn>\"". For
  // kFileUnrecognized it names the problem (and quotes the template's start).
  std::string reason;
};

// The format to use: `name` when given (a ChatFormatNames() entry; throws
// kvshare::Error otherwise), else the one `file_template` uses (nullopt or
// empty: the file has none), else plain completion.
ChatFormatChoice ChooseChatFormat(std::optional<std::string_view> file_template,
                                  std::optional<std::string_view> name = std::nullopt);
// The same with the template read from `file`'s tokenizer.chat_template.
ChatFormatChoice ChooseChatFormat(const GgufFile& file, std::optional<std::string_view> name = std::nullopt);

// ---- Formatting (ChatMessage, ToolFunction: kvshare/runtime/chat_message.h) ----

struct ChatTemplateOptions {
  // End with the format's generation prompt so the model writes the next turn.
  bool add_generation_prompt = true;
  // FormatChat only: start the text with "<bos>" (the HF templates' exact
  // text). ChatTemplate::Encode ignores it (see add_bos).
  bool bos_text = false;
  // ChatTemplate::Encode only: put the tokenizer's BOS first (when the
  // vocabulary has one). False continues a conversation already in the cache.
  bool add_bos = true;
  // ChatTemplate::Encode only: also recognize special-token text inside message
  // contents. Off by default, so a user who types "<end_of_turn>" cannot end a
  // turn; the markup around the messages is always parsed.
  bool parse_special_in_content = false;
  // ChatTemplate::Encode with image_slots only: text written before and
  // after each image's tokens (ImageSplicer::padding_text(): Gemma 3 / 3n's
  // "\n\n"), tokenized together with the neighbouring text as HF's processor
  // tokenizes its whole prompt string.
  std::string image_padding_text;
  // ChatTemplate::Encode with audio_slots only: the same around each audio
  // clip (AudioSplicer::padding_text(): Gemma 3n's "\n\n").
  std::string audio_padding_text;
  // Functions offered to the model (see "Tools" at the top of this file).
  // Empty: none offered; kNone ignores them.
  std::vector<ToolFunction> tools;
  // gemma (JSON convention) only: the instructions also describe the
  // several-calls form {"tool_calls": [...]}.
  bool parallel_tool_calls = true;
};

// The text of `messages` in `format` (see the top of this file). Throws
// kvshare::Error for a role the format does not know (the message names the
// index and the valid roles). kNone joins the contents as they are.
// Throws kvshare::Error for a "tool" message without tool_call_id.
std::string FormatChat(ChatFormat format, std::span<const ChatMessage> messages,
                       const ChatTemplateOptions& options = {});

// ---- Tools offered in a request (kvshare/runtime/tool_calls.h ToolOffer) ----

// How to read the reply of a request that makes `offer` in `format`: the
// JSON convention for gemma (and none) and for a forced call (kRequired,
// kFunction: the grammar writes JSON, see ChatTemplate::ToolCallGrammar),
// Gemma 4's own markers for gemma4 under kAuto; only the offered names (for
// kFunction only its name).
ToolCallParserOptions ToolCallParsing(ChatFormat format, const ToolOffer& offer);

// A chat format bound to a tokenizer: encodes conversations and knows the
// format's end-of-turn token. Immutable; the tokenizer must outlive it.
class ChatTemplate {
 public:
  // Looks up the format's marker tokens by their text (as llama.cpp does).
  // Throws kvshare::Error naming the first marker the vocabulary lacks (gemma:
  // "<start_of_turn>", "<end_of_turn>"; gemma4: "<|turn>", "<turn|>",
  // "<|channel>", "<channel|>"): the model does not use this format.
  ChatTemplate(ChatFormat format, const Tokenizer& tokenizer);

  ChatFormat format() const { return format_; }

  // Token ids of FormatChat's text with the tokenizer's BOS in front (see
  // ChatTemplateOptions::add_bos; bos_text is ignored). Markup is encoded with
  // parse_special, message contents without it (parse_special_in_content).
  // kNone: the contents joined, without parse_special: plain completion.
  // With `image_slots`: the messages' images (ChatMessage::image_at) write no
  // tokens; image_slots[i] is the index in the result where image i's
  // tokens go (kvshare/runtime/image_prompt.h splices them). Without it an
  // image is encoded as the format's placeholder text (what FormatChat
  // writes: gemma "<start_of_image>", gemma4 "<|image|>"). `audio_slots`
  // does the same for the messages' audio clips (ChatMessage::audio_at;
  // kvshare/runtime/audio_prompt.h; placeholders gemma "<audio_soft_token>",
  // gemma4 "<|audio|>").
  std::vector<std::int32_t> Encode(std::span<const ChatMessage> messages, const ChatTemplateOptions& options = {},
                                   std::vector<std::size_t>* image_slots = nullptr,
                                   std::vector<std::size_t>* audio_slots = nullptr) const;

  // The token that ends a turn ("<end_of_turn>", "<turn|>"); -1 for kNone.
  std::int32_t end_of_turn_id() const { return end_of_turn_; }
  // Tokens that end generation in this format besides the tokenizer's own
  // end-of-generation tokens (for GenerateOptions::stop_tokens): the
  // end-of-turn token, none for kNone.
  std::vector<std::int32_t> StopTokens() const;
  // Tokens that also end generation while tools are offered: gemma4's
  // "<|tool_response>" (the model hands over after its calls), when the
  // vocabulary has it; none for the other formats.
  std::vector<std::int32_t> ToolStopTokens() const;
  // The grammar that holds the reply of a request making `offer`:
  //   kRequired, kFunction: CompileJsonSchema(ForcedToolCallSchema(offer)),
  //     one call in the JSON convention (every format);
  //   kAuto with at least one strict tool: LazyToolCallGrammar over all the
  //     offered tools in the syntax ToolCallParsing reads, with this
  //     vocabulary's call markers when they are special tokens (gemma4:
  //     "<|tool_call>", "<tool_call|>", "<|\"|>");
  //   kAuto without strict tools: null (free text; calls are parsed as they come).
  // Throws kvshare::Error when the call cannot be enforced (a strict tool's
  // parameters do not compile, or use a property name Gemma 4's notation
  // cannot write: one with ':').
  std::shared_ptr<const Grammar> ToolCallGrammar(const ToolOffer& offer) const;
  // Ids that close a model turn before the next user turn is appended to a
  // cached conversation: the end-of-turn token (unless the model already wrote
  // it, `ended_with_end_of_turn`), then "\n". Empty for kNone.
  std::vector<std::int32_t> CloseModelTurn(bool ended_with_end_of_turn) const;

 private:
  ChatFormat format_;
  const Tokenizer* tokenizer_;
  std::int32_t end_of_turn_ = -1;
  std::int32_t tool_response_ = -1;
  // The format's call markers that the vocabulary has as special tokens
  // (IsSpecialToken), with their text (LazyToolCallGrammar's marker_tokens).
  std::vector<std::pair<std::int32_t, std::string>> tool_call_markers_;
};

}  // namespace kvshare
