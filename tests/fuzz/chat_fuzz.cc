// libFuzzer target for chat rendering (kvshare/runtime/chat_template.h): the input is
// a JSON array of messages ({"role", "content"}, any JSON types; a non-string
// content is rendered as its JSON text) or, when it is no JSON, a template
// text for DetectChatFormat / ChooseChatFormat. Every format renders the
// messages or throws kvshare::Error (a role it does not know); the rendering
// with a generation prompt must extend the one without.
//   build-fuzz/tests/fuzz/chat_fuzz -max_total_time=30 corpus-chat tests/fuzz/seeds/chat
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/common/error.h"
#include "kvshare/runtime/chat_template.h"

namespace {

std::string Text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)kvshare::DetectChatFormat(text);
  try {
    (void)kvshare::ChooseChatFormat(text);
    (void)kvshare::ChooseChatFormat(std::nullopt, text);
  } catch (const kvshare::Error&) {
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {  // parse_error, out_of_range ("1e400")
    return 0;
  }
  if (j.is_object() && j.contains("messages")) j = j["messages"];
  if (!j.is_array()) return 0;
  std::vector<kvshare::ChatMessage> messages;
  for (const nlohmann::json& m : j) {
    kvshare::ChatMessage cm;
    if (m.is_object()) {
      if (auto r = m.find("role"); r != m.end()) cm.role = Text(*r);
      if (auto c = m.find("content"); c != m.end()) cm.content = Text(*c);
    } else {
      cm.content = Text(m);
    }
    messages.push_back(std::move(cm));
  }
  for (std::string_view name : kvshare::ChatFormatNames()) {
    const kvshare::ChatFormat f = kvshare::ChatFormatFromName(name);
    try {
      const std::string bare = kvshare::FormatChat(f, messages, {.add_generation_prompt = false});
      const std::string prompted = kvshare::FormatChat(f, messages, {.add_generation_prompt = true});
      const std::string bos = kvshare::FormatChat(f, messages, {.add_generation_prompt = true, .bos_text = true});
      if (prompted.compare(0, bare.size(), bare) != 0) std::abort();
      if (bos.size() < prompted.size()) std::abort();
    } catch (const kvshare::Error&) {
    }
  }
  return 0;
}
