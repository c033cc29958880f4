// kvshare/audio/audio.h — audio as the audio encoders take it: decoding of
// the file formats clients send, and resampling to the model's rate, as
// transformers' load_audio does it (docs/audio.md "Decoding and resampling").
//
// Decoding goes through libsndfile (WAV, FLAC, Ogg Vorbis / Opus, MP3), the
// library transformers' "soundfile" backend uses; resampling through libsoxr
// at its HQ quality, the setting transformers (and librosa.load) use. Every
// failure is a kvshare::Error that names what was wrong (empty, truncated or
// corrupt data; a format that is not one of these, named by its signature
// where known; a clip over AudioLimits; a sample rate of 0) before any sample
// is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvshare/common/error.h"

namespace kvshare {

// Mono audio: samples[i] at time i / sample_rate seconds, nominally in
// [-1, 1] (float; decoded integer PCM is scaled by 1 / 2^(bits-1)).
struct Audio {
  int sample_rate = 0;  // Hz, > 0
  std::vector<float> samples;

  double seconds() const { return sample_rate > 0 ? double(samples.size()) / sample_rate : 0.0; }
};

// What DecodeAudio accepts: a file above max_bytes, or a clip longer than
// max_seconds (by its header's frame count, checked before decoding, and
// again on the decoded length, since MP3 headers only estimate it), is
// refused. The default covers 20 of the 30 s windows Gemma 4's processor
// works in.
struct AudioLimits {
  std::size_t max_bytes = std::size_t{256} << 20;
  double max_seconds = 600.0;
};

// The kvshare::Error of a clip over a length limit (AudioLimits::max_seconds
// here, an encoder's MaxAudioSeconds in PrepareAudio), told apart so that a
// server can answer it as such (OpenAI's audio_too_long).
class AudioTooLong : public Error {
 public:
  using Error::Error;
};

// The container formats DecodeAudio reads.
enum class AudioFormat { kWav, kFlac, kOgg, kMp3 };
const char* AudioFormatName(AudioFormat format);  // "WAV", "FLAC", "OGG", "MP3"

// The format of `bytes` by its signature (RIFF/RF64 WAVE, fLaC, OggS, an ID3
// tag or an MPEG audio frame header). Throws kvshare::Error for empty data
// and for any other signature, naming it where known (e.g. "M4A/MP4",
// "WebM/Matroska", "AIFF", "AAC (ADTS)") and listing the supported formats.
AudioFormat SniffAudioFormat(std::span<const std::uint8_t> bytes);

// Decodes WAV (PCM 8/16/24/32-bit, float, A-law, mu-law), FLAC, Ogg (Vorbis,
// Opus, FLAC) or MP3 bytes at the file's own rate; several channels are
// averaged to one (as load_audio does: the mean, in float32). Throws
// kvshare::Error naming the format and libsndfile's reason for a corrupt or
// truncated file, a header with a sample rate of 0 or no channels, a file or
// clip over `limits`, and an unsupported format (SniffAudioFormat).
Audio DecodeAudio(std::span<const std::uint8_t> bytes, const AudioLimits& limits = {});

// Reads `path` and decodes it (DecodeAudio); the error names the path.
Audio LoadAudioFile(const std::string& path, const AudioLimits& limits = {});

// `audio` at `rate` Hz: unchanged when the rates match, otherwise libsoxr HQ
// (soxr_quality_spec(SOXR_HQ, 0), float32 in and out, the whole clip then a
// flush), padded with zeros or cut to ceil(n * rate / audio.sample_rate)
// samples, as load_audio does. Throws kvshare::Error when either rate is not
// positive ("sample rate 0").
Audio ResampleAudio(const Audio& audio, int rate);

}  // namespace kvshare
