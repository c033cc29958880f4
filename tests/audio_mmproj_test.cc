// The audio mmproj reader (kvshare/audio/audio_mmproj.h) on the fixtures of
// tests/tools/audio_mmproj_fixtures.py (gemma4a as the sdist's converter
// writes it, gemma3na as our script writes it with the converter's names)
// and the unified model's (tests/fixtures/vision/, gemma4ua), and every
// refusal: a text GGUF, a vision-only mmproj, an unknown projector type, a
// missing or ill-shaped tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "audio_fixture.h"
#include "common_source_path.h"
#include "gguf_writer.h"
#include "kvshare/audio/audio_mmproj.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace {

std::string VisionDir() { return testing::SourcePath("tests/fixtures/vision/"); }

template <typename Fn>
std::string ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(AudioMmproj, Gemma4aAsTheConverterWritesIt) {
  const GgufFile f = GgufFile::Open(testing::AudioDir() + "gemma4a.mmproj.f32.gguf");
  const AudioConfig c = ReadAudioConfig(f);
  EXPECT_EQ(c.projector, AudioProjectorType::kGemma4A);
  EXPECT_STREQ(AudioProjectorTypeName(c.projector), "gemma4a");
  EXPECT_EQ(c.n_mel, 128);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.n_ff, 128);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.sscp_channels[0], 128);
  EXPECT_EQ(c.sscp_channels[1], 4);
  EXPECT_EQ(c.sscp_freq, 32);
  EXPECT_EQ(c.conv_kernel, 5);
  EXPECT_EQ(c.n_embd_out, 48);
  EXPECT_EQ(c.n_embd_text, 64);
  EXPECT_TRUE(c.clipped_linears);
  EXPECT_FLOAT_EQ(c.eps, 1e-6f);
  EXPECT_EQ(AudioFrontEndFor(c).frame_length, 320);
  EXPECT_NO_THROW(CheckAudioMmprojFitsText(c, 64));
  const std::string err = ErrorOf([&] { CheckAudioMmprojFitsText(c, 1536); });
  EXPECT_NE(err.find("audio soft tokens of width 64 but the text model's embedding width is 1536"), std::string::npos)
      << err;
}

TEST(AudioMmproj, Gemma3naWithTheConvertersNames) {
  const AudioConfig c = ReadAudioConfig(GgufFile::Open(testing::AudioDir() + "gemma3na.mmproj.f32.gguf"));
  EXPECT_EQ(c.projector, AudioProjectorType::kGemma3nA);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.n_ff, 128);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.sscp_channels[0], 8);
  EXPECT_EQ(c.sscp_channels[1], 4);
  EXPECT_EQ(c.sscp_freq, 32);
  EXPECT_EQ(c.conv_kernel, 5);
  EXPECT_EQ(c.n_embd_out, 32);
  EXPECT_EQ(c.n_embd_text, 64);
  EXPECT_EQ(c.n_vocab_hard, 8);
  EXPECT_FALSE(c.clipped_linears);
  EXPECT_FLOAT_EQ(c.eps, 1e-6f);  // HF's, not the converter's 1e-5
  EXPECT_EQ(AudioFrontEndFor(c).frame_length, 512);
}

TEST(AudioMmproj, Gemma4uaOfTheUnifiedModel) {
  const AudioConfig c = ReadAudioConfig(GgufFile::Open(VisionDir() + "gemma4_unified.mmproj.f32.gguf"));
  EXPECT_EQ(c.projector, AudioProjectorType::kGemma4UA);
  EXPECT_EQ(c.samples_per_token, 64);  // the fixture's; the released model's is 640
  EXPECT_EQ(c.n_embd_text, 64);
  EXPECT_EQ(c.n_mel, 0);
  EXPECT_THROW(AudioFrontEndFor(c), Error);
  EXPECT_EQ(AudioSoftTokens(c, RawAudioFrames(std::vector<float>(1000, 0.1f), 64)), 16);
}

TEST(AudioMmproj, SoftTokenCounts) {
  AudioConfig g4;
  g4.projector = AudioProjectorType::kGemma4A;
  g4.n_mel = 128;
  AudioConfig g3n = g4;
  g3n.projector = AudioProjectorType::kGemma3nA;
  const LogMelExtractor e4(Gemma4LogMelConfig()), e3(Gemma3nLogMelConfig());
  for (double seconds : {1.0, 10.0, 30.0}) {
    const std::vector<float> clip(static_cast<std::size_t>(seconds * 16000), 0.01f);
    // 25 per second (docs/audio.md: 1 s -> 25, 10 s -> 250, 30 s -> 750).
    EXPECT_EQ(AudioSoftTokens(g4, e4.Extract(clip)), static_cast<int>(25 * seconds)) << seconds;
  }
  // Gemma 3n, 30 s: 2997 frames -> 1499 -> 750 -> 188.
  EXPECT_EQ(AudioSoftTokens(g3n, e3.Extract(std::vector<float>(480000, 0.01f))), 188);
  // The processor's count for the fixture clips' masks (Gemma4Processor.replace_audio_token).
  for (const auto& clip : testing::AudioClips()) {
    AudioFeatures f;
    for (char m : clip["gemma4"]["mask"].get<std::string>()) f.mask.push_back(m == '1');
    f.n_frames = static_cast<int>(f.mask.size());
    int t = f.n_frames;
    for (int pass = 0; pass < 2; ++pass) t = t == 0 ? 0 : (t - 1) / 2 + 1;
    EXPECT_LE(AudioSoftTokens(g4, f), t);
  }
}

