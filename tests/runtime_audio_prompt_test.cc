// Audio clips in a prompt (kvshare/runtime/audio_prompt.h, media_prompt.h):
// the chat template's audio slots and placeholders, each family's markers
// and soft-token counts, the span rows against HF's soft tokens for the same
// clip, the prompt-cache key, the shared splice with images, and the named
// errors before any encoding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "audio_fixture.h"
#include "common_source_path.h"
#include "common_test_util.h"
#include "kvshare/audio/audio.h"
#include "kvshare/common/error.h"
#include "kvshare/gguf/vocab.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/audio_prompt.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/image_prompt.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_test_util.h"

namespace kvshare {
namespace {

using testing::AudioDir;

// The tiny Gemma 4 text model's vocabulary (tests/fixtures/vision/README.md):
// <|audio> 22, <|audio|> 18, <audio|> 23, <|image> 20, <|image|> 17, <image|> 21.
const Tokenizer& Gemma4Tok() {
  static const auto* tok =
      new Tokenizer(ReadVocab(GgufFile::Open(testing::SourceDir() + "/tests/fixtures/vision/gemma4.f32.gguf")));
  return *tok;
}

using testing::ErrorOf;

TEST(AudioPrompt, ChatTemplateWritesAudioSlotsAndPlaceholders) {
  ChatMessage m{"user", "Transcribe this."};
  m.image_at = {0};
  m.audio_at = {0, 10};
  const ChatTemplate tmpl(ChatFormat::kGemma4, Gemma4Tok());
  // FormatChat writes the HF template's placeholders, images first at one
  // offset (Gemma 4 trims each text part).
  const std::string text = FormatChat(ChatFormat::kGemma4, std::span(&m, 1));
  EXPECT_NE(text.find("<|image|><|audio|>Transcribe<|audio|>this."), std::string::npos) << text;
  std::vector<std::size_t> islots, aslots;
  const std::vector<std::int32_t> ids = tmpl.Encode(std::span(&m, 1), {}, &islots, &aslots);
  ASSERT_EQ(islots.size(), 1u);
  ASSERT_EQ(aslots.size(), 2u);
  EXPECT_EQ(islots[0], aslots[0]);
  EXPECT_LT(aslots[0], aslots[1]);
  // Without audio_slots the clips stay placeholder text.
  const std::vector<std::int32_t> plain = tmpl.Encode(std::span(&m, 1), {}, &islots);
  EXPECT_EQ(plain.size(), ids.size() + 2);
  // Offsets out of order are refused, named.
  m.audio_at = {10, 0};
  EXPECT_NE(ErrorOf([&] { tmpl.Encode(std::span(&m, 1), {}, &islots, &aslots); }).find("audio offset 0"),
            std::string::npos);
  // Audio in a system message is refused as images are.
  ChatMessage sys{"system", "x"};
  sys.audio_at = {0};
  EXPECT_NE(ErrorOf([&] { FormatChat(ChatFormat::kGemma, std::span(&sys, 1)); }).find("has images or audio"),
            std::string::npos);
}

TEST(AudioPrompt, Gemma3nPaddingJoinsNeighbouringText) {
  // Gemma 3n's processor writes "\n\n<boa>...<eoa>\n\n": the padding joins the
  // text on each side, and two items in a row share one "\n\n\n\n".
  ChatMessage m{"user", "Hi"};
  m.image_at = {0};
  m.audio_at = {0};
  const ChatTemplate tmpl(ChatFormat::kGemma4, Gemma4Tok());
  std::vector<std::size_t> islots, aslots;
  const auto with =
      tmpl.Encode(std::span(&m, 1), {.image_padding_text = "\n\n", .audio_padding_text = "\n\n"}, &islots, &aslots);
  EXPECT_LT(islots[0], aslots[0]);  // text ("\n\n\n\n") between the image and the clip
  EXPECT_LT(aslots[0], with.size() - 1);
  const auto without = tmpl.Encode(std::span(&m, 1), {}, &islots, &aslots);
  EXPECT_GT(with.size(), without.size());
  EXPECT_EQ(islots[0], aslots[0]);
}

TEST(AudioPrompt, Gemma4SplicesEncodedClipAsCausalSpan) {
  const auto enc = AudioEncoder::Load(AudioDir() + "gemma4a.mmproj.f32.gguf");
  const Audio clip = LoadAudioFile(AudioDir() + "hello_22050.wav");
  const PromptAudio a = EncodePromptAudio(*enc, clip, AudioKey(clip), nullptr);
  ASSERT_EQ(a.tokens, 23);  // gemma4a.json: HF's processor count for this clip
  ASSERT_EQ(a.rows.size(), 23u * 64);
  // HF's soft tokens from HF's features; ours start from the file (features
  // within 1e-4 of HF's float32 ones, docs/audio.md), hence the looser bound.
  const std::vector<float> hf = testing::ReadF32(AudioDir() + "gemma4a.hello.embed.f32");
  EXPECT_LT(testing::MaxRelDiff(a.rows, hf), 1e-3);

  const AudioSplicer splicer(Gemma4Tok(), AudioProjectorType::kGemma4A);
  EXPECT_EQ(splicer.padding_text(), "");
  const std::vector<std::int32_t> ids = {2, 100, 101};
  const std::size_t slots[] = {1};
  const MediaPrompt p = splicer.Splice(ids, slots, std::span(&a, 1));
  ASSERT_EQ(p.tokens.size(), 3u + 25);
  EXPECT_EQ(p.tokens[1], 22);
  for (int i = 0; i < 23; ++i) EXPECT_EQ(p.tokens[2 + i], 18);
  EXPECT_EQ(p.tokens[25], 23);
  EXPECT_EQ(p.tokens[26], 100);
  ASSERT_EQ(p.embeddings.size(), 1u);
  EXPECT_EQ(p.embeddings[0].begin, 2);
  EXPECT_EQ(p.embeddings[0].count, 23);
  EXPECT_FALSE(p.embeddings[0].bidirectional);
  EXPECT_EQ(p.embeddings[0].rows, a.rows.data());
  EXPECT_EQ(p.keys, std::vector<std::uint64_t>{a.key});

  // Slots and clips must agree in number.
  EXPECT_NE(ErrorOf([&] { splicer.Splice(ids, {}, std::span(&a, 1)); }).find("0 audio place(s) but 1"),
            std::string::npos);
}

TEST(AudioPrompt, Gemma3nFillsTheWindowAndItsEndMarkerRow) {
  const auto enc = AudioEncoder::Load(AudioDir() + "gemma3na.mmproj.f32.gguf");
  const Audio clip = LoadAudioFile(AudioDir() + "hello_22050.wav");
  const PromptAudio a = EncodePromptAudio(*enc, clip, AudioKey(clip), nullptr);
  EXPECT_EQ(a.tokens, 188);
  ASSERT_EQ(a.rows.size(), 189u * 64);
  const std::vector<float> end = enc->HardToken(0);
  EXPECT_TRUE(std::equal(end.begin(), end.end(), a.rows.end() - 64));
  // A vocabulary without Gemma 3n's markers: the mmproj is another model's.
  EXPECT_NE(ErrorOf([&] { AudioSplicer(Gemma4Tok(), AudioProjectorType::kGemma3nA); }).find("<start_of_audio>"),
            std::string::npos);
}

TEST(AudioPrompt, KeysFollowTheSamples) {
  Audio a{.sample_rate = 16000, .samples = std::vector<float>(1600, 0.25f)};
  Audio b = a;
  EXPECT_EQ(AudioKey(a), AudioKey(b));
  b.samples[800] = 0.5f;
  EXPECT_NE(AudioKey(a), AudioKey(b));
  b = a;
  b.sample_rate = 8000;
  EXPECT_NE(AudioKey(a), AudioKey(b));
}

TEST(AudioPrompt, NamedErrorsBeforeEncoding) {
  const auto enc = AudioEncoder::Load(AudioDir() + "gemma4a.mmproj.f32.gguf");
  const auto error = [&](const Audio& a) { return ErrorOf([&] { EncodePromptAudio(*enc, a, 0, nullptr); }); };
  EXPECT_NE(error({.sample_rate = 0, .samples = {0.f}}).find("sample rate 0"), std::string::npos);
  EXPECT_NE(error({.sample_rate = 16000, .samples = {}}).find("no samples"), std::string::npos);
  const std::string long_clip = error({.sample_rate = 8000, .samples = std::vector<float>(8000 * 601)});
  EXPECT_NE(long_clip.find("601 s long"), std::string::npos) << long_clip;
  EXPECT_NE(long_clip.find("at most 600 s"), std::string::npos) << long_clip;
  // Non-finite samples (a float WAV can hold them) would make the soft
  // tokens, then the logits, NaN.
  std::vector<float> tone(1600, 0.25f);
  tone[400] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan = error({.sample_rate = 16000, .samples = tone});
  EXPECT_NE(nan.find("sample 400 of 1600 (at 0.025 s) is NaN"), std::string::npos) << nan;
  tone[400] = 0.25f;
  tone[1599] = -std::numeric_limits<float>::infinity();
  EXPECT_NE(error({.sample_rate = 16000, .samples = tone}).find("sample 1599 of 1600"), std::string::npos);
  // Too short for a soft token: named with its length and the least taken,
  // not as the encoder's "0 frames" (1 sample) or a splice's "no soft
  // tokens" (160 samples: one frame, no token after the subsampling).
  for (const std::size_t n : {std::size_t{1}, std::size_t{160}}) {
    const std::string short_clip = error({.sample_rate = 16000, .samples = std::vector<float>(n, 0.1f)});
    EXPECT_NE(short_clip.find("too short for one soft token of the gemma4a encoder"), std::string::npos) << short_clip;
    EXPECT_NE(short_clip.find("send at least 10.0625 ms"), std::string::npos) << short_clip;
  }
  EXPECT_EQ(PrepareAudio(*enc, {.sample_rate = 16000, .samples = std::vector<float>(161, 0.1f)}, 0).tokens, 1);
  // Exactly 30 s is one chunk: 750 tokens.
  const PromptAudio a =
      EncodePromptAudio(*enc, {.sample_rate = 16000, .samples = std::vector<float>(480000)}, 0, nullptr);
  EXPECT_EQ(a.tokens, 750);
  EXPECT_EQ(a.chunk_tokens, std::vector<int>{750});
}

// A deterministic noise clip (each chunk differs from the others).
Audio Noise(int rate, std::size_t n) {
  Audio a{.sample_rate = rate, .samples = std::vector<float>(n)};
  std::uint32_t x = 12345;
  for (float& v : a.samples) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int>(x >> 8) % 2001 - 1000) * 1e-4f;
  }
  return a;
}

