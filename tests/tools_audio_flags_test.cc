// `kvshare generate --audio` (tools/audio_flags.h): the clips are encoded in
// order with their keys; every error names the flag and the file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "audio_flags.h"
#include "common_source_path.h"
#include "kvshare/common/error.h"
#include "model_test_util.h"
#include "vision/bf16_matmul.h"

namespace kvshare::cli {
namespace {

std::string Audio(const std::string& name) { return testing::SourceDir() + "/tests/fixtures/audio/" + name; }

AudioFlags Parse(std::vector<std::string> args) {
  CLI::App app{"test"};
  AudioFlags flags;
  AddAudioFlags(app, flags);
  std::vector<const char*> argv = {"kvshare"};
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return flags;
}

TEST(AudioFlags, EncodeTheClipsInOrder) {
  const auto model = Model::Load(testing::SourceDir() + "/tests/fixtures/vision/gemma4.f32.gguf");
  const AudioFlags f = Parse({"--audio", Audio("hello_22050.wav"), "--audio", Audio("fox_16000.flac")});
  const EncodedAudio e = EncodeAudioFlags(f, Audio("gemma4a.mmproj.f32.gguf"), *model, nullptr);
  ASSERT_EQ(e.clips.size(), 2u);
  EXPECT_EQ(e.clips[0].tokens, 23);  // tests/fixtures/audio/gemma4a.json: HF's count for the hello clip
  for (const PromptAudio& a : e.clips) {
    EXPECT_EQ(a.rows.size(), static_cast<std::size_t>(a.tokens) * model->config().n_embd);
  }
  EXPECT_NE(e.clips[0].key, e.clips[1].key);
  EXPECT_TRUE(EncodeAudioFlags(Parse({}), "", *model, nullptr).clips.empty());
}

TEST(AudioFlags, PrecisionPicksTheEncodersPrecision) {
  const auto model = Model::Load(testing::SourceDir() + "/tests/fixtures/vision/gemma4.f32.gguf");
  const std::string mm = Audio("gemma4a.mmproj.f32.gguf");
  EXPECT_EQ(Parse({}).precision, "auto");
  EXPECT_THROW(Parse({"--audio-precision", "fp16"}), CLI::ValidationError);
  // auto keeps the fixture's F32 matrices f32.
  EXPECT_EQ(EncodeAudioFlags(Parse({"--audio", Audio("hello_22050.wav")}), mm, *model, nullptr).encoder->precision(),
            EncoderPrecision::kF32);
  if (!detail::Bf16MatMulSupported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  const AudioFlags f = Parse({"--audio", Audio("hello_22050.wav"), "--audio-precision", "bf16"});
  const EncodedAudio e = EncodeAudioFlags(f, mm, *model, nullptr);
  EXPECT_EQ(e.encoder->precision(), EncoderPrecision::kBF16);
  EXPECT_EQ(e.clips[0].tokens, 23);
}

TEST(AudioFlags, ErrorsNameTheFlagAndFile) {
  const auto model = Model::Load(testing::SourceDir() + "/tests/fixtures/vision/gemma4.f32.gguf");
  const std::string mm = Audio("gemma4a.mmproj.f32.gguf");
  const auto error = [&](std::vector<std::string> args, const std::string& mmproj) {
    return testing::ErrorOf([&] { EncodeAudioFlags(Parse(args), mmproj, *model, nullptr); });
  };
  EXPECT_NE(error({"--audio", "x.wav"}, "").find("--audio needs --mmproj PATH"), std::string::npos);
  EXPECT_NE(error({"--audio", "/nonexistent/x.wav"}, mm).find("--audio /nonexistent/x.wav: "), std::string::npos);
  EXPECT_NE(error({"--audio", testing::SourceDir() + "/README.md"}, mm).find("unknown audio format"),
            std::string::npos);
  // A vision-only mmproj, and one whose markers the text model lacks, name --mmproj.
  const std::string vision = error({"--audio", Audio("hello_22050.wav")},
                                   testing::SourceDir() + "/tests/fixtures/vision/gemma4.mmproj.f32.gguf");
  EXPECT_NE(vision.find("--mmproj "), std::string::npos);
  EXPECT_NE(vision.find("no audio encoder"), std::string::npos);
}

}  // namespace
}  // namespace kvshare::cli
