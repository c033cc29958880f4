// The chat endpoint's messages (request_messages.h).
#include "request_messages.h"

#include "api_error.h"
#include "request_fields.h"
#include "request_audio.h"
#include "request_images.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

// The message's text, with its image parts' places in msg.image_at and
// their bytes appended to `images`; input_audio parts likewise (audio_at, `audio`).
std::string ContentText(const json& content, std::size_t index, const RequestParsing& o, ChatMessage& msg,
                        std::vector<RequestImage>& images, std::vector<RequestAudio>& audio) {
  const std::string name = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (!content.is_array()) WrongType(name, "a string or an array of content parts", content);
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string pname = name + "[" + std::to_string(i) + "]";
    if (!part.is_object()) WrongType(pname, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      throw BadRequest("Missing required parameter: '" + pname + ".type'.", pname + ".type",
                       "missing_required_parameter");
    }
    if (type->get<std::string>() == "image_url") {
      images.push_back(ReadImageUrlPart(part, pname, o));
      msg.image_at.push_back(text.size());
      continue;
    }
    if (type->get<std::string>() == "input_audio") {
      audio.push_back(ReadInputAudioPart(part, pname));
      msg.audio_at.push_back(text.size());
      continue;
    }
    // OpenAI's assistant messages may carry a refusal part (what the model
    // said instead of an answer): clients send it back with the history.
    if (type->get<std::string>() == "refusal" && msg.role == "assistant") {
      auto r = part.find("refusal");
      if (r == part.end() || !r->is_string()) WrongType(pname + ".refusal", "a string", r == part.end() ? json() : *r);
      text += r->get<std::string>();
      continue;
    }
    if (type->get<std::string>() != "text") {
      throw BadRequest("Invalid '" + pname +
                           ".type': only \"text\", \"image_url\" and \"input_audio\" content parts are supported "
                           "by this server, "
                           "got \"" +
                           type->get<std::string>() + "\".",
                       pname + ".type", "unsupported_parameter");
    }
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) WrongType(pname + ".text", "a string", t == part.end() ? json() : *t);
    text += t->get<std::string>();
  }
  return text;
}

// One entry of an assistant message's tool_calls.
ToolCall ParseToolCall(const json& c, const std::string& name) {
  if (!c.is_object()) WrongType(name, "an object", c);
  if (auto t = c.find("type");
      t != c.end() && !t->is_null() && (!t->is_string() || t->get<std::string>() != "function")) {
    throw BadRequest("Invalid '" + name + ".type': only \"function\" tool calls are supported.", name + ".type",
                     "invalid_value");
  }
  ToolCall call;
  if (auto id = c.find("id"); id != c.end() && !id->is_null()) {
    if (!id->is_string()) WrongType(name + ".id", "a string", *id);
    call.id = id->get<std::string>();
  }
  auto f = c.find("function");
  if (f == c.end() || f->is_null()) {
    throw BadRequest("Missing required parameter: '" + name + ".function'.", name + ".function",
                     "missing_required_parameter");
  }
  if (!f->is_object()) WrongType(name + ".function", "an object", *f);
  auto n = f->find("name");
  if (n == f->end() || n->is_null()) {
    throw BadRequest("Missing required parameter: '" + name + ".function.name'.", name + ".function.name",
                     "missing_required_parameter");
  }
  if (!n->is_string()) WrongType(name + ".function.name", "a string", *n);
  call.name = n->get<std::string>();
  if (auto a = f->find("arguments"); a != f->end() && !a->is_null()) {
    if (a->is_object()) {
      call.arguments = a->dump();  // lenient: an object instead of its JSON text
    } else if (a->is_string()) {
      call.arguments = a->get<std::string>();
      if (!call.arguments.empty() && !json::accept(call.arguments)) {
        throw BadRequest("Invalid '" + name + ".function.arguments': it must be the JSON text of an object, got '" +
                             call.arguments.substr(0, 60) + "'.",
                         name + ".function.arguments", "invalid_value");
      }
    } else {
      WrongType(name + ".function.arguments", "a string", *a);
    }
  }
  return call;
}

}  // namespace

