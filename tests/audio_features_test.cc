// The feature extractors (kvshare/audio/audio_features.h) against
// transformers 5.23's on the fixture clips (tests/tools/audio_fixtures.py:
// espeak-ng speech, 8 to 48 kHz, WAV / FLAC / Ogg / MP3), both from HF's
// 16 kHz waveform and end to end from the encoded file; the FFT against a
// plain double DFT; frame counts, masks, truncation and config errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "audio/fft.h"
#include "audio_fixture.h"
#include "kvshare/audio/audio.h"
#include "kvshare/audio/audio_features.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace {

using testing::AudioDir;

std::string MaskString(const AudioFeatures& f) {
  std::string s;
  for (std::uint8_t m : f.mask) s += m ? '1' : '0';
  return s;
}

// The bound against HF's float32 output (docs/audio.md "Features"): 1e-4 in
// every bin within 60 dB of its frame's loudest (mel >= peak / 1000). Below
// that, HF's own float32 rounding (window, FFT: about one float32 ulp of the
// frame's peak, `ulp_of_peak`) dominates, seen through the log of a bin e^r
// times smaller than the peak: 1e-4 + ulp_of_peak * e^r.
void ExpectMatchesHf(const AudioFeatures& got, const nlohmann::json& want, const std::string& file,
                     double ulp_of_peak, double loud_tol = 1e-4) {
  EXPECT_EQ(got.n_frames, want["frames"].get<int>());
  EXPECT_EQ(got.n_bins, 128);
  EXPECT_EQ(MaskString(got), want["mask"].get<std::string>());
  const std::vector<float> hf = testing::ReadF32(file);
  ASSERT_EQ(got.values.size(), hf.size());
  double worst_loud = 0.0;
  for (int f = 0; f < got.n_frames; ++f) {
    const float* h = hf.data() + std::size_t(f) * 128;
    const float peak = *std::max_element(h, h + 128);
    for (int b = 0; b < 128; ++b) {
      const double r = peak - h[b], diff = std::abs(double(got.values[std::size_t(f) * 128 + b]) - h[b]);
      if (r < std::log(1000.0)) worst_loud = std::max(worst_loud, diff);
      ASSERT_LE(diff, 1e-4 + ulp_of_peak * std::exp(r)) << "frame " << f << " bin " << b << " (" << r << " below the peak)";
    }
  }
  EXPECT_LT(worst_loud, loud_tol);
}

TEST(AudioFeatures, MatchTransformersOnHfWaveforms) {
  const LogMelExtractor g3n(Gemma3nLogMelConfig()), g4(Gemma4LogMelConfig());
  for (const auto& clip : testing::AudioClips()) {
    const std::string name = clip["name"];
    SCOPED_TRACE(name);
    const std::vector<float> wave = testing::ReadF32(AudioDir() + name + ".wave.f32");
    ExpectMatchesHf(g3n.Extract(wave), clip["gemma3n"], AudioDir() + name + ".gemma3n.f32", 1e-7);
    const AudioFeatures f4 = g4.Extract(wave);
    ExpectMatchesHf(f4, clip["gemma4"], AudioDir() + name + ".gemma4.f32", 1e-7);
    // Gemma 4's steps in float64 (HF's code on a float64 clip): the same math,
    // bit for bit here; 1e-5 leaves room for FFTW's SIMD paths on other CPUs.
    EXPECT_LT(testing::MaxAbsDiff(f4.values, testing::ReadF32(AudioDir() + name + ".gemma4.f64.f32")), 1e-5);
    const AudioFeatures raw = RawAudioFrames(wave);
    EXPECT_EQ(raw.n_frames, (static_cast<int>(wave.size()) + 639) / 640);
    EXPECT_EQ(raw.ValidFrames(), raw.n_frames);
  }
}

TEST(AudioFeatures, MatchTransformersFromTheEncodedFiles) {
  const LogMelExtractor g3n(Gemma3nLogMelConfig()), g4(Gemma4LogMelConfig());
  for (const auto& clip : testing::AudioClips()) {
    const std::string name = clip["name"];
    SCOPED_TRACE(name);
    const Audio audio = ResampleAudio(LoadAudioFile(AudioDir() + clip["file"].get<std::string>()), 16000);
    // The waveforms are HF's bit for bit but for the resampled Ogg clip,
    // where the two libsoxr builds' float32 rounding differs by up to 6e-8
    // (audio_decode_test): in its quiet frames that moves loud bins by up to
    // 3e-4.
    const double loud = name == "stereo_44100" ? 5e-4 : 1e-4;
    ExpectMatchesHf(g3n.Extract(audio.samples), clip["gemma3n"], AudioDir() + name + ".gemma3n.f32", 1e-5, loud);
    ExpectMatchesHf(g4.Extract(audio.samples), clip["gemma4"], AudioDir() + name + ".gemma4.f32", 1e-5, loud);
  }
}

// The FFT magnitude against a plain DFT in double, on random frames, at the
// extractors' sizes and odd ones.
TEST(AudioFeatures, FftMatchesAPlainDft) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int n : {1, 2, 54, 97, 512, 1024}) {
    const detail::RealFft fft(n);
    const int count = 3, bins = n / 2 + 1;
    std::vector<double> in(std::size_t(count) * n), out(std::size_t(count) * bins);
    for (double& v : in) v = u(rng);
    fft.Magnitude(in.data(), count, out.data());
    for (int f = 0; f < count; ++f) {
      for (int k = 0; k < bins; ++k) {
        double re = 0, im = 0;
        for (int t = 0; t < n; ++t) {
          re += in[f * n + t] * std::cos(2 * M_PI * k * t / n);
          im -= in[f * n + t] * std::sin(2 * M_PI * k * t / n);
        }
        EXPECT_NEAR(out[f * bins + k], std::hypot(re, im), 1e-9 * n) << n << " " << f << " " << k;
      }
    }
  }
}

