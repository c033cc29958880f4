// One chat format's knowledge in one place (internal to src/runtime/chat/):
// how it writes a conversation, the marker tokens it needs, the token that
// ends generation while tools are offered, and the syntax its calls are read
// and constrained in. Each family's file (none.cc, gemma.cc, gemma4.cc)
// defines its Family; chat_template.cc, chat_format.cc and tool_choice.cc
// serve kvshare/runtime/chat_template.h from them.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/tool_calls.h"

namespace kvshare::chat {

// The conversation as alternating pieces: markup (encoded with parse_special)
// and message text (taken literally unless the caller asks otherwise).
// An image (audio) segment holds the format's placeholder text (what the HF
// template writes for an image (audio) part); ChatTemplate::Encode puts the
// item's tokens there instead.
enum class Media { kNone, kImage, kAudio };
struct Segment {
  std::string text;
  bool markup;
  Media media = Media::kNone;
};

class Segments {
 public:
  void Markup(std::string_view t) { Add(t, true); }
  void Text(std::string_view t) { Add(t, false); }
  void Item(Media kind, std::string_view placeholder) { segs_.push_back({std::string(placeholder), true, kind}); }
  std::vector<Segment> Take() { return std::move(segs_); }

 private:
  void Add(std::string_view text, bool markup) {
    if (text.empty()) return;
    if (!segs_.empty() && segs_.back().markup == markup && segs_.back().media == Media::kNone) {
      segs_.back().text += text;
    } else {
      segs_.push_back({std::string(text), markup});
    }
  }
  std::vector<Segment> segs_;
};

struct Family {
  ChatFormat format;
  // What a template text contains when it is this format (DetectChatFormat);
  // empty: never detected from a template.
  std::string_view template_marker;
  // The tokens the format needs in the vocabulary; the first ends a turn.
  std::span<const std::string_view> markers;
  // The token that also ends generation while tools are offered
  // (ChatTemplate::ToolStopTokens); empty: none.
  std::string_view tool_stop;
  // The syntax of calls the model writes freely (tool_choice "auto").
  ToolCallSyntax tool_syntax;
  // The texts of that syntax that a vocabulary may hold as special tokens
  // (LazyToolCallGrammar's marker_tokens).
  std::span<const std::string_view> tool_call_markers;
  // What the format's template writes for an image part ("" : nothing).
  std::string_view image_placeholder;
  // ... for an audio part.
  std::string_view audio_placeholder;
  // Writes `messages` (the text of the format; see chat_template.h).
  void (*render)(std::span<const ChatMessage> messages, const ChatTemplateOptions& options, Segments& out);
};

const Family& NoneFamily();    // none.cc
const Family& GemmaFamily();   // gemma.cc
const Family& Gemma4Family();  // gemma4.cc
const Family& FamilyOf(ChatFormat format);

// ---- Shared by the renderers (chat_template.cc) ----

bool IsSpace(char c);  // the C locale's isspace
// m.content as text parts with m's images and audio clips between them
// (ChatMessage::image_at, audio_at; images first at one offset): each part
// through `shape` (Trim, or as is), each item as `family`'s placeholder
// segment.
void Content(Segments& out, const Family& family, const ChatMessage& m, std::string_view (*shape)(std::string_view));
std::string_view Trim(std::string_view s);
[[noreturn]] void BadRole(ChatFormat format, std::size_t i, const std::string& role);
// Throws kvshare::Error: messages[i] (`what`) has images or audio where the
// format writes none.
[[noreturn]] void NoImagesIn(ChatFormat format, std::size_t i, const std::string& what);
// Throws kvshare::Error for a "tool" message without tool_call_id.
void CheckToolMessages(ChatFormat format, std::span<const ChatMessage> messages);
// The name of the function tool message i answers: from the calls of the
// assistant message before the run of tool messages it is in (matched by
// id), else its own name, else "unknown" (Gemma 4's template's rule).
std::string ToolResponseName(std::span<const ChatMessage> messages, std::size_t i);

}  // namespace kvshare::chat
