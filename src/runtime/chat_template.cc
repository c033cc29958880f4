// Gemma chat template (llama.cpp LLM_CHAT_TEMPLATE_GEMMA; HF gemma-3 jinja template).
#include <string>
#include <vector>

#include "kvshare/error.h"
#include "kvshare/tokenizer.h"

namespace kvshare {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// The template as alternating pieces: markup (parsed for special tokens) and
// message text (taken literally unless the caller asks otherwise).
struct Segment {
  std::string text;
  bool markup;
};

std::vector<Segment> GemmaSegments(std::span<const ChatMessage> messages,
                                   const ChatTemplateOptions& options) {
  std::vector<Segment> segs;
  auto add = [&segs](std::string_view text, bool markup) {
    if (text.empty()) return;
    if (!segs.empty() && segs.back().markup == markup) {
      segs.back().text += text;
    } else {
      segs.push_back({std::string(text), markup});
    }
  };
  if (options.bos_text) add("<bos>", true);
  std::string system_prompt;
  for (size_t i = 0; i < messages.size(); ++i) {
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
      throw Error("FormatGemmaChat: messages[" + std::to_string(i) +
                  "].role must be \"system\", \"user\", \"assistant\" or \"model\", got \"" +
                  m.role + "\"");
    }
    add("<start_of_turn>", true);
    add(role, true);
    add("\n", true);
    if (!system_prompt.empty() && role != "model") {
      add(system_prompt, false);
      add("\n\n", true);
      system_prompt.clear();
    }
    add(Trim(m.content), false);
    add("<end_of_turn>\n", true);
  }
  if (options.add_generation_prompt) add("<start_of_turn>model\n", true);
  return segs;
}

}  // namespace

std::string FormatGemmaChat(std::span<const ChatMessage> messages,
                            const ChatTemplateOptions& options) {
  std::string out;
  for (const Segment& s : GemmaSegments(messages, options)) out += s.text;
  return out;
}

std::vector<int32_t> EncodeGemmaChat(const Tokenizer& tokenizer,
                                     std::span<const ChatMessage> messages,
                                     const ChatTemplateOptions& options) {
  ChatTemplateOptions no_bos = options;
  no_bos.bos_text = false;
  std::vector<int32_t> ids;
  if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  for (const Segment& s : GemmaSegments(messages, no_bos)) {
    const auto part = tokenizer.Encode(
        s.text, {.add_bos = false,
                 .add_eos = false,
                 .parse_special = s.markup || options.parse_special_in_content});
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

}  // namespace kvshare