TEST(AudioFeatures, FrameCountsAndMasks) {
  const LogMelConfig g3n = Gemma3nLogMelConfig(), g4 = Gemma4LogMelConfig();
  // 30 s: 2997 (3n) and 2999 (4) frames (docs/audio.md); longer clips are cut there.
  EXPECT_EQ(LogMelFrameCount(g3n, 480000), 2997);
  EXPECT_EQ(LogMelFrameCount(g4, 480000), 2999);
  EXPECT_EQ(LogMelFrameCount(g3n, 10 * 480000), 2997);
  EXPECT_EQ(LogMelFrameCount(g3n, 512), 0);  // padded to 512: under one 513-sample window
  EXPECT_EQ(LogMelFrameCount(g3n, 513), 1);  // padded to 640
  EXPECT_EQ(LogMelFrameCount(g4, 1), 0);     // 128 + 160 zeros: under one 321-sample window
  EXPECT_EQ(LogMelFrameCount(g4, 129), 1);   // 256 + 160
  const LogMelExtractor e3(g3n), e4(g4);
  std::vector<float> clip(16000 * 2 + 77);
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  for (float& v : clip) v = noise(rng);
  for (const LogMelExtractor* e : {&e3, &e4}) {
    const AudioFeatures f = e->Extract(clip);
    EXPECT_EQ(f.n_frames, LogMelFrameCount(e->config(), std::int64_t(clip.size())));
    // Valid frames: those whose mask sample (start, or end of the window) is real.
    const int lead = e->config().semicausal ? e->config().frame_length / 2 : 0;
    const int offset = e->config().mask_at_frame_end ? e->config().frame_length - lead : 0;
    for (int i = 0; i < f.n_frames; ++i) EXPECT_EQ(f.mask[i], i * 160 + offset < int(clip.size()) ? 1 : 0) << i;
  }
  const AudioFeatures f4 = e4.Extract(clip);  // Gemma 4 zeroes its invalid frames
  for (int i = 0; i < f4.n_frames; ++i) {
    if (!f4.mask[i]) {
      EXPECT_EQ(f4.values[std::size_t(i) * 128], 0.0f) << i;
    }
  }
}

TEST(AudioFeatures, LongClipsAreCutAt30Seconds) {
  const LogMelExtractor e3(Gemma3nLogMelConfig());
  std::vector<float> clip(480000 + 5000, 0.01f);
  const AudioFeatures cut = e3.Extract(clip);
  EXPECT_EQ(cut.n_frames, 2997);
  EXPECT_EQ(cut.ValidFrames(), 2997);
  clip.resize(480000);
  EXPECT_EQ(e3.Extract(clip).values, cut.values);
}

TEST(AudioFeatures, SilenceGivesTheFloor) {
  const std::vector<float> silence(4000, 0.0f);
  const AudioFeatures f3 = LogMelExtractor(Gemma3nLogMelConfig()).Extract(silence);
  for (float v : f3.values) ASSERT_FLOAT_EQ(v, std::log(1e-5f));
  const AudioFeatures f4 = LogMelExtractor(Gemma4LogMelConfig()).Extract(silence);
  for (int i = 0; i < f4.n_frames; ++i) {
    if (f4.mask[i]) {
      ASSERT_FLOAT_EQ(f4.values[std::size_t(i) * 128 + 5], std::log(1e-3f));
    }
  }
}

TEST(AudioFeatures, PerBinNormalization) {
  LogMelConfig c = Gemma3nLogMelConfig();
  const std::vector<float> silence(4000, 0.0f);
  c.per_bin_mean.assign(128, 1.0);
  c.per_bin_stddev.assign(128, 2.0);
  const AudioFeatures f = LogMelExtractor(c).Extract(silence);
  EXPECT_FLOAT_EQ(f.values[3], float((std::log(1e-5) - 1.0) / 2.0));
}

TEST(AudioFeatures, RawFramesPadTheLastFrame) {
  const std::vector<float> clip(1000, 0.5f);
  const AudioFeatures f = RawAudioFrames(clip);
  ASSERT_EQ(f.n_frames, 2);
  EXPECT_EQ(f.n_bins, 640);
  EXPECT_EQ(f.values[999], 0.5f);
  EXPECT_EQ(f.values[1000], 0.0f);
  EXPECT_THROW(RawAudioFrames({}), Error);
  EXPECT_THROW(RawAudioFrames(clip, 0), Error);
}

TEST(AudioFeatures, BadConfigsAndClipsAreNamed) {
  LogMelConfig c = Gemma3nLogMelConfig();
  c.fft_length = 256;
  EXPECT_THROW(LogMelExtractor{c}, Error);
  c = Gemma4LogMelConfig();
  c.max_hz = 9000;
  try {
    LogMelExtractor e(c);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mel range 0..9000 Hz must lie in 0..8000 Hz"), std::string::npos) << e.what();
  }
  c = Gemma3nLogMelConfig();
  c.sample_rate = 0;
  EXPECT_THROW(LogMelExtractor{c}, Error);
  c = Gemma3nLogMelConfig();
  c.per_bin_mean.assign(3, 0.0);
  EXPECT_THROW(LogMelExtractor{c}, Error);
  EXPECT_THROW(LogMelExtractor(Gemma3nLogMelConfig()).Extract({}), Error);
}

}  // namespace
}  // namespace kvshare
