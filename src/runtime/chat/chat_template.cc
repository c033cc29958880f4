// Chat templates (include/kvshare/runtime/chat_template.h): a conversation
// written by its format's family (family.h) and encoded with a tokenizer,
// and the format's marker, stop and tool-call marker tokens.
#include "kvshare/runtime/chat_template.h"

#include <string>
#include <utility>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "runtime/chat/family.h"

namespace kvshare {
namespace chat {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

void NoImagesIn(ChatFormat format, std::size_t i, const std::string& what) {
  throw Error("chat template " + std::string(ChatFormatName(format)) + ": messages[" + std::to_string(i) + "] (" +
              what + ") has images or audio; those go in user messages");
}

void Content(Segments& out, const Family& family, const ChatMessage& m, std::string_view (*shape)(std::string_view)) {
  const auto check = [&](const std::vector<std::size_t>& offsets, const char* what) {
    for (std::size_t k = 0; k < offsets.size(); ++k) {
      if (offsets[k] > m.content.size() || (k > 0 && offsets[k] < offsets[k - 1])) {
        throw Error(std::string("chat message: ") + what + " offset " + std::to_string(offsets[k]) +
                    " is outside the content (" + std::to_string(m.content.size()) + " bytes) or before the previous " +
                    what);
      }
    }
  };
  check(m.image_at, "image");
  check(m.audio_at, "audio");
  std::size_t from = 0, i = 0, a = 0;
  while (i < m.image_at.size() || a < m.audio_at.size()) {
    const bool image = a == m.audio_at.size() || (i < m.image_at.size() && m.image_at[i] <= m.audio_at[a]);
    const std::size_t at = image ? m.image_at[i++] : m.audio_at[a++];
    out.Text(shape(std::string_view(m.content).substr(from, at - from)));
    out.Item(image ? Media::kImage : Media::kAudio, image ? family.image_placeholder : family.audio_placeholder);
    from = at;
  }
  out.Text(shape(std::string_view(m.content).substr(from)));
}

void BadRole(ChatFormat format, std::size_t i, const std::string& role) {
  throw Error("chat template " + std::string(ChatFormatName(format)) + ": messages[" + std::to_string(i) +
              "].role must be \"system\", \"user\", \"assistant\", \"model\" or \"tool\", got \"" + role + "\"");
}

void CheckToolMessages(ChatFormat format, std::span<const ChatMessage> messages) {
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "tool" && messages[i].tool_call_id.empty()) {
      throw Error("chat template " + std::string(ChatFormatName(format)) + ": messages[" + std::to_string(i) +
                  "] (role \"tool\") has no tool_call_id: it must name the call it answers");
    }
  }
}

std::string ToolResponseName(std::span<const ChatMessage> messages, std::size_t i) {
  std::size_t j = i;
  while (j > 0 && messages[j - 1].role == "tool") --j;
  if (j > 0) {
    for (const ToolCall& c : messages[j - 1].tool_calls) {
      if (c.id == messages[i].tool_call_id) return c.name;
    }
  }
  return messages[i].name.empty() ? "unknown" : messages[i].name;
}

const Family& FamilyOf(ChatFormat format) {
  switch (format) {
    case ChatFormat::kNone: return NoneFamily();
    case ChatFormat::kGemma: return GemmaFamily();
    case ChatFormat::kGemma4: return Gemma4Family();
  }
  return NoneFamily();
}

}  // namespace chat

namespace {

std::vector<chat::Segment> BuildSegments(ChatFormat format, std::span<const ChatMessage> messages,
                                         const ChatTemplateOptions& options, bool bos_text) {
  chat::Segments out;
  if (bos_text) out.Markup("<bos>");
  chat::FamilyOf(format).render(messages, options, out);
  return out.Take();
}

}  // namespace

std::string FormatChat(ChatFormat format, std::span<const ChatMessage> messages, const ChatTemplateOptions& options) {
  std::string out;
  for (const chat::Segment& s : BuildSegments(format, messages, options, options.bos_text)) out += s.text;
  return out;
}

