// kvshare/audio/audio_features.h — the audio encoders' input features, as
// transformers 5.23's feature extractors compute them from a 16 kHz clip
// (docs/audio.md "Features"):
//   Gemma 3n   Gemma3nAudioFeatureExtractor: log-mel, 32 ms periodic Hann
//              window, 10 ms hop, 1024-point FFT, HTK preemphasis 0.97,
//              128 HTK mel bins 125..7600 Hz, ln(max(mel, 1e-5))
//   Gemma 4    Gemma4AudioFeatureExtractor: log-mel, 20 ms window with half
//              a window of zeros in front ("semicausal"), 10 ms hop,
//              512-point FFT, 128 HTK mel bins 0..8000 Hz, ln(mel + 1e-3),
//              invalid frames zeroed
//   unified    Gemma4UnifiedAudioFeatureExtractor: raw 640-sample frames
// Both log-mel extractors pad the clip with zeros to a multiple of 128
// samples and cut it at 480 000 samples (30 s), as the HF processors call
// them; the mask marks frames that start (3n) or end (4) in real samples.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kvshare {

namespace detail {
class RealFft;
}

// Features of one clip: values[frame * n_bins + bin], float32 row-major
// [n_frames, n_bins]; mask[frame] is 1 for frames the encoder treats as
// audio, 0 for padding.
struct AudioFeatures {
  int n_frames = 0;
  int n_bins = 0;
  std::vector<float> values;
  std::vector<std::uint8_t> mask;

  int ValidFrames() const;  // frames with mask 1
};

// Every parameter of the two HF log-mel extractors (their constructor
// arguments, with the released configs' values from the factories below).
struct LogMelConfig {
  int sample_rate = 16000;   // Hz the samples must be at (ResampleAudio first)
  int n_mels = 128;          // feature_size
  int frame_length = 512;    // window, samples
  int hop_length = 160;      // samples
  int fft_length = 1024;     // zero-padded FFT size (>= frame_length)
  double min_hz = 125.0;     // mel filter bank range (HTK mel, triangles in Hz, no area norm)
  double max_hz = 7600.0;
  double preemphasis = 0.97; // 0: none; HTK flavour: y0 = (1 - p) x0, yi = xi - p x(i-1) inside each window
  // Gemma 3n computes its Hann window in float32 arithmetic, Gemma 4 in
  // float64 then rounds it to float32 (the values differ by an ulp).
  bool float32_window = true;
  bool semicausal = false;   // Gemma 4: frame_length / 2 zeros before the clip
  // A frame is valid when its first sample (Gemma 3n) or its last (Gemma 4,
  // counting the semicausal zeros) is a real sample, not padding.
  bool mask_at_frame_end = false;
  // Floor: ln(max(mel, floor)) (Gemma 3n) or ln(mel + floor) (Gemma 4).
  double mel_floor = 1e-5;
  bool floor_is_added = false;
  // Gemma 4 multiplies the features of masked frames by 0.
  bool zero_masked_frames = false;
  int pad_to_multiple = 128;           // samples
  std::int64_t max_samples = 480000;   // longer clips are cut (HF truncation)
  std::vector<double> per_bin_mean;    // optional [n_mels]: features - mean
  std::vector<double> per_bin_stddev;  // optional [n_mels]: then / stddev
};

LogMelConfig Gemma3nLogMelConfig();
LogMelConfig Gemma4LogMelConfig();

// Frames HF gives for `samples` real samples (before padding): Gemma 3n
// (n - 513) / 160 + 1, Gemma 4 (n + 160 - 321) / 160 + 1 on the padded,
// truncated length, never negative.
int LogMelFrameCount(const LogMelConfig& config, std::int64_t samples);

// A log-mel extractor: the window, mel filter bank and FFT plan made once.
// Extract is const and thread-safe. The constructor throws kvshare::Error on
// a config that cannot hold (non-positive sizes, fft_length < frame_length,
// a mel range outside 0..rate/2, per-bin vectors not of n_mels values, a
// zero stddev).
class LogMelExtractor {
 public:
  explicit LogMelExtractor(const LogMelConfig& config);
  ~LogMelExtractor();
  LogMelExtractor(const LogMelExtractor&) = delete;
  LogMelExtractor& operator=(const LogMelExtractor&) = delete;

  const LogMelConfig& config() const { return config_; }
  // The mel filter bank, float64 [fft_length / 2 + 1, n_mels] as HF builds it.
  const std::vector<double>& filters() const { return filters_; }

  // Features of a clip at config().sample_rate (padded and cut as above).
  // A clip shorter than one window gives 0 frames (Gemma 3n below 513
  // samples), not an error. Throws kvshare::Error on an empty clip.
  AudioFeatures Extract(std::span<const float> samples) const;

 private:
  LogMelConfig config_;
  std::vector<double> window_;             // [frame_length]
  std::vector<double> filters_;            // [fft_length / 2 + 1, n_mels]
  std::unique_ptr<detail::RealFft> fft_;   // FFTW plan (audio/fft.h)
};

// Gemma 4 unified: the clip zero-padded to a multiple of `frame` samples,
// as [ceil(n / frame), frame] frames, all valid; no cap on the length.
// Throws kvshare::Error on an empty clip or frame <= 0.
AudioFeatures RawAudioFrames(std::span<const float> samples, int frame = 640);

}  // namespace kvshare