TEST(AudioPrompt, Gemma4ChunksLongClipsIntoIndependentWindows) {
  const auto enc = AudioEncoder::Load(AudioDir() + "gemma4a.mmproj.f32.gguf");
  // 31 s: 30 s + 1 s, each chunk encoded on its own (llama.cpp's gemma4a
  // chunks; each HF's processor on that piece).
  const Audio clip = Noise(16000, 16000 * 31);
  const PromptAudio a = EncodePromptAudio(*enc, clip, 7, nullptr);
  ASSERT_EQ(a.chunk_tokens, (std::vector<int>{750, 25}));
  ASSERT_EQ(a.tokens, 775);
  ASSERT_EQ(a.rows.size(), 775u * 64);
  const Audio second{.sample_rate = 16000,
                     .samples = std::vector<float>(clip.samples.begin() + 480000, clip.samples.end())};
  const PromptAudio b = EncodePromptAudio(*enc, second, 0, nullptr);
  ASSERT_EQ(b.rows.size(), 25u * 64);
  EXPECT_TRUE(std::equal(b.rows.begin(), b.rows.end(), a.rows.begin() + 750 * 64));
  EXPECT_FALSE(std::equal(b.rows.begin(), b.rows.end(), a.rows.begin() + 725 * 64));

  // One pair of markers, one span per chunk, each its own cache key.
  const AudioSplicer splicer(Gemma4Tok(), AudioProjectorType::kGemma4A);
  const std::vector<std::int32_t> ids = {2, 100};
  const std::size_t slots[] = {1};
  const MediaPrompt p = splicer.Splice(ids, slots, std::span(&a, 1));
  ASSERT_EQ(p.tokens.size(), 2u + 777);
  EXPECT_EQ(p.tokens[1], 22);
  EXPECT_EQ(p.tokens[777], 23);
  ASSERT_EQ(p.embeddings.size(), 2u);
  EXPECT_EQ(p.embeddings[0].count, 750);
  EXPECT_EQ(p.embeddings[1].begin, 2 + 750);
  EXPECT_EQ(p.embeddings[1].count, 25);
  EXPECT_EQ(p.embeddings[1].rows, a.rows.data() + 750 * 64);
  EXPECT_EQ(p.keys, (std::vector<std::uint64_t>{7, AudioChunkKey(7, 1)}));
  EXPECT_NE(p.keys[0], p.keys[1]);

  // A tail too short for a soft token is dropped: 30 s and 5 samples.
  EXPECT_EQ(PrepareAudio(*enc, Noise(16000, 480005), 0).chunk_tokens, std::vector<int>{750});
  // Chunks that do not sum to the clip's tokens are refused.
  PromptAudio bad = a;
  bad.chunk_tokens.back() = 24;
  EXPECT_NE(ErrorOf([&] { splicer.Splice(ids, slots, std::span(&bad, 1)); }).find("774 soft tokens"),
            std::string::npos);
}

