// The instructions the audio endpoints write after the clip: Gemma 3n / 4's
// ASR and AST prompts from Google's model card (docs/audio.md "Prompts"),
// and the English text out of an AST answer.
#pragma once

#include <string>

namespace kvshare::server {

// The ASR prompt, in `language` as the request names it ("English"); empty:
// "in its original language".
std::string TranscriptionInstruction(const std::string& language);

// The AST prompt from the clip's own language into English: the answer is
// the transcription, a newline, "English: ", then the translation.
std::string TranslationInstruction();

// The translation out of an AST answer: what follows the first "English:"
// that starts a line, trimmed; the whole answer, trimmed, when no line
// starts so (a model that answered with the translation alone).
std::string TranslationText(const std::string& answer);

}  // namespace kvshare::server
