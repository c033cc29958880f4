// POST /v1/audio/translations (OpenAI's shape): the multipart form of
// audio_form.h without `language` or `stream` (OpenAI's API has neither for
// translations), run as a chat request whose user message is the clip then
// the model card's AST instruction into English; the answer is the English
// part of the model's reply (docs/audio.md "Transcriptions and translations").
#include <string>

#include "audio_form.h"
#include "audio_prompts.h"
#include "server_impl.h"

namespace kvshare::server {
namespace {

const AudioFormFields kTranslationFields = {
    .endpoint = "/v1/audio/translations", .read = {"model", "prompt", "response_format", "temperature"}, .without = {}};

}  // namespace

void Server::Impl::HandleTranslation(const httplib::Request& req, httplib::Response& res) {
  CheckReady();
  const AudioForm form = ReadAudioForm(req, kTranslationFields, {.strict = opt.strict_openai});
  AudioSubmission sub = SubmitAudio(res, req, form, TranslationInstruction());
  const std::string answer = AwaitAudioText(sub, "translation", form.seconds);
  // OpenAI's verbose translation names the language it wrote: "english".
  SetAudioAnswer(
      res, form.response_format,
      {.task = "translate", .language = "english", .text = TranslationText(answer), .seconds = form.seconds});
}

}  // namespace kvshare::server
