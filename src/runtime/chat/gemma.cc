// The gemma chat format: Gemma 2 / 3 (llama.cpp LLM_CHAT_TEMPLATE_GEMMA;
// include/kvshare/runtime/chat_template.h). Turns between "<start_of_turn>"
// and "<end_of_turn>"; no tool format of its own, so tools, calls and
// results are written in the JSON convention (json_calls.cc), and calls are
// read and constrained in it.
#include <array>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/chat/family.h"

namespace kvshare::chat {
namespace {

// "<end_of_turn>" first: it ends a turn.
constexpr std::array<std::string_view, 2> kMarkers = {"<end_of_turn>", "<start_of_turn>"};

void Render(std::span<const ChatMessage> messages, const ChatTemplateOptions& options, Segments& out) {
  CheckToolMessages(ChatFormat::kGemma, messages);
  std::string system_prompt;
  bool tools_pending = !options.tools.empty();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      if (m.has_media()) NoImagesIn(ChatFormat::kGemma, i, m.role);
      system_prompt += Trim(m.content);
      continue;
    }
    std::string_view role;
    if (m.role == "user" || m.role == "tool") {
      role = "user";
    } else if (m.role == "assistant" || m.role == "model") {
      role = "model";
    } else {
      BadRole(ChatFormat::kGemma, i, m.role);
    }
    out.Markup("<start_of_turn>");
    out.Markup(role);
    out.Markup("\n");
    if (tools_pending && role != "model") {
      // The tool list joins the system text, where Gemma reads instructions.
      const std::string tools = ToolCallInstructions(options.tools, options.parallel_tool_calls);
      system_prompt = system_prompt.empty() ? tools : system_prompt + "\n\n" + tools;
      tools_pending = false;
    }
    if (!system_prompt.empty() && role != "model") {
      out.Text(system_prompt);
      out.Markup("\n\n");
      system_prompt.clear();
    }
    if (m.role == "tool") {
      // A run of tool results forms one user turn, one JSON line each.
      for (;; ++i) {
        nlohmann::ordered_json r = {{"name", ToolResponseName(messages, i)}, {"content", messages[i].content}};
        out.Text(nlohmann::ordered_json{{"tool_response", r}}.dump());
        if (i + 1 >= messages.size() || messages[i + 1].role != "tool") break;
        out.Text("\n");
      }
    } else if (!m.tool_calls.empty()) {
      if (m.has_media()) NoImagesIn(ChatFormat::kGemma, i, "assistant message with tool calls");
      const std::string_view text = Trim(m.content);
      out.Text(text);
      if (!text.empty()) out.Text("\n");
      out.Text(JsonToolCallText(m.tool_calls));
    } else {
      Content(out, GemmaFamily(), m, Trim);
    }
    out.Markup("<end_of_turn>\n");
  }
  if (options.add_generation_prompt) out.Markup("<start_of_turn>model\n");
}

}  // namespace

const Family& GemmaFamily() {
  // No tool stop token, and JSON calls have no marker tokens.
  static const Family f{.format = ChatFormat::kGemma,
                        .template_marker = "<start_of_turn>",
                        .markers = kMarkers,
                        .tool_syntax = ToolCallSyntax::kJson,
                        .image_placeholder = "<start_of_image>",
                        .audio_placeholder = "<audio_soft_token>",
                        .render = Render};
  return f;
}

}  // namespace kvshare::chat
