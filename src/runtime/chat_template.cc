// Chat formats (include/kvshare/chat_template.h): choosing one the way
// llama.cpp does, and writing Gemma 3 / Gemma 4 conversations without Jinja.
#include "kvshare/chat_template.h"

#include <array>
#include <string>
#include <vector>

#include "kvshare/error.h"
#include "kvshare/gguf.h"
#include "kvshare/tokenizer.h"

namespace kvshare {
namespace {

constexpr std::array<std::string_view, 3> kNames = {"gemma", "gemma4", "none"};

// The marker a template text must contain, per format (llama.cpp's rule for
// gemma; "<|turn>" is Gemma 4's turn opener).
constexpr std::string_view kGemmaMarker = "<start_of_turn>";
constexpr std::string_view kGemma4Marker = "<|turn>";

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Gemma 4's strip_thinking macro: drop every "<|channel>…<channel|>" span (a
// part with an opener keeps only its text before it), then trim.
std::string StripThinking(std::string_view text) {
  std::string out;
  for (std::size_t start = 0;;) {
    const std::size_t close = text.find("<channel|>", start);
    std::string_view part = text.substr(start, close == std::string_view::npos ? std::string_view::npos : close - start);
    if (const std::size_t open = part.find("<|channel>"); open != std::string_view::npos) part = part.substr(0, open);
    out += part;
    if (close == std::string_view::npos) break;
    start = close + std::string_view("<channel|>").size();
  }
  return std::string(Trim(out));
}

// The conversation as alternating pieces: markup (encoded with parse_special)
// and message text (taken literally unless the caller asks otherwise).
struct Segment {
  std::string text;
  bool markup;
};

class Segments {
 public:
  void Markup(std::string_view t) { Add(t, true); }
  void Text(std::string_view t) { Add(t, false); }
  std::vector<Segment> Take() { return std::move(segs_); }

 private:
  void Add(std::string_view text, bool markup) {
    if (text.empty()) return;
    if (!segs_.empty() && segs_.back().markup == markup) {
      segs_.back().text += text;
    } else {
      segs_.push_back({std::string(text), markup});
    }
  }
  std::vector<Segment> segs_;
};

[[noreturn]] void BadRole(ChatFormat format, std::size_t i, const std::string& role) {
  throw Error("chat template " + std::string(ChatFormatName(format)) + ": messages[" + std::to_string(i) +
              "].role must be \"system\", \"user\", \"assistant\" or \"model\", got \"" + role + "\"");
}

void GemmaSegments(std::span<const ChatMessage> messages, const ChatTemplateOptions& options, Segments& out) {
  std::string system_prompt;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      system_prompt += Trim(m.content);
      continue;
    }
    std::string_view role;
    if (m.role == "user") {
      role = "user";
    } else if (m.role == "assistant" || m.role == "model") {
      role = "model";
    } else {
      BadRole(ChatFormat::kGemma, i, m.role);
    }
    out.Markup("<start_of_turn>");
    out.Markup(role);
    out.Markup("\n");
    if (!system_prompt.empty() && role != "model") {
      out.Text(system_prompt);
      out.Markup("\n\n");
      system_prompt.clear();
    }
    out.Text(Trim(m.content));
    out.Markup("<end_of_turn>\n");
  }
  if (options.add_generation_prompt) out.Markup("<start_of_turn>model\n");
}

void Gemma4Segments(std::span<const ChatMessage> messages, const ChatTemplateOptions& options, Segments& out) {
  std::size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    out.Markup("<|turn>system\n");
    out.Text(Trim(messages[0].content));
    out.Markup("<turn|>\n");
    first = 1;
  }
  for (std::size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "model") {
      BadRole(ChatFormat::kGemma4, i, m.role);
    }
    const bool model = m.role == "assistant" || m.role == "model";
    // The template continues the model turn when the previous message's role
    // (as given) was "assistant".
    const bool continues = model && i > first && messages[i - 1].role == "assistant";
    if (!continues) {
      out.Markup("<|turn>");
      out.Markup(model ? "model" : m.role);
      out.Markup("\n");
    }
    if (model) {
      out.Text(StripThinking(m.content));
    } else {
      out.Text(Trim(m.content));
    }
    out.Markup("<turn|>\n");
  }
  if (options.add_generation_prompt) out.Markup("<|turn>model\n<|channel>thought\n<channel|>");
}

std::vector<Segment> BuildSegments(ChatFormat format, std::span<const ChatMessage> messages,
                                   const ChatTemplateOptions& options, bool bos_text) {
  Segments out;
  if (bos_text) out.Markup("<bos>");
  switch (format) {
    case ChatFormat::kNone:
      for (const ChatMessage& m : messages) out.Text(m.content);
      break;
    case ChatFormat::kGemma: GemmaSegments(messages, options, out); break;
    case ChatFormat::kGemma4: Gemma4Segments(messages, options, out); break;
  }
  return out.Take();
}

