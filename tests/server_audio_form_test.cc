// The audio endpoints' pieces without a model (server/audio_form.h,
// server/audio_prompts.h): the one-cue subtitle files and the English text
// out of an AST answer.
#include <gtest/gtest.h>

#include <string>

#include "audio_form.h"
#include "audio_prompts.h"

namespace kvshare::server {
namespace {

TEST(AudioForm, SubtitleFilesHoldOneCueOverTheClip) {
  EXPECT_EQ(SubtitleFile("srt", "Hello there.", 1.0), "1\n00:00:00,000 --> 00:00:01,000\nHello there.\n\n");
  EXPECT_EQ(SubtitleFile("vtt", "Hello there.", 1.0), "WEBVTT\n\n00:00:00.000 --> 00:00:01.000\nHello there.\n\n");
  // Minutes, hours and rounding to the millisecond; the longest clip is 600 s.
  EXPECT_EQ(SubtitleFile("srt", "a", 75.2504), "1\n00:00:00,000 --> 00:01:15,250\na\n\n");
  EXPECT_EQ(SubtitleFile("vtt", "a", 3723.0126), "WEBVTT\n\n00:00:00.000 --> 01:02:03.013\na\n\n");
  EXPECT_EQ(SubtitleFile("srt", "a", kMaxAudioFormSeconds), "1\n00:00:00,000 --> 00:10:00,000\na\n\n");
  // A blank line would end the cue: blank and whitespace-only lines go.
  EXPECT_EQ(SubtitleFile("srt", "\none\n\n \t\ntwo\n", 2), "1\n00:00:00,000 --> 00:00:02,000\none\ntwo\n\n");
}

TEST(AudioPrompts, TranslationTextIsWhatFollowsTheEnglishLine) {
  EXPECT_EQ(TranslationText("Hallo Welt.\nEnglish: Hello world.\n"), "Hello world.");
  EXPECT_EQ(TranslationText("English: Hello world."), "Hello world.");
  // Only a line that starts with the marker; the first such line, and what follows it.
  EXPECT_EQ(TranslationText("Er sagte English: nein\nEnglish: He said no.\nEnglish: again"),
            "He said no.\nEnglish: again");
  // No marker: the whole answer (a model that answered with the translation alone).
  EXPECT_EQ(TranslationText("  Hello world. \n"), "Hello world.");
  EXPECT_EQ(TranslationText(""), "");
  EXPECT_EQ(TranslationText("Bonjour\nEnglish:"), "");
}

TEST(AudioPrompts, InstructionsAreTheModelCardsWithEnglishAsTarget) {
  const std::string ast = TranslationInstruction();
  EXPECT_EQ(ast.substr(0, ast.find('\n')),
            "Transcribe the following speech segment in its original language, then translate it into English.");
  EXPECT_NE(ast.find("then one newline, then output the string 'English: ', then the translation in English."),
            std::string::npos);
  const std::string asr = "Transcribe the following speech segment in German into German text.\n\nFollow";
  EXPECT_EQ(TranscriptionInstruction("German").substr(0, asr.size()), asr);
}

}  // namespace
}  // namespace kvshare::server