TEST(AudioMmproj, RefusesFilesWithoutAnAudioEncoder) {
  std::string err = ErrorOf([] { ReadAudioConfig(GgufFile::Open(VisionDir() + "gemma3.mmproj.f32.gguf")); });
  EXPECT_NE(err.find("has no audio encoder"), std::string::npos) << err;
  EXPECT_NE(err.find("this model cannot take audio"), std::string::npos) << err;
  err = ErrorOf([] { ReadAudioConfig(GgufFile::Open(VisionDir() + "gemma3.f32.gguf")); });
  EXPECT_NE(err.find("is not an mmproj file: general.architecture is 'gemma3'"), std::string::npos) << err;
}

// A minimal gemma4a file: the keys and block 0's first tensors, F32 zeros.
std::vector<std::uint8_t> TinyFile(const std::string& type, std::vector<testing::GgufTensorSpec> tensors) {
  testing::GgufSpec s;
  s.kvs = {testing::GgufKv::Str("general.architecture", "clip"), testing::GgufKv::Str("general.type", "mmproj"),
           testing::GgufKv::Bool("clip.has_audio_encoder", true),
           testing::GgufKv::Str("clip.audio.projector_type", type)};
  for (auto& t : tensors) {
    std::uint64_t n = 1;
    for (auto d : t.ne) n *= d;
    t.data.assign(n * 4, 0);
  }
  s.tensors = std::move(tensors);
  return s.Build();
}

std::string ErrorOfFile(const std::vector<std::uint8_t>& bytes) {
  return ErrorOf([&] { ReadAudioConfig(GgufFile::Parse(bytes.data(), bytes.size(), "tiny.gguf")); });
}

// A NaN epsilon would encode every clip as NaN rows.
TEST(AudioMmproj, RefusesANonFiniteNormEpsilon) {
  testing::GgufSpec s;
  s.kvs = {testing::GgufKv::Str("general.architecture", "clip"), testing::GgufKv::Str("general.type", "mmproj"),
           testing::GgufKv::Bool("clip.has_audio_encoder", true),
           testing::GgufKv::Str("clip.audio.projector_type", "gemma4a"),
           testing::GgufKv::F32("clip.audio.attention.layer_norm_epsilon", std::nanf(""))};
  const std::vector<std::uint8_t> bytes = s.Build();
  const std::string err = ErrorOfFile(bytes);
  EXPECT_NE(err.find("clip.audio.attention.layer_norm_epsilon is nan, expected finite and >= 0"), std::string::npos)
      << err;
}

TEST(AudioMmproj, NamesUnsupportedTypesAndBadTensors) {
  std::string err = ErrorOfFile(TinyFile("whisper", {}));
  EXPECT_NE(err.find("audio projector type 'whisper' is not supported (supported: gemma3na, gemma4a, gemma4ua)"),
            std::string::npos)
      << err;
  err = ErrorOfFile(TinyFile("gemma4a", {}));
  EXPECT_NE(err.find("no audio encoder blocks (tensor 'a.blk.0.attn_pre_norm.weight' not found)"), std::string::npos)
      << err;
  err = ErrorOfFile(TinyFile("gemma4a", {{"a.blk.0.attn_pre_norm.weight", {32}}}));
  EXPECT_NE(err.find("a.blk.0.attn_q.weight"), std::string::npos) << err;
  err = ErrorOfFile(TinyFile("gemma4a", {{"a.blk.0.attn_pre_norm.weight", {32}}, {"a.blk.0.attn_q.weight", {32, 16}}}));
  EXPECT_NE(err.find("tensor 'a.blk.0.attn_q.weight' is [32, 16], expected [32, 32]"), std::string::npos) << err;
  err = ErrorOfFile(TinyFile("gemma4a", {{"a.blk.0.attn_pre_norm.weight", {32}},
                                         {"a.blk.0.attn_q.weight", {32, 32}},
                                         {"a.blk.0.per_dim_scale.weight", {12}}}));
  EXPECT_NE(err.find("head size of 12, which does not divide the audio encoder width 32"), std::string::npos) << err;
}

}  // namespace
}  // namespace kvshare