ChatTemplate::ChatTemplate(ChatFormat format, const Tokenizer& tokenizer) : format_(format), tokenizer_(&tokenizer) {
  const chat::Family& family = chat::FamilyOf(format);
  for (std::string_view m : family.markers) {
    if (!tokenizer.TokenId(m)) {
      throw Error("chat template " + std::string(ChatFormatName(format)) + " needs the token \"" + std::string(m) +
                  "\", which this model's vocabulary does not have: the model does not use this format; choose "
                  "another chat template (or none for plain completion)");
    }
  }
  if (!family.markers.empty()) end_of_turn_ = *tokenizer.TokenId(family.markers.front());
  if (!family.tool_stop.empty()) tool_response_ = tokenizer.TokenId(family.tool_stop).value_or(-1);
  for (std::string_view m : family.tool_call_markers) {
    // Special tokens: TokenTrie has no text for them, the lazy grammar is told it.
    if (auto id = tokenizer.TokenId(m); id && IsSpecialToken(tokenizer, *id)) {
      tool_call_markers_.emplace_back(*id, std::string(m));
    }
  }
}

std::vector<std::int32_t> ChatTemplate::Encode(std::span<const ChatMessage> messages,
                                               const ChatTemplateOptions& options,
                                               std::vector<std::size_t>* image_slots,
                                               std::vector<std::size_t>* audio_slots) const {
  using chat::Media;
  std::vector<std::int32_t> ids;
  if (options.add_bos && tokenizer_->bos_id() >= 0) ids.push_back(tokenizer_->bos_id());
  if (image_slots != nullptr) image_slots->clear();
  if (audio_slots != nullptr) audio_slots->clear();
  // The slots an item goes to (null: it stays placeholder text) and its padding.
  const auto slots_of = [&](Media m) { return m == Media::kImage ? image_slots : audio_slots; };
  const auto pad_of = [&](Media m) -> const std::string& {
    return m == Media::kImage ? options.image_padding_text : options.audio_padding_text;
  };
  std::vector<chat::Segment> segs = BuildSegments(format_, messages, options, /*bos_text=*/false);
  // The padding joins the text on each side of an item (two items in a row
  // share one piece of text between them).
  std::vector<chat::Segment> padded;
  std::string pending;
  for (chat::Segment& s : segs) {
    if (s.media != Media::kNone && slots_of(s.media) != nullptr) {
      const std::string& pad = pad_of(s.media);
      if (!pending.empty()) padded.push_back({std::exchange(pending, ""), false});
      if (!pad.empty()) {
        if (!padded.empty() && padded.back().media == Media::kNone) {
          padded.back().text += pad;
        } else {
          padded.push_back({pad, false});
        }
      }
      padded.push_back(std::move(s));
      pending = pad;
    } else {
      s.text = std::exchange(pending, "") + s.text;
      padded.push_back(std::move(s));
    }
  }
  if (!pending.empty()) padded.push_back({pending, false});
  for (const chat::Segment& s : padded) {
    if (s.media != Media::kNone && slots_of(s.media) != nullptr) {
      slots_of(s.media)->push_back(ids.size());
      continue;
    }
    const auto part = tokenizer_->Encode(
        s.text, {.add_bos = false, .add_eos = false, .parse_special = s.markup || options.parse_special_in_content});
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::vector<std::int32_t> ChatTemplate::StopTokens() const {
  if (end_of_turn_ < 0) return {};
  return {end_of_turn_};
}

std::vector<std::int32_t> ChatTemplate::ToolStopTokens() const {
  if (tool_response_ < 0) return {};
  return {tool_response_};
}

std::vector<std::int32_t> ChatTemplate::CloseModelTurn(bool ended_with_end_of_turn) const {
  if (chat::FamilyOf(format_).markers.empty()) return {};  // plain completion: no turns
  std::vector<std::int32_t> ids;
  if (!ended_with_end_of_turn) ids.push_back(end_of_turn_);
  const auto nl = tokenizer_->Encode("\n", {.add_bos = false, .add_eos = false, .parse_special = false});
  ids.insert(ids.end(), nl.begin(), nl.end());
  return ids;
}

}  // namespace kvshare