TEST(AudioPrompt, Gemma3nChunksFill188SlotsEach) {
  const auto enc = AudioEncoder::Load(AudioDir() + "gemma3na.mmproj.f32.gguf");
  const PreparedAudio prepared = PrepareAudio(*enc, Noise(16000, 16000 * 31), 3);
  EXPECT_EQ(prepared.chunk_tokens, (std::vector<int>{188, 188}));
  EXPECT_EQ(prepared.LargestSpan(AudioProjectorType::kGemma3nA), 189);  // the end marker's row
  const PromptAudio a = EncodePromptAudio(*enc, prepared, nullptr);
  ASSERT_EQ(a.rows.size(), 377u * 64);
  const std::vector<float> end = enc->HardToken(0);
  EXPECT_TRUE(std::equal(end.begin(), end.end(), a.rows.end() - 64));
}

TEST(AudioPrompt, SpliceMediaKeepsItemOrderAtOneSlot) {
  const float rows[4 * 2] = {};
  MediaInsert image{.slot = 1,
                    .tokens = {20, 17, 21},
                    .spans = {{.begin = 1, .count = 1, .rows = rows, .bidirectional = true}},
                    .keys = {7}};
  MediaInsert audio{
      .slot = 1, .tokens = {22, 18, 18, 23}, .spans = {{.begin = 1, .count = 2, .rows = rows}}, .keys = {9}};
  MediaInsert late{.slot = 0, .tokens = {5}, .spans = {}, .keys = {}};
  const std::vector<std::int32_t> ids = {2, 3};
  const MediaInsert all[] = {image, audio, late};
  const MediaPrompt p = SpliceMedia(ids, all);
  EXPECT_EQ(p.tokens, (std::vector<std::int32_t>{5, 2, 20, 17, 21, 22, 18, 18, 23, 3}));
  ASSERT_EQ(p.embeddings.size(), 2u);
  EXPECT_EQ(p.embeddings[0].begin, 3);
  EXPECT_TRUE(p.embeddings[0].bidirectional);
  EXPECT_EQ(p.embeddings[1].begin, 6);
  EXPECT_EQ(p.embeddings[1].count, 2);
  EXPECT_EQ(p.keys, (std::vector<std::uint64_t>{7, 9}));
  MediaInsert past{.slot = 3, .tokens = {1}};
  EXPECT_NE(ErrorOf([&] { SpliceMedia(ids, std::span(&past, 1)); }).find("past the end"), std::string::npos);
}

}  // namespace
}  // namespace kvshare