std::vector<ChatMessage> ParseMessages(const json& body, const RequestParsing& o, std::vector<RequestImage>& images,
                                       std::vector<RequestAudio>& audio,
                                       std::vector<std::string>& ignored) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) {
    throw BadRequest("Missing required parameter: 'messages'.", "messages", "missing_required_parameter");
  }
  if (!it->is_array()) WrongType("messages", "an array", *it);
  if (it->empty()) {
    throw BadRequest(
        "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array "
        "instead.",
        "messages", "empty_array");
  }
  std::vector<ChatMessage> out;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string name = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) WrongType(name, "an object", m);
    auto role = m.find("role");
    if (role == m.end()) {
      throw BadRequest("Missing required parameter: '" + name + ".role'.", name + ".role",
                       "missing_required_parameter");
    }
    if (!role->is_string()) WrongType(name + ".role", "a string", *role);
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      throw BadRequest("Invalid value: '" + role->get<std::string>() +
                           "'. Supported values are: 'system', 'developer', "
                           "'user', 'assistant' and 'tool'.",
                       name + ".role", "invalid_value");
    }
    auto content = m.find("content");
    if (content == m.end() && r != "assistant") {
      throw BadRequest("Missing required parameter: '" + name + ".content'.", name + ".content",
                       "missing_required_parameter");
    }
    for (const auto& [k, v] : m.items()) {
      if (k == "role" || k == "content" || k == "name") continue;
      if ((k == "tool_calls" || k == "refusal") && r == "assistant") continue;
      if (k == "tool_call_id" && r == "tool") continue;
      Unknown(name + "." + k, o, ignored);
    }
    ChatMessage msg{r, ""};
    if (content != m.end()) msg.content = ContentText(*content, i, o, msg, images, audio);
    // A replayed refusal (content null, refusal its text) is what the assistant said.
    if (auto refusal = m.find("refusal"); r == "assistant" && refusal != m.end() && !refusal->is_null()) {
      if (!refusal->is_string()) WrongType(name + ".refusal", "a string or null", *refusal);
      if (msg.content.empty()) msg.content = refusal->get<std::string>();
    }
    if (r == "tool") {
      auto id = m.find("tool_call_id");
      if (id == m.end() || id->is_null()) {
        throw BadRequest("Missing required parameter: '" + name +
                             ".tool_call_id' (a tool message must name the "
                             "call it answers: the id of one of the previous assistant message's tool_calls).",
                         name + ".tool_call_id", "missing_required_parameter");
      }
      if (!id->is_string()) WrongType(name + ".tool_call_id", "a string", *id);
      msg.tool_call_id = id->get<std::string>();
      // As OpenAI: it answers a call of the assistant message before this run
      // of tool messages.
      std::size_t prev = out.size();
      while (prev > 0 && out[prev - 1].role == "tool") --prev;
      bool known = false;
      if (prev > 0 && out[prev - 1].role == "assistant") {
        for (const ToolCall& c : out[prev - 1].tool_calls) known = known || c.id == msg.tool_call_id;
      }
      if (!known) {
        throw BadRequest("Invalid parameter: '" + name + ".tool_call_id' of '" + msg.tool_call_id +
                             "' not found in 'tool_calls' of the previous assistant message.",
                         name + ".tool_call_id", "invalid_value");
      }
      if (auto n = m.find("name"); n != m.end() && n->is_string()) msg.name = n->get<std::string>();
    }
    if (auto tc = m.find("tool_calls"); r == "assistant" && tc != m.end() && !tc->is_null()) {
      if (!tc->is_array()) WrongType(name + ".tool_calls", "an array", *tc);
      for (std::size_t j = 0; j < tc->size(); ++j)
        msg.tool_calls.push_back(ParseToolCall((*tc)[j], name + ".tool_calls[" + std::to_string(j) + "]"));
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace kvshare::server
