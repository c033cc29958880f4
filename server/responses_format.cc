#include "responses_format.h"

#include <random>

#include "api_error.h"

namespace kvshare::server {

using nlohmann::json;

namespace {

json Usage(const json& u) {
  if (!u.is_object()) return nullptr;
  const std::int64_t in = u.value("prompt_tokens", 0), out = u.value("completion_tokens", 0);
  std::int64_t cached = 0;
  if (auto d = u.find("prompt_tokens_details"); d != u.end() && d->is_object()) cached = d->value("cached_tokens", 0);
  return {{"input_tokens", in},
          {"input_tokens_details", {{"cached_tokens", cached}}},
          {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", in + out}};
}

json TextPart(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

json MessageItem(const std::string& id, const char* status, json content) {
  return {{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}

json CallItem(const char* status, const std::string& call_id, const std::string& name, const std::string& args) {
  return {
      {"id", NewResponseId("fc_")}, {"type", "function_call"}, {"status", status}, {"call_id", call_id}, {"name", name},
      {"arguments", args}};
}

// The response object around `output`: status from the chat finish_reason.
json Response(const ResponseHead& h, const char* status, json output, json usage) {
  json r = {{"id", h.id},
            {"object", "response"},
            {"created_at", h.created_at},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", h.model},
            {"output", std::move(output)},
            {"usage", std::move(usage)}};
  for (const auto& [k, v] : h.echo.items()) r[k] = v;
  return r;
}

// Sets status and incomplete_details from the chat's finish.
void SetStatus(json& r, const std::string& finish_reason, const json& abort) {
  if (!abort.is_null()) {
    r["status"] = "incomplete";
    r["incomplete_details"] = {{"reason", "interrupted"}};
    r["kvshare_abort"] = abort;
  } else if (finish_reason == "length") {
    r["status"] = "incomplete";
    r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  }
}

}  // namespace

std::string NewResponseId(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return prefix + std::string(buf);
}

json InputItems(const json& input) {
  json items = json::array();
  if (input.is_string()) {
    items.push_back({{"id", NewResponseId("msg_")},
                     {"type", "message"},
                     {"role", "user"},
                     {"status", "completed"},
                     {"content", json::array({{{"type", "input_text"}, {"text", input}}})}});
    return items;
  }
  for (const json& in : input) {
    json item = in;
    const std::string type = item.value("type", "message");
    item["type"] = type;
    const char* prefix = type == "message" ? "msg_" : type == "function_call" ? "fc_" : "fco_";
    if (!item.contains("id") || !item["id"].is_string()) item["id"] = NewResponseId(prefix);
    item["status"] = "completed";
    if (type == "message" && item["content"].is_string()) {
      const bool assistant = item["role"] == "assistant";
      const std::string text = item["content"].get<std::string>();
      item["content"] = json::array({assistant ? TextPart(text) : json{{"type", "input_text"}, {"text", text}}});
    }
    items.push_back(std::move(item));
  }
  return items;
}

json ResponseFromChat(const json& c, const ResponseHead& h) {
  const json& choice = c.at("choices").at(0);
  const json& msg = choice.at("message");
  const std::string reason = choice.value("finish_reason", "stop");
  const json abort = choice.value("kvshare_abort", json());
  json output = json::array();
  const json* calls = msg.contains("tool_calls") ? &msg["tool_calls"] : nullptr;
  const json& content = msg.contains("content") ? msg["content"] : json();
  if ((content.is_string() && !content.get<std::string>().empty()) || calls == nullptr) {
    const bool cut = reason == "length" || !abort.is_null();
    output.push_back(MessageItem(NewResponseId("msg_"), cut ? "incomplete" : "completed",
                                 json::array({TextPart(content.is_string() ? content.get<std::string>() : "")})));
  }
  if (calls != nullptr) {
    for (const json& tc : *calls) {
      output.push_back(
          CallItem("completed", tc.at("id"), tc.at("function").at("name"), tc.at("function").at("arguments")));
    }
  }
  json r = Response(h, "completed", std::move(output), Usage(c.value("usage", json())));
  SetStatus(r, reason, abort);
  return r;
}

json OutputMessages(const json& response) {
  json m = {{"role", "assistant"}, {"content", nullptr}};
  std::string text;
  bool has_text = false;
  for (const json& item : response.at("output")) {
    if (item.at("type") == "message") {
      for (const json& p : item.at("content")) text += p.value("text", "");
      has_text = true;
    } else if (item.at("type") == "function_call") {
      m["tool_calls"].push_back({{"id", item.at("call_id")},
                                 {"type", "function"},
                                 {"function", {{"name", item.at("name")}, {"arguments", item.at("arguments")}}}});
    }
  }
  if (has_text) m["content"] = text;
  return json::array({m});
}

ResponseEventStream::ResponseEventStream(ResponseHead head) : head_(std::move(head)) {}

std::string ResponseEventStream::Event(const char* type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = seq_++;
  return std::string("event: ") + type + "\ndata: " + Dump(fields) + "\n\n";
}

std::string ResponseEventStream::Start() {
  const json r = Response(head_, "in_progress", json::array(), nullptr);
  std::string out = Event("response.created", {{"response", r}});
  return out + Event("response.in_progress", {{"response", r}});
}

std::string ResponseEventStream::OpenMessage() {
  message_ = static_cast<int>(output_.size());
  text_.clear();
  output_.push_back(MessageItem(NewResponseId("msg_"), "in_progress", json::array()));
  const std::string& id = output_[message_]["id"].get_ref<const std::string&>();
  std::string out = Event("response.output_item.added", {{"output_index", message_}, {"item", output_[message_]}});
  return out + Event("response.content_part.added",
                     {{"item_id", id}, {"output_index", message_}, {"content_index", 0}, {"part", TextPart("")}});
}

std::string ResponseEventStream::CloseMessage() {
  if (message_ < 0) return "";
  json& item = output_[message_];
  const std::string id = item["id"];
  const bool cut = finish_reason_ == "length" || !abort_.is_null();
  item["status"] = cut ? "incomplete" : "completed";
  item["content"] = json::array({TextPart(text_)});
  const json where = {{"item_id", id}, {"output_index", message_}, {"content_index", 0}};
  json done = where;
  done["text"] = text_;
  done["logprobs"] = json::array();
  std::string out = Event("response.output_text.done", done);
  json part = where;
  part["part"] = TextPart(text_);
  out += Event("response.content_part.done", part);
  out += Event("response.output_item.done", {{"output_index", message_}, {"item", item}});
  message_ = -1;
  return out;
}

std::string ResponseEventStream::Chunk(const json& chunk) {
  if (chunk.contains("error")) {
    error_ = chunk["error"];
    return "";
  }
  if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = Usage(chunk["usage"]);
  const json& choices = chunk.value("choices", json::array());
  if (choices.empty()) return "";
  const json& choice = choices[0];
  const json& delta = choice.value("delta", json::object());
  std::string out;
  if (auto c = delta.find("content"); c != delta.end() && c->is_string() && !c->get<std::string>().empty()) {
    if (message_ < 0) out += OpenMessage();
    text_ += c->get<std::string>();
    out += Event("response.output_text.delta", {{"item_id", output_[message_]["id"]},
                                                {"output_index", message_},
                                                {"content_index", 0},
                                                {"delta", *c},
                                                {"logprobs", json::array()}});
  }
  // A call comes as two chunks: its id and name, then all its arguments.
  for (const json& tc : delta.value("tool_calls", json::array())) {
    const json& f = tc.value("function", json::object());
    if (tc.contains("id")) {
      out += CloseMessage();
      call_ = static_cast<int>(output_.size());
      output_.push_back(CallItem("in_progress", tc["id"], f.value("name", ""), ""));
      out += Event("response.output_item.added", {{"output_index", call_}, {"item", output_[call_]}});
      continue;
    }
    if (call_ < 0) continue;
    json& item = output_[call_];
    const std::string args = f.value("arguments", "");
    const json where = {{"item_id", item["id"]}, {"output_index", call_}};
    json d = where;
    d["delta"] = args;
    if (!args.empty()) out += Event("response.function_call_arguments.delta", d);
    json done = where;
    done["name"] = item["name"];
    done["arguments"] = args;
    out += Event("response.function_call_arguments.done", done);
    item["arguments"] = args;
    item["status"] = "completed";
    out += Event("response.output_item.done", {{"output_index", call_}, {"item", item}});
    call_ = -1;
  }
  if (auto fr = choice.find("finish_reason"); fr != choice.end() && fr->is_string()) {
    finish_reason_ = fr->get<std::string>();
    if (choice.contains("kvshare_abort")) abort_ = choice["kvshare_abort"];
  }
  return out;
}

std::string ResponseEventStream::Finish() {
  std::string out = CloseMessage();
  finished_ = true;
  if (!error_.is_null()) {
    response_ = Response(head_, "failed", output_, usage_);
    response_["error"] = {{"code", "server_error"}, {"message", error_.value("message", "internal error")}};
    return out + Event("response.failed", {{"response", response_}});
  }
  response_ = Response(head_, "completed", output_, usage_);
  SetStatus(response_, finish_reason_, abort_);
  const bool complete = response_["status"] == "completed";
  return out + Event(complete ? "response.completed" : "response.incomplete", {{"response", response_}});
}

std::string ResponseEventStream::Feed(std::string_view sse) {
  pending_.append(sse);
  std::string out;
  std::size_t end;
  while (!finished_ && (end = pending_.find("\n\n")) != std::string::npos) {
    std::string event = pending_.substr(0, end);
    pending_.erase(0, end + 2);
    if (event.rfind("data: ", 0) != 0) continue;
    event.erase(0, 6);
    if (event == "[DONE]") {
      out += Finish();
    } else {
      out += Chunk(json::parse(event));
    }
  }
  return out;
}

}  // namespace kvshare::server
