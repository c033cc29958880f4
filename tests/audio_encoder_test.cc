// The audio encoders (kvshare/audio/audio_encoder.h) against transformers
// 5.23: Gemma 4's and Gemma 3n's towers and embedders on the tiny random
// gemma4a / gemma3na mmproj files (tests/tools/audio_mmproj_fixtures.py)
// given HF's features — a speech clip and random frames with padding at the
// end (3 attention blocks, padded keys and queries); the unified model's
// projection against a plain double reference; thread-count independence;
// the bf16 precision within kBf16Tol; the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "audio_fixture.h"
#include "common_source_path.h"
#include "kvshare/audio/audio_encoder.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "vision/bf16_matmul.h"

namespace kvshare {
namespace {

using testing::AudioDir;

// f32 rounding through 2 conformer blocks of width 32 (HF: float32 torch ops,
// kvshare: float32 MatMul and attention): relative to the largest
// output value.
constexpr double kRelTol = 1e-5;
// bf16 linears (weights and inputs rounded to 2^-8 relative, f32 sums)
// through the same 2 blocks: measured up to 1.05e-2 on these fixtures.
constexpr double kBf16Tol = 3e-2;

double MaxRelDiff(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double scale = 0.0, worst = 0.0;
  for (float w : want) scale = std::max(scale, double(std::abs(w)));
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  return worst / scale;
}

AudioFeatures Features(const std::string& file, const std::string& mask) {
  AudioFeatures f;
  f.values = testing::ReadF32(file);
  f.n_bins = 128;
  f.n_frames = static_cast<int>(f.values.size() / 128);
  for (char c : mask) f.mask.push_back(c == '1');
  return f;
}

// HF's outputs for `prefix` (gemma4a / gemma3na) on the two inputs of
// tests/tools/audio_mmproj_fixtures.py's write_outputs.
void ExpectMatchesHf(const std::string& prefix, const std::string& extractor, int width,
                     EncoderPrecision precision = EncoderPrecision::kAuto, double tol = kRelTol) {
  const auto enc = AudioEncoder::Load(AudioDir() + prefix + ".mmproj.f32.gguf", {.precision = precision});
  // auto keeps the fixtures' F32 matrices f32.
  EXPECT_EQ(enc->precision(), precision == EncoderPrecision::kBF16 ? EncoderPrecision::kBF16 : EncoderPrecision::kF32);
  std::ifstream in(AudioDir() + prefix + ".json");
  ASSERT_TRUE(in);
  const nlohmann::json outs = nlohmann::json::parse(in);
  std::string hello_mask;
  for (const auto& clip : testing::AudioClips()) {
    if (clip["name"] == "hello_22050") hello_mask = clip[extractor]["mask"];
  }
  const AudioFeatures inputs[] = {
      Features(AudioDir() + "hello_22050." + extractor + ".f32", hello_mask),
      Features(AudioDir() + "random.features.f32", std::string(83, '1') + std::string(18, '0'))};
  const char* names[] = {"hello", "random"};
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(prefix + " " + names[i]);
    const nlohmann::json& want = outs[names[i]];
    const AudioTowerOutput tower = enc->Tower(inputs[i], nullptr);
    ASSERT_EQ(tower.n_frames, want["tokens"].get<int>());
    ASSERT_EQ(tower.width, width);
    std::string mask;
    for (auto m : tower.mask) mask += m ? '1' : '0';
    EXPECT_EQ(mask, want["mask"].get<std::string>());
    EXPECT_LT(MaxRelDiff(tower.values, testing::ReadF32(AudioDir() + prefix + "." + names[i] + ".tower.f32")), tol);
    // Soft tokens: HF's embedder output on the valid frames.
    const std::vector<float> all = testing::ReadF32(AudioDir() + prefix + "." + names[i] + ".embed.f32");
    std::vector<float> valid;
    for (int t = 0; t < tower.n_frames; ++t) {
      if (tower.mask[t]) valid.insert(valid.end(), all.begin() + t * 64, all.begin() + (t + 1) * 64);
    }
    const std::vector<float> tokens = enc->Encode(inputs[i], nullptr);
    EXPECT_EQ(tokens.size(), std::size_t(AudioSoftTokens(enc->config(), inputs[i])) * 64);
    EXPECT_LT(MaxRelDiff(tokens, valid), tol);
  }
}

TEST(AudioEncoder, Gemma4aMatchesTransformers) { ExpectMatchesHf("gemma4a", "gemma4", 48); }

TEST(AudioEncoder, Gemma3naMatchesTransformers) { ExpectMatchesHf("gemma3na", "gemma3n", 32); }

TEST(AudioEncoder, PrecisionsAgainstTransformers) {
  ExpectMatchesHf("gemma4a", "gemma4", 48, EncoderPrecision::kF32);
  if (!detail::Bf16MatMulSupported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  ExpectMatchesHf("gemma4a", "gemma4", 48, EncoderPrecision::kBF16, kBf16Tol);
  ExpectMatchesHf("gemma3na", "gemma3n", 32, EncoderPrecision::kBF16, kBf16Tol);
}

// Gemma 3n's prompt rows: the soft tokens of the valid frames, the hard token
// of the last audio row for padded frames and up to 188 (HF
// Gemma3nModel.forward); the hard tokens against HF's embedder.
TEST(AudioEncoder, Gemma3naPromptHas188Rows) {
  const auto enc = AudioEncoder::Load(AudioDir() + "gemma3na.mmproj.f32.gguf");
  const std::vector<float> hard = testing::ReadF32(AudioDir() + "gemma3na.hard.f32");  // rows 0 and 7
  EXPECT_LT(MaxRelDiff(enc->HardToken(0), {hard.begin(), hard.begin() + 64}), kRelTol);
  const std::vector<float> last(hard.begin() + 64, hard.end());
  EXPECT_LT(MaxRelDiff(enc->HardToken(7), last), kRelTol);
  EXPECT_THROW(enc->HardToken(8), Error);
  const AudioFeatures f = Features(AudioDir() + "random.features.f32", std::string(83, '1') + std::string(18, '0'));
  const std::vector<float> rows = enc->PromptTokens(f, nullptr);
  ASSERT_EQ(rows.size(), 188u * 64);
  const std::vector<float> soft =
      testing::ReadF32(AudioDir() + "gemma3na.random.embed.f32");  // 7 frames, the 7th padded
  EXPECT_LT(MaxRelDiff({rows.begin(), rows.begin() + 6 * 64}, {soft.begin(), soft.begin() + 6 * 64}), kRelTol);
  for (int t = 6; t < 188; ++t) {
    ASSERT_EQ(std::vector<float>(rows.begin() + t * 64, rows.begin() + (t + 1) * 64), enc->HardToken(7)) << t;
  }
  const auto g4 = AudioEncoder::Load(AudioDir() + "gemma4a.mmproj.f32.gguf");
  EXPECT_EQ(g4->PromptTokens(f, nullptr), g4->Encode(f, nullptr));
  EXPECT_THROW(g4->HardToken(0), Error);
}

TEST(AudioEncoder, ResultsDoNotDependOnThreads) {
  const AudioFeatures f = Features(AudioDir() + "random.features.f32", std::string(83, '1') + std::string(18, '0'));
  ThreadPool pool(3);
  for (const char* prefix : {"gemma4a", "gemma3na"}) {
    for (EncoderPrecision p : {EncoderPrecision::kF32, EncoderPrecision::kBF16}) {
      if (p == EncoderPrecision::kBF16 && !detail::Bf16MatMulSupported()) continue;
      const auto enc = AudioEncoder::Load(AudioDir() + prefix + ".mmproj.f32.gguf", {.precision = p});
      EXPECT_EQ(enc->Encode(f, nullptr), enc->Encode(f, &pool)) << prefix << " " << EncoderPrecisionName(p);
    }
  }
}

TEST(AudioEncoder, Gemma4uaIsRmsNormThenProjection) {
  const std::string path = testing::SourcePath("tests/fixtures/vision/gemma4_unified.mmproj.f32.gguf");
  const auto enc = AudioEncoder::Load(path);
  ASSERT_EQ(enc->config().samples_per_token, 64);
  std::vector<float> clip(300);
  for (std::size_t i = 0; i < clip.size(); ++i) clip[i] = std::sin(0.05f * i) * 0.3f;
  const AudioFeatures f = RawAudioFrames(clip, 64);
  const std::vector<float> got = enc->Encode(f, nullptr);
  ASSERT_EQ(got.size(), 5u * 64);
  // Plain reference: the weight read from the file, double sums.
  const GgufFile file = GgufFile::Open(path);
  const GgufTensor& w = file.Tensor("mm.a.input_projection.weight");  // ne {64 in, 64 out}, F32
  const float* wf = reinterpret_cast<const float*>(w.data);
  for (int t = 0; t < 5; ++t) {
    const float* x = f.values.data() + t * 64;
    double ms = 0.0;
    for (int i = 0; i < 64; ++i) ms += double(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(ms / 64 + 1e-6);
    for (int o = 0; o < 64; ++o) {
      double acc = 0.0;
      for (int i = 0; i < 64; ++i) acc += wf[o * 64 + i] * (x[i] * inv);
      EXPECT_NEAR(got[t * 64 + o], acc, 1e-5 * (1.0 + std::abs(acc))) << t << " " << o;
    }
  }
}

TEST(AudioEncoder, Refusals) {
  const auto enc = AudioEncoder::Load(AudioDir() + "gemma4a.mmproj.f32.gguf");
  AudioFeatures wrong = RawAudioFrames(std::vector<float>(100, 0.1f), 64);
  try {
    enc->Encode(wrong, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemma4a encoder: features are 2 x 64, expected at least one frame of 128"),
              std::string::npos)
        << e.what();
  }
  const std::string vision = testing::SourcePath("tests/fixtures/vision/gemma3.mmproj.f32.gguf");
  try {
    AudioEncoder::Load(vision);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this model cannot take audio"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvshare
