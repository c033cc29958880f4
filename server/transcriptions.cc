// POST /v1/audio/transcriptions (OpenAI's shape, as vLLM serves it): a
// multipart form with the clip (`file`) and `model`, `language`, `prompt`,
// `response_format` (json | text | verbose_json), `temperature`; run as a
// chat request whose user message is the clip then the transcription
// instruction (docs/audio.md "Transcriptions"). `stream=true`: server-sent
// events as OpenAI streams a transcription, `transcript.text.delta` per piece
// of text, then one `transcript.text.done` with the whole text and usage.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "connection.h"
#include "kvshare/audio/audio.h"
#include "kvshare/common/error.h"
#include "openai_response.h"
#include "request_audio.h"
#include "server_impl.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

std::string Field(const httplib::Request& req, const char* name) {
  return req.has_file(name) ? req.get_file_value(name).content : std::string();
}

// The instruction after the clip: the ASR prompt quoted for Gemma 3n / 4
// from Google's model card and audio guide (docs/audio.md "Transcription
// prompt"), with the request's language when it names one.
std::string Instruction(const std::string& language) {
  const std::string task =
      language.empty() ? "Transcribe the following speech segment in its original language."
                       : "Transcribe the following speech segment in " + language + " into " + language + " text.";
  return task +
         "\n\nFollow these specific instructions for formatting the answer:\n"
         "* Only output the transcription, with no newlines.\n"
         "* When transcribing numbers, write the digits, i.e. write 1.7 and not one point seven, and write 3 instead "
         "of three.";
}

// OpenAI's transcript.text.done usage: tokens in, out and together.
json TokenUsage(const RequestUsage& u) {
  return {{"type", "tokens"},
          {"input_tokens", u.prompt_tokens},
          {"output_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// The state of one streamed transcription, shared with the content provider.
struct TranscriptionStream {
  std::shared_ptr<RequestHandle> handle;
  int fd = -1;
  std::string text;  // released so far
  bool done = false;
  std::int64_t tokens = 0;  // generated, once done
  std::vector<RequestEvent> events;

  // The SSE text of the events that came within `timeout`.
  std::string Collect(std::chrono::milliseconds timeout) {
    events.clear();
    if (!handle->Wait(events, timeout)) return {};
    std::string out;
    for (const RequestEvent& e : events) {
      if (!e.text.empty()) {
        text += e.text;
        out += CompletionFormatter::Sse({{"type", "transcript.text.delta"}, {"delta", e.text}});
      }
      if (!e.finished) continue;
      done = true;
      tokens = e.usage.completion_tokens;
      if (e.error) {
        out += CompletionFormatter::Sse({{"error", {{"message", e.detail}, {"type", "server_error"}}}});
      } else {
        out += CompletionFormatter::Sse(
            {{"type", "transcript.text.done"}, {"text", text}, {"usage", TokenUsage(e.usage)}});
      }
    }
    return out;
  }
};

bool IsTrue(const std::string& v) { return v == "true" || v == "True" || v == "1"; }

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
    throw BadRequest(
        "Invalid 'response_format': expected \"json\", \"text\" or \"verbose_json\", got \"" + format + "\".",
        "response_format", "invalid_value");
  }
  const bool stream = IsTrue(Field(req, "stream"));
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
    throw BadAudio(ra.param, e);
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
  const int fd = FindConnectionSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  in_flight.fetch_add(1);
  if (stream) {
    auto st = std::make_shared<TranscriptionStream>();
    st->handle = sub.handle;
    st->fd = fd;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // nginx: pass events through unbuffered
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](std::size_t, httplib::DataSink& sink) {
          const std::string out = st->Collect(std::chrono::milliseconds(20));
          return PumpEvents(sink, out, st->done, st->fd, [&] { st->handle->Cancel(); });
        },
        [this, st, seconds](bool) {
          if (!st->done) st->handle->Cancel();
          Log("transcription stream: " + std::to_string(seconds) + " s of audio, " + std::to_string(st->tokens) +
              " tokens" + (st->done ? "" : ", client gone"));
          in_flight.fetch_sub(1);
        });
    return;
  }
  CompletionFormatter fmt(cr, "transcription", 0, ctx.model_id, *tok);
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