// The marker tokens a format needs in the vocabulary; the first is the one
// that ends a turn.
std::vector<std::string_view> MarkerTokens(ChatFormat format) {
  switch (format) {
    case ChatFormat::kNone: return {};
    case ChatFormat::kGemma: return {"<end_of_turn>", "<start_of_turn>"};
    case ChatFormat::kGemma4: return {"<turn|>", "<|turn>", "<|channel>", "<channel|>"};
  }
  return {};
}

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
  for (ChatFormat f : {ChatFormat::kGemma, ChatFormat::kGemma4, ChatFormat::kNone}) {
    if (ChatFormatName(f) == name) return f;
  }
  throw Error("unknown chat template \"" + std::string(name) +
              "\": valid names are gemma (Gemma 2/3), gemma4 (Gemma 4) and none (plain completion)");
}

std::optional<ChatFormat> DetectChatFormat(std::string_view text) {
  for (ChatFormat f : {ChatFormat::kGemma, ChatFormat::kGemma4, ChatFormat::kNone}) {
    if (ChatFormatName(f) == text) return f;
  }
  if (text.find(kGemma4Marker) != std::string_view::npos) return ChatFormat::kGemma4;
  if (text.find(kGemmaMarker) != std::string_view::npos) return ChatFormat::kGemma;
  return std::nullopt;
}

ChatFormatChoice ChooseChatFormat(std::optional<std::string_view> file_template, std::optional<std::string_view> name) {
  if (name) return {ChatFormatFromName(*name), ChatFormatSource::kNamed, "named by the caller"};
  if (!file_template || file_template->empty()) {
    return {ChatFormat::kNone, ChatFormatSource::kFileHasNone,
            "the file has no tokenizer.chat_template"};
  }
  const std::optional<ChatFormat> f = DetectChatFormat(*file_template);
  if (!f) {
    return {ChatFormat::kNone, ChatFormatSource::kFileUnrecognized,
            "the file's tokenizer.chat_template is not a format kvshare knows (gemma: contains \"" +
                std::string(kGemmaMarker) + "\"; gemma4: contains \"" + std::string(kGemma4Marker) +
                "\"); it starts " + Excerpt(*file_template)};
  }
  std::string why = "the file's tokenizer.chat_template ";
  if (*file_template == ChatFormatName(*f)) {
    why += "names it";
  } else {
    why += std::string("contains \"") + std::string(*f == ChatFormat::kGemma4 ? kGemma4Marker : kGemmaMarker) + "\"";
  }
  return {*f, ChatFormatSource::kFile, why};
}

ChatFormatChoice ChooseChatFormat(const GgufFile& file, std::optional<std::string_view> name) {
  return ChooseChatFormat(file.GetStringOpt("tokenizer.chat_template"), name);
}

std::string FormatChat(ChatFormat format, std::span<const ChatMessage> messages, const ChatTemplateOptions& options) {
  std::string out;
  for (const Segment& s : BuildSegments(format, messages, options, options.bos_text)) out += s.text;
  return out;
}

ChatTemplate::ChatTemplate(ChatFormat format, const Tokenizer& tokenizer) : format_(format), tokenizer_(&tokenizer) {
  const std::vector<std::string_view> markers = MarkerTokens(format);
  for (std::string_view m : markers) {
    if (!tokenizer.TokenId(m)) {
      throw Error("chat template " + std::string(ChatFormatName(format)) + " needs the token \"" + std::string(m) +
                  "\", which this model's vocabulary does not have: the model does not use this format; choose "
                  "another chat template (or none for plain completion)");
    }
  }
  if (!markers.empty()) end_of_turn_ = *tokenizer.TokenId(markers.front());
}

std::vector<std::int32_t> ChatTemplate::Encode(std::span<const ChatMessage> messages,
                                               const ChatTemplateOptions& options) const {
  std::vector<std::int32_t> ids;
  if (options.add_bos && tokenizer_->bos_id() >= 0) ids.push_back(tokenizer_->bos_id());
  for (const Segment& s : BuildSegments(format_, messages, options, /*bos_text=*/false)) {
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

std::vector<std::int32_t> ChatTemplate::CloseModelTurn(bool ended_with_end_of_turn) const {
  if (format_ == ChatFormat::kNone) return {};
  std::vector<std::int32_t> ids;
  if (!ended_with_end_of_turn) ids.push_back(end_of_turn_);
  const auto nl = tokenizer_->Encode("\n", {.add_bos = false, .add_eos = false, .parse_special = false});
  ids.insert(ids.end(), nl.begin(), nl.end());
  return ids;
}

}  // namespace kvshare
