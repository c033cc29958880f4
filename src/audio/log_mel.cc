// The HF log-mel extractors (kvshare/audio/audio_features.h), step for step
// as transformers 5.23 orders them (docs/audio.md "Features"): pad and cut,
// windows of frame_length + 1 samples every hop, preemphasis, HF's float32
// window values, the FFT magnitude, the mel filter bank, the floor and the
// log, all in double (HF runs the window product and the FFT in float32,
// then float64 from the filter bank on), cast to float32 at the end.
#include <algorithm>
#include <cmath>
#include <utility>

#include "audio/fft.h"
#include "common/str.h"
#include "kvshare/audio/audio_features.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace {

using detail::Str;

void CheckConfig(const LogMelConfig& c) {
  if (c.sample_rate <= 0 || c.n_mels <= 0 || c.frame_length <= 0 || c.hop_length <= 0 || c.pad_to_multiple <= 0 ||
      c.max_samples <= 0) {
    throw Error(Str("log-mel config: sample_rate ", c.sample_rate, ", n_mels ", c.n_mels, ", frame_length ",
                    c.frame_length, ", hop_length ", c.hop_length, ", pad_to_multiple ", c.pad_to_multiple,
                    ", max_samples ", c.max_samples, " must all be positive"));
  }
  if (c.fft_length < c.frame_length) {
    throw Error(Str("log-mel config: fft_length ", c.fft_length, " is below frame_length ", c.frame_length));
  }
  if (!(c.min_hz >= 0.0 && c.min_hz < c.max_hz && c.max_hz <= c.sample_rate / 2.0)) {
    throw Error(Str("log-mel config: mel range ", c.min_hz, "..", c.max_hz, " Hz must lie in 0..", c.sample_rate / 2.0,
                    " Hz (half the sample rate) with min < max"));
  }
  if (!(c.mel_floor > 0.0)) throw Error(Str("log-mel config: mel_floor ", c.mel_floor, " must be > 0"));
  for (const auto* v : {&c.per_bin_mean, &c.per_bin_stddev}) {
    if (!v->empty() && v->size() != static_cast<std::size_t>(c.n_mels)) {
      throw Error(Str("log-mel config: per-bin ", v == &c.per_bin_mean ? "mean" : "stddev", " has ", v->size(),
                      " values, expected n_mels = ", c.n_mels));
    }
  }
  for (double s : c.per_bin_stddev) {
    if (!(s != 0.0)) throw Error("log-mel config: a per-bin stddev is 0");
  }
}

double HzToMel(double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); }
double MelToHz(double mel) { return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0); }

// HF create_fb_matrix / mel_filter_bank(mel_scale="htk", norm=None): n_mels
// triangles between mel-spaced corner frequencies, in Hz, peak 1, over the
// FFT bin frequencies k * rate / fft_length (both HF grids give these values
// for the released configs: multiples of 15.625 or 31.25 Hz).
std::vector<double> MelFilters(const LogMelConfig& c) {
  const int bins = c.fft_length / 2 + 1, n = c.n_mels;
  const double m_lo = HzToMel(c.min_hz), m_hi = HzToMel(c.max_hz);
  const double step = (m_hi - m_lo) / (n + 1);  // np.linspace(m_lo, m_hi, n + 2)
  std::vector<double> corner(static_cast<std::size_t>(n) + 2);
  for (int i = 0; i <= n + 1; ++i) corner[i] = MelToHz(i == n + 1 ? m_hi : m_lo + i * step);
  std::vector<double> fb(static_cast<std::size_t>(bins) * n);
  for (int k = 0; k < bins; ++k) {
    const double f = static_cast<double>(k) * c.sample_rate / c.fft_length;
    for (int m = 0; m < n; ++m) {
      const double down = (f - corner[m]) / (corner[m + 1] - corner[m]);
      const double up = (corner[m + 2] - f) / (corner[m + 2] - corner[m + 1]);
      fb[static_cast<std::size_t>(k) * n + m] = std::max(0.0, std::min(down, up));
    }
  }
  return fb;
}

// HF's periodic Hann windows, float32 as HF stores them: Gemma 4's
// window_function (numpy float64, then cast) and Gemma 3n's own, computed in
// float32 arithmetic (0.5 * (1 - cos(2 pi i / n)), cos of the float32
// argument; numpy's float32 cos may differ from it by an ulp). The window's
// rounding matters: it leaks into bins 1e-7 below a frame's peak
// (docs/audio.md "Features").
std::vector<double> HannWindow(int n, bool float32_arithmetic) {
  std::vector<double> w(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (float32_arithmetic) {
      const float t = static_cast<float>(2.0 * M_PI) * static_cast<float>(i) / static_cast<float>(n);
      w[i] = 0.5f * (1.0f - static_cast<float>(std::cos(static_cast<double>(t))));
    } else {
      w[i] = static_cast<float>(0.5 - 0.5 * std::cos(2.0 * M_PI * i / n));
    }
  }
  return w;
}

std::int64_t PaddedLength(const LogMelConfig& c, std::int64_t n) {
  const std::int64_t kept = std::min(n, c.max_samples);
  return (kept + c.pad_to_multiple - 1) / c.pad_to_multiple * c.pad_to_multiple;
}

}  // namespace

