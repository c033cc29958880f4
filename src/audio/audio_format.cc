// The audio container by its signature (kvshare/audio/audio.h): the four
// formats DecodeAudio reads, and the names of common ones it does not, so the
// error says what the client sent.
#include <cstring>
#include <string>
#include <string_view>

#include "common/str.h"
#include "kvshare/audio/audio.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace {

constexpr const char* kSupported = "WAV, FLAC, OGG (Vorbis, Opus, FLAC) or MP3";

bool StartsWith(std::span<const std::uint8_t> b, std::string_view sig, std::size_t at = 0) {
  return b.size() >= at + sig.size() && std::memcmp(b.data() + at, sig.data(), sig.size()) == 0;
}

// An MPEG audio frame header: 11 sync bits, a version other than the
// reserved 01, a layer other than the reserved 00 (00 is ADTS AAC's).
bool IsMpegAudioFrame(std::span<const std::uint8_t> b) {
  return b.size() >= 4 && b[0] == 0xFF && (b[1] & 0xE0) == 0xE0 && ((b[1] >> 3) & 3) != 1 && ((b[1] >> 1) & 3) != 0 &&
         (b[2] >> 4) != 0xF;  // bitrate index 1111 is invalid
}

// The name of a format DecodeAudio does not read, or "" when unknown.
std::string OtherFormatName(std::span<const std::uint8_t> b) {
  if (StartsWith(b, "ftyp", 4)) return "M4A/MP4";
  if (StartsWith(b, "\x1A\x45\xDF\xA3")) return "WebM/Matroska";
  if (StartsWith(b, "FORM") && (StartsWith(b, "AIFF", 8) || StartsWith(b, "AIFC", 8))) return "AIFF";
  if (StartsWith(b, "RIFF")) return b.size() >= 12 ? detail::Str("RIFF '", std::string_view((const char*)b.data() + 8, 4), "'") : "";
  if (StartsWith(b, ".snd")) return "AU";
  if (StartsWith(b, "caff")) return "CAF";
  if (StartsWith(b, "#!AMR")) return "AMR";
  if (StartsWith(b, "MThd")) return "MIDI";
  if (StartsWith(b, "wvpk")) return "WavPack";
  if (StartsWith(b, "MAC ")) return "Monkey's Audio";
  if (StartsWith(b, "\x30\x26\xB2\x75")) return "WMA/ASF";
  if (b.size() >= 2 && b[0] == 0xFF && (b[1] & 0xF6) == 0xF0) return "AAC (ADTS)";
  if (StartsWith(b, "\x89PNG") || StartsWith(b, "\xFF\xD8\xFF") || StartsWith(b, "GIF8")) return "an image";
  return "";
}

}  // namespace

const char* AudioFormatName(AudioFormat format) {
  switch (format) {
    case AudioFormat::kWav: return "WAV";
    case AudioFormat::kFlac: return "FLAC";
    case AudioFormat::kOgg: return "OGG";
    case AudioFormat::kMp3: return "MP3";
  }
  return "unknown";
}

AudioFormat SniffAudioFormat(std::span<const std::uint8_t> b) {
  if (b.empty()) throw Error(detail::Str("empty audio data: expected a ", kSupported, " file"));
  if ((StartsWith(b, "RIFF") || StartsWith(b, "RF64")) && StartsWith(b, "WAVE", 8)) return AudioFormat::kWav;
  if (StartsWith(b, "fLaC")) return AudioFormat::kFlac;
  if (StartsWith(b, "OggS")) return AudioFormat::kOgg;
  if (StartsWith(b, "ID3") || IsMpegAudioFrame(b)) return AudioFormat::kMp3;
  const std::string other = OtherFormatName(b);
  if (!other.empty()) {
    throw Error(detail::Str("unsupported audio format: the data is ", other, ", expected ", kSupported,
                            " (convert it, e.g. ffmpeg -i in -ar 16000 out.wav)"));
  }
  std::string head;
  for (std::size_t i = 0; i < b.size() && i < 8; ++i) head += detail::Str(i ? " " : "", std::hex, int(b[i] >> 4), int(b[i] & 15));
  throw Error(detail::Str("unknown audio format (first bytes ", head, "): expected ", kSupported));
}

}  // namespace kvshare
