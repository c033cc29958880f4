// The request path the audio endpoints share (server_impl.h): the clip and
// the instruction as one chat request, submitted; then its whole text.
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "audio_form.h"
#include "connection.h"
#include "kvshare/common/error.h"
#include "openai_response.h"
#include "server_impl.h"

namespace kvshare::server {

AudioSubmission Server::Impl::SubmitAudio(httplib::Response& res, const httplib::Request& req, const AudioForm& form,
                                          const std::string& instruction) {
  AudioSubmission s;
  CompletionRequest& cr = s.request;
  cr.chat = true;
  cr.model = form.model;
  // The clip, then the caller's prompt (style, the previous segment), then
  // the instruction (docs/audio.md "Prompts").
  ChatMessage m{"user", (form.prompt.empty() ? "" : form.prompt + "\n") + instruction};
  m.audio_at = {0};
  cr.messages = {m};
  cr.audio = {form.audio};
  cr.sampler.temperature = form.temperature;
  RequestOptions ro = BuildRequest(cr, ctx);
  if (!cr.model.empty() && cr.model != ctx.model_id) res.set_header("X-Kvshare-Served-Model", ctx.model_id);
  if (!form.ignored.empty()) {
    std::string names;
    for (const std::string& f : form.ignored) names += (names.empty() ? "" : ", ") + f;
    res.set_header("X-Kvshare-Ignored-Fields", names);
    Log(req.path + ": ignored unknown fields " + names + " (--strict-openai refuses them)");
  }
  SubmitResult sub;
  try {
    sub = scheduler->Submit(std::move(ro), http_waiting.load());
  } catch (const Error& e) {
    throw BadRequest(e.what());
  }
  if (sub.status != SubmitStatus::kAccepted) {
    CheckReady();
    res.set_header("Retry-After", "1");
    throw ApiError(503, "The server is busy. Retry later.", "unavailable_error", std::nullopt, "server_busy");
  }
  s.handle = sub.handle;
  s.fd = FindConnectionSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  in_flight.fetch_add(1);
  return s;
}

std::string Server::Impl::AwaitAudioText(AudioSubmission& s, const std::string& what, double seconds) {
  CompletionFormatter fmt(s.request, what, 0, ctx.model_id, *tok);
  std::vector<RequestEvent> events;
  while (!fmt.finished()) {
    events.clear();
    if (s.handle->Wait(events, std::chrono::milliseconds(20))) {
      for (const RequestEvent& e : events) fmt.Add(e);
    } else if (PeerClosed(s.fd)) {
      s.handle->Cancel();
    }
  }
  in_flight.fetch_sub(1);
  if (fmt.last().error) throw ApiError(500, fmt.last().detail, "server_error");
  const nlohmann::json out = fmt.Final();
  const nlohmann::json& content = out["choices"][0]["message"]["content"];
  Log(what + ": " + std::to_string(seconds) + " s of audio, " +
      std::to_string(out["usage"]["completion_tokens"].get<long long>()) + " tokens");
  return content.is_string() ? content.get<std::string>() : std::string();
}

}  // namespace kvshare::server
