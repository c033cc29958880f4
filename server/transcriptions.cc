// POST /v1/audio/transcriptions (OpenAI's shape, as vLLM serves it): the
// multipart form of audio_form.h with `language` and `stream`, run as a chat
// request whose user message is the clip then the ASR instruction
// (docs/audio.md "Transcriptions and translations"). `stream=true`:
// server-sent events as OpenAI streams a transcription,
// `transcript.text.delta` per piece of text, then one `transcript.text.done`
// with the whole text and usage.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "audio_form.h"
#include "audio_prompts.h"
#include "connection.h"
#include "openai_response.h"
#include "server_impl.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

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

// OpenAI's fields of a transcription that kvshare takes without effect
// (the model gives no timestamps, log probabilities or speakers).
const AudioFormFields kTranscriptionFields = {
    .endpoint = "/v1/audio/transcriptions",
    .read = {"model", "language", "prompt", "response_format", "temperature", "stream"},
    .without = {"chunking_strategy", "include[]", "timestamp_granularities[]", "known_speaker_names[]",
                "known_speaker_references[]"}};

}  // namespace

void Server::Impl::HandleTranscription(const httplib::Request& req, httplib::Response& res) {
  CheckReady();
  const AudioForm form = ReadAudioForm(req, kTranscriptionFields, {.strict = opt.strict_openai});
  AudioSubmission sub = SubmitAudio(res, req, form, TranscriptionInstruction(form.language));
  const double seconds = form.seconds;
  if (form.stream) {
    auto st = std::make_shared<TranscriptionStream>();
    st->handle = sub.handle;
    st->fd = sub.fd;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // nginx: pass events through unbuffered
    SetEventStream(
        req, res,
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
  const std::string text = AwaitAudioText(sub, "transcription", seconds);
  SetAudioAnswer(res, form.response_format,
                 {.task = "transcribe",
                  .language = form.language.empty() ? "unknown" : form.language,
                  .text = text,
                  .seconds = seconds});
}

}  // namespace kvshare::server
