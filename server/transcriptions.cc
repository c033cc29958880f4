// POST /v1/audio/transcriptions (OpenAI's shape, as vLLM serves it): a
// multipart form with the clip (`file`) and `model`, `language`, `prompt`,
// `response_format` (json | text | verbose_json), `temperature`; run as a
// chat request whose user message is the clip then the transcription
// instruction (docs/audio.md "Transcriptions"). Not streamed.
#include <chrono>
#include <string>
#include <vector>

#include "connection.h"
#include "kvshare/audio/audio.h"
#include "kvshare/common/error.h"
#include "openai_response.h"
#include "server_impl.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

std::string Field(const httplib::Request& req, const char* name) {
  return req.has_file(name) ? req.get_file_value(name).content : std::string();
}

// The instruction after the clip: the ASR prompt of Google's Gemma audio
// guide, with the request's language when it names one.
std::string Instruction(const std::string& language) {
  const std::string lang = language.empty() ? "its original language" : language;
  return "Transcribe the following speech segment in " + lang + " into " + lang + " text.";
}

}  // namespace

void Server::Impl::HandleTranscription(const httplib::Request& req, httplib::Response& res) {
  CheckReady();
  if (!req.is_multipart_form_data()) {
    throw BadRequest("Invalid body: /v1/audio/transcriptions takes multipart/form-data with a 'file' field.", "file",
                     "invalid_request_error");
  }
  if (!req.has_file("file") || req.get_file_value("file").content.empty()) {
    throw BadRequest("Missing required parameter: 'file'.", "file", "missing_required_parameter");
  }
  const std::string format = Field(req, "response_format").empty() ? "json" : Field(req, "response_format");
  if (format != "json" && format != "text" && format != "verbose_json") {
    throw BadRequest("Invalid 'response_format': expected \"json\", \"text\" or \"verbose_json\", got \"" + format +
                         "\".",
                     "response_format", "invalid_value");
  }
  if (Field(req, "stream") == "true") {
    throw BadRequest("Invalid 'stream': streamed transcriptions are not supported by this server.", "stream",
                     "unsupported_parameter");
  }
  CompletionRequest cr;
  cr.chat = true;
  cr.model = Field(req, "model");
  const std::string language = Field(req, "language");
  const std::string prompt = Field(req, "prompt");
  ChatMessage m{"user", (prompt.empty() ? "" : prompt + "\n") + Instruction(language)};
  m.audio_at = {0};
  cr.messages = {m};
  RequestAudio ra;
  const std::string& bytes = req.get_file_value("file").content;
  ra.bytes.assign(bytes.begin(), bytes.end());
  ra.param = "file";
  double seconds = 0;
  try {
    const AudioFormat f = SniffAudioFormat(ra.bytes);
    ra.format = AudioFormatName(f);
    for (char& c : ra.format) c = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    seconds = DecodeAudio(ra.bytes, {.max_seconds = 600}).seconds();
  } catch (const Error& e) {
    throw BadRequest(std::string("Invalid 'file': ") + e.what() + ".", "file", "invalid_audio");
  }
  cr.audio = {ra};
  const std::string t = Field(req, "temperature");
  cr.sampler.temperature = t.empty() ? 0.0f : std::stof(t);
  RequestOptions ro = BuildRequest(cr, ctx);
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
  CompletionFormatter fmt(cr, "transcription", 0, ctx.model_id, *tok);
  const int fd = FindConnectionSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  in_flight.fetch_add(1);
  std::vector<RequestEvent> events;
  while (!fmt.finished()) {
    events.clear();
    if (sub.handle->Wait(events, std::chrono::milliseconds(20))) {
      for (const RequestEvent& e : events) fmt.Add(e);
    } else if (PeerClosed(fd)) {
      sub.handle->Cancel();
    }
  }
  in_flight.fetch_sub(1);
  if (fmt.last().error) throw ApiError(500, fmt.last().detail, "server_error");
  const json out = fmt.Final();
  std::string text = out["choices"][0]["message"]["content"].is_string()
                         ? out["choices"][0]["message"]["content"].get<std::string>()
                         : std::string();
  Log("transcription: " + std::to_string(seconds) + " s of audio, " +
      std::to_string(out["usage"]["completion_tokens"].get<long long>()) + " tokens");
  if (format == "text") {
    res.set_content(text + "\n", "text/plain; charset=utf-8");
    return;
  }
  json body = {{"text", text}, {"usage", {{"type", "duration"}, {"seconds", seconds}}}};
  if (format == "verbose_json") {
    body = {{"task", "transcribe"},
            {"language", language.empty() ? "unknown" : language},
            {"duration", seconds},
            {"text", text},
            {"segments", json::array({{{"id", 0}, {"start", 0.0}, {"end", seconds}, {"text", text}}})}};
  }
  res.set_content(body.dump(), "application/json");
}

}  // namespace kvshare::server
