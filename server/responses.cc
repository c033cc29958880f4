// POST /v1/responses, GET and DELETE /v1/responses/{id}, GET
// /v1/responses/{id}/input_items (OpenAI's Responses API):
// the request is mapped onto a chat request (responses_request.h) that
// HandleCompletion serves as it serves /v1/chat/completions (scheduling,
// cancellation on disconnect, tools, schemas), and its answer is translated
// (responses_format.h): the chat.completion object into a response, the
// chat chunks into the typed events as cpp-httplib pulls them.
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "responses_format.h"
#include "responses_request.h"
#include "server_impl.h"

namespace kvshare::server {
namespace {

// One streamed response: the chat stream's provider and releaser, and the translation.
struct ResponsesStream {
  httplib::ContentProvider chat;
  httplib::ContentProviderResourceReleaser release;
  std::unique_ptr<ResponseEventStream> events;
  nlohmann::json history;
  nlohmann::json input_items;
  bool started = false;
};

// Stores `response` with the conversation that led to it and its own output.
void Keep(ResponseStore& store, nlohmann::json history, nlohmann::json input_items, const nlohmann::json& response) {
  for (nlohmann::json& m : OutputMessages(response)) history.push_back(std::move(m));
  store.Put(response["id"].get<std::string>(), {response, std::move(history), std::move(input_items)});
}

// One page of `items` as OpenAI's list object, by the query's limit (1 to
// 100, default 20), order ("desc", the default, or "asc") and after (an item
// id: the items after it in that order).
nlohmann::json ItemPage(const nlohmann::json& items, const httplib::Request& req) {
  int limit = 20;
  if (req.has_param("limit")) {
    const std::string v = req.get_param_value("limit");
    limit = v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos ? 0 : std::stoi(v);
    if (limit < 1 || limit > 100) {
      throw ApiError(400, "Invalid 'limit': '" + v + "'. Expected an integer from 1 to 100.", "invalid_request_error",
                     "limit", "invalid_value");
    }
  }
  const std::string order = req.has_param("order") ? req.get_param_value("order") : "desc";
  if (order != "asc" && order != "desc") {
    throw ApiError(400, "Invalid 'order': '" + order + "'. Supported values are 'asc' and 'desc'.",
                   "invalid_request_error", "order", "invalid_value");
  }
  std::vector<nlohmann::json> ordered(items.begin(), items.end());
  if (order == "desc") std::reverse(ordered.begin(), ordered.end());
  std::size_t start = 0;
  if (req.has_param("after")) {
    const std::string after = req.get_param_value("after");
    auto it = std::find_if(ordered.begin(), ordered.end(), [&](const nlohmann::json& i) { return i["id"] == after; });
    if (it == ordered.end()) {
      throw ApiError(400, "Invalid 'after': no input item '" + after + "' in this response.", "invalid_request_error",
                     "after", "invalid_value");
    }
    start = static_cast<std::size_t>(it - ordered.begin()) + 1;
  }
  nlohmann::json data = nlohmann::json::array();
  for (std::size_t i = start; i < ordered.size() && data.size() < static_cast<std::size_t>(limit); ++i) {
    data.push_back(ordered[i]);
  }
  const bool more = start + data.size() < ordered.size();
  return {{"object", "list"},
          {"data", data},
          {"first_id", data.empty() ? nlohmann::json() : data.front()["id"]},
          {"last_id", data.empty() ? nlohmann::json() : data.back()["id"]},
          {"has_more", more}};
}

}  // namespace

void Server::Impl::HandleResponses(const httplib::Request& req, httplib::Response& res) {
  CheckReady();
  ResponsesRequest rr = ParseResponsesRequest(ParseBody(req), req.body, stored_responses,
                                              {.strict = opt.strict_openai, .allow_image_urls = opt.allow_image_urls});
  if (!rr.ignored.empty()) {
    std::string names;
    for (const std::string& f : rr.ignored) names += (names.empty() ? "" : ", ") + f;
    res.set_header("X-Kvshare-Ignored-Fields", names);
    Log("responses request: ignored unknown fields " + names + " (--strict-openai refuses them)");
  }
  httplib::Request chat_req;
  chat_req.method = "POST";
  chat_req.path = "/v1/chat/completions";
  chat_req.body = rr.chat_body;
  chat_req.local_addr = req.local_addr;
  chat_req.local_port = req.local_port;
  chat_req.remote_addr = req.remote_addr;
  chat_req.remote_port = req.remote_port;
  httplib::Response chat_res;
  try {
    HandleCompletion(chat_req, chat_res, /*chat=*/true);
  } catch (const ApiError& e) {
    throw RenameChatError(e, rr);
  }
  for (const auto& [k, v] : chat_res.headers) {
    if (k != "Content-Type") res.set_header(k, v);
  }
  ResponseHead head{
      NewResponseId("resp_"),
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
      ctx.model_id, std::move(rr.echo)};
  const bool keep = rr.store;
  if (!rr.stream) {
    nlohmann::json response = ResponseFromChat(nlohmann::json::parse(chat_res.body), head);
    if (keep) Keep(stored_responses, std::move(rr.history), std::move(rr.input_items), response);
    res.set_content(Dump(response), "application/json");
    return;
  }
  auto st = std::make_shared<ResponsesStream>();
  st->chat = std::move(chat_res.content_provider_);
  st->release = std::move(chat_res.content_provider_resource_releaser_);
  chat_res.content_provider_ = nullptr;
  chat_res.content_provider_resource_releaser_ = nullptr;  // st->release runs it, once
  st->events = std::make_unique<ResponseEventStream>(std::move(head));
  st->history = std::move(rr.history);
  st->input_items = std::move(rr.input_items);
  SetEventStream(
      req, res,
      [this, st, keep](std::size_t offset, httplib::DataSink& sink) {
        std::string out;
        if (!st->started) {
          st->started = true;
          out = st->events->Start();
        }
        // The chat stream writes into `chat_sink`; its text is translated.
        std::string chat_text;
        bool chat_done = false;
        httplib::DataSink chat_sink;
        chat_sink.write = [&chat_text](const char* d, std::size_t n) {
          chat_text.append(d, n);
          return true;
        };
        chat_sink.done = [&chat_done] { chat_done = true; };
        chat_sink.is_writable = [&sink] { return !sink.is_writable || sink.is_writable(); };
        const bool ok = st->chat(offset, 0, chat_sink);
        out += st->events->Feed(chat_text);
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;
        if (st->events->finished() && keep) {
          Keep(stored_responses, std::move(st->history), std::move(st->input_items), st->events->response());
        }
        if (chat_done || st->events->finished()) sink.done();
        return ok;
      },
      [st](bool success) {
        if (st->release) st->release(success);
      });
}

void Server::Impl::HandleStoredResponse(const httplib::Request& req, httplib::Response& res) {
  CheckReady();
  const std::string id = req.matches[1];
  std::optional<StoredResponse> r = stored_responses.Get(id);
  if (!r || (req.method == "DELETE" && !stored_responses.Erase(id))) {
    throw ApiError(404, "Response with id '" + id + "' not found (stored with \"store\": false, deleted or evicted).",
                   "invalid_request_error", "response_id", "response_not_found");
  }
  if (req.method == "DELETE") {
    res.set_content(Dump({{"id", id}, {"object", "response.deleted"}, {"deleted", true}}), "application/json");
  } else if (req.path.ends_with("/input_items")) {
    res.set_content(Dump(ItemPage(r->input_items, req)), "application/json");
  } else {
    res.set_content(Dump(r->response), "application/json");
  }
}

}  // namespace kvshare::server