int AudioFeatures::ValidFrames() const {
  return static_cast<int>(std::count(mask.begin(), mask.end(), std::uint8_t{1}));
}

LogMelConfig Gemma3nLogMelConfig() { return LogMelConfig{}; }

LogMelConfig Gemma4LogMelConfig() {
  LogMelConfig c;
  c.frame_length = 320;
  c.fft_length = 512;
  c.min_hz = 0.0;
  c.max_hz = 8000.0;
  c.preemphasis = 0.0;
  c.float32_window = false;
  c.semicausal = true;
  c.mask_at_frame_end = true;
  c.mel_floor = 1e-3;
  c.floor_is_added = true;
  c.zero_masked_frames = true;
  return c;
}

int LogMelFrameCount(const LogMelConfig& c, std::int64_t samples) {
  const std::int64_t length = PaddedLength(c, samples) + (c.semicausal ? c.frame_length / 2 : 0);
  const std::int64_t span = length - (c.frame_length + 1);
  return span < 0 ? 0 : static_cast<int>(span / c.hop_length + 1);
}

LogMelExtractor::LogMelExtractor(const LogMelConfig& config) : config_(config) {
  CheckConfig(config_);
  window_ = HannWindow(config_.frame_length, config_.float32_window);
  filters_ = MelFilters(config_);
  fft_ = std::make_unique<detail::RealFft>(config_.fft_length);
}

LogMelExtractor::~LogMelExtractor() = default;

AudioFeatures LogMelExtractor::Extract(std::span<const float> samples) const {
  const LogMelConfig& c = config_;
  if (samples.empty()) throw Error("log-mel features of an empty clip: expected at least one sample");
  const std::int64_t real = std::min<std::int64_t>(static_cast<std::int64_t>(samples.size()), c.max_samples);
  const int lead = c.semicausal ? c.frame_length / 2 : 0;
  // The padded clip with the semicausal zeros in front.
  std::vector<float> x(static_cast<std::size_t>(lead + PaddedLength(c, real)), 0.0f);
  std::copy_n(samples.begin(), real, x.begin() + lead);

  AudioFeatures out;
  out.n_frames = LogMelFrameCount(c, real);
  out.n_bins = c.n_mels;
  out.values.assign(static_cast<std::size_t>(out.n_frames) * c.n_mels, 0.0f);
  out.mask.assign(static_cast<std::size_t>(out.n_frames), 0);
  if (out.n_frames == 0) return out;

  const int fl = c.frame_length, nfft = c.fft_length, bins = nfft / 2 + 1;
  const double p = c.preemphasis;
  std::vector<double> frames(static_cast<std::size_t>(out.n_frames) * nfft, 0.0);
  for (int f = 0; f < out.n_frames; ++f) {
    const float* w = x.data() + static_cast<std::size_t>(f) * c.hop_length;  // frame_length + 1 samples
    double* dst = frames.data() + static_cast<std::size_t>(f) * nfft;
    for (int i = 0; i < fl; ++i) {
      double v = w[i];
      if (p > 0.0) v = i == 0 ? (1.0 - p) * w[0] : w[i] - p * w[i - 1];  // HTK flavour
      dst[i] = v * window_[i];
    }
    const std::int64_t at = static_cast<std::int64_t>(f) * c.hop_length + (c.mask_at_frame_end ? fl - lead : 0);
    out.mask[f] = at < real ? 1 : 0;
  }
  std::vector<double> mag(static_cast<std::size_t>(out.n_frames) * bins);
  fft_->Magnitude(frames.data(), out.n_frames, mag.data());

  std::vector<double> mel(static_cast<std::size_t>(c.n_mels));
  for (int f = 0; f < out.n_frames; ++f) {
    std::fill(mel.begin(), mel.end(), 0.0);
    const double* m = mag.data() + static_cast<std::size_t>(f) * bins;
    for (int k = 0; k < bins; ++k) {
      const double* row = filters_.data() + static_cast<std::size_t>(k) * c.n_mels;
      for (int b = 0; b < c.n_mels; ++b) mel[b] += m[k] * row[b];
    }
    float* dst = out.values.data() + static_cast<std::size_t>(f) * c.n_mels;
    for (int b = 0; b < c.n_mels; ++b) {
      double v = std::log(c.floor_is_added ? mel[b] + c.mel_floor : std::max(mel[b], c.mel_floor));
      if (!c.per_bin_mean.empty()) v -= c.per_bin_mean[b];
      if (!c.per_bin_stddev.empty()) v /= c.per_bin_stddev[b];
      dst[b] = (c.zero_masked_frames && !out.mask[f]) ? 0.0f : static_cast<float>(v);
    }
  }
  return out;
}

AudioFeatures RawAudioFrames(std::span<const float> samples, int frame) {
  if (frame <= 0) throw Error(Str("raw audio frames of ", frame, " samples: expected a positive frame size"));
  if (samples.empty()) throw Error("raw audio frames of an empty clip: expected at least one sample");
  AudioFeatures out;
  out.n_bins = frame;
  out.n_frames = static_cast<int>((samples.size() + frame - 1) / frame);
  out.values.assign(static_cast<std::size_t>(out.n_frames) * frame, 0.0f);
  std::copy(samples.begin(), samples.end(), out.values.begin());
  out.mask.assign(static_cast<std::size_t>(out.n_frames), 1);
  return out;
}

}  // namespace kvshare
