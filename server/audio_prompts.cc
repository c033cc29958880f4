// The audio endpoints' instructions (audio_prompts.h).
#include "audio_prompts.h"

#include <string>

namespace kvshare::server {
namespace {

std::string Trim(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

std::string TranscriptionInstruction(const std::string& language) {
  const std::string task =
      language.empty() ? "Transcribe the following speech segment in its original language."
                       : "Transcribe the following speech segment in " + language + " into " + language + " text.";
  return task +
         "\n\nFollow these specific instructions for formatting the answer:\n"
         "* Only output the transcription, with no newlines.\n"
         "* When transcribing numbers, write the digits, i.e. write 1.7 and not one point seven, and write 3 instead "
         "of three.";
}

std::string TranslationInstruction() {
  // The card's {SOURCE_LANGUAGE} is unknown here (OpenAI's translations
  // take no language): "its original language", as the ASR prompt without one.
  return "Transcribe the following speech segment in its original language, then translate it into English.\n"
         "When formatting the answer, first output the transcription in its original language, then one newline, "
         "then output the string 'English: ', then the translation in English.";
}

std::string TranslationText(const std::string& answer) {
  static const std::string kMarker = "English:";
  for (std::size_t at = 0; at < answer.size();) {
    if (answer.compare(at, kMarker.size(), kMarker) == 0) return Trim(answer.substr(at + kMarker.size()));
    at = answer.find('\n', at);
    if (at == std::string::npos) break;
    ++at;
  }
  return Trim(answer);
}

}  // namespace kvshare::server
