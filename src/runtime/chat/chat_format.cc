// Choosing a chat format (include/kvshare/runtime/chat_template.h) the way
// llama.cpp does: by name, or by the markers the GGUF's
// tokenizer.chat_template contains (each family's template_marker).
#include <array>
#include <string>

#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/runtime/chat_template.h"
#include "runtime/chat/family.h"

namespace kvshare {
namespace {

constexpr std::array<std::string_view, 3> kNames = {"gemma", "gemma4", "none"};
// Name order, then detection order: Gemma 4's "<|turn>" is looked for first.
constexpr std::array<ChatFormat, 3> kByName = {ChatFormat::kGemma, ChatFormat::kGemma4, ChatFormat::kNone};
constexpr std::array<ChatFormat, 2> kDetected = {ChatFormat::kGemma4, ChatFormat::kGemma};

std::string_view Marker(ChatFormat format) { return chat::FamilyOf(format).template_marker; }

// The first `n` characters of a template, quoted on one line, for messages.
std::string Excerpt(std::string_view text, std::size_t n = 60) {
  std::string out = "\"";
  for (char c : text.substr(0, n)) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out + (text.size() > n ? "...\"" : "\"");
}

}  // namespace

std::string_view ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kNone: return "none";
    case ChatFormat::kGemma: return "gemma";
    case ChatFormat::kGemma4: return "gemma4";
  }
  return "unknown";
}

std::span<const std::string_view> ChatFormatNames() { return kNames; }

ChatFormat ChatFormatFromName(std::string_view name) {
  for (ChatFormat f : kByName) {
    if (ChatFormatName(f) == name) return f;
  }
  throw Error("unknown chat template \"" + std::string(name) +
              "\": valid names are gemma (Gemma 2/3), gemma4 (Gemma 4) and none (plain completion)");
}

std::optional<ChatFormat> DetectChatFormat(std::string_view text) {
  for (ChatFormat f : kByName) {
    if (ChatFormatName(f) == text) return f;
  }
  for (ChatFormat f : kDetected) {
    if (text.find(Marker(f)) != std::string_view::npos) return f;
  }
  return std::nullopt;
}

ChatFormatChoice ChooseChatFormat(std::optional<std::string_view> file_template, std::optional<std::string_view> name) {
  if (name) return {ChatFormatFromName(*name), ChatFormatSource::kNamed, "named by the caller"};
  if (!file_template || file_template->empty()) {
    return {ChatFormat::kNone, ChatFormatSource::kFileHasNone, "the file has no tokenizer.chat_template"};
  }
  const std::optional<ChatFormat> f = DetectChatFormat(*file_template);
  if (!f) {
    return {ChatFormat::kNone, ChatFormatSource::kFileUnrecognized,
            "the file's tokenizer.chat_template is not a format kvshare knows (gemma: contains \"" +
                std::string(Marker(ChatFormat::kGemma)) + "\"; gemma4: contains \"" +
                std::string(Marker(ChatFormat::kGemma4)) + "\"); it starts " + Excerpt(*file_template)};
  }
  std::string why = "the file's tokenizer.chat_template ";
  if (*file_template == ChatFormatName(*f)) {
    why += "names it";
  } else {
    why += "contains \"" + std::string(Marker(*f)) + "\"";
  }
  return {*f, ChatFormatSource::kFile, why};
}

ChatFormatChoice ChooseChatFormat(const GgufFile& file, std::optional<std::string_view> name) {
  return ChooseChatFormat(file.GetStringOpt("tokenizer.chat_template"), name);
}

}  // namespace kvshare
