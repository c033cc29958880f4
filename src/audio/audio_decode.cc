// Audio decoding (kvshare/audio/audio.h) through libsndfile, read from memory
// by its virtual I/O. The format is sniffed first (audio_format.cc), so an
// unsupported one is named before libsndfile runs; the clip length is
// checked on the header's frame count before any sample is decoded.
#include <sndfile.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "common/read_file.h"
#include "common/str.h"
#include "kvshare/audio/audio.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace {

using detail::Str;

struct MemoryFile {
  std::span<const std::uint8_t> bytes;
  sf_count_t pos = 0;
};

sf_count_t Length(void* user) { return static_cast<sf_count_t>(static_cast<MemoryFile*>(user)->bytes.size()); }

sf_count_t Seek(sf_count_t offset, int whence, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  const sf_count_t size = static_cast<sf_count_t>(f->bytes.size());
  sf_count_t target = offset;
  if (whence == SEEK_CUR) target += f->pos;
  if (whence == SEEK_END) target += size;
  if (target < 0 || target > size) return -1;
  f->pos = target;
  return f->pos;
}

sf_count_t Read(void* dst, sf_count_t count, void* user) {
  auto* f = static_cast<MemoryFile*>(user);
  const sf_count_t n = std::clamp<sf_count_t>(static_cast<sf_count_t>(f->bytes.size()) - f->pos, 0, count);
  if (n > 0) std::memcpy(dst, f->bytes.data() + f->pos, static_cast<std::size_t>(n));
  f->pos += n;
  return n;
}

sf_count_t Write(const void*, sf_count_t, void*) { return 0; }
sf_count_t Tell(void* user) { return static_cast<MemoryFile*>(user)->pos; }

void CheckLength(const char* format, double frames, int rate, const AudioLimits& limits) {
  const double seconds = frames / rate;
  if (seconds > limits.max_seconds) {
    throw AudioTooLong(Str(format, " clip of ", seconds, " s is over the limit of ", limits.max_seconds,
                           " s: send a shorter clip (or split it)"));
  }
}

// WAV's fmt chunk when libsndfile refuses the file: a client can write a
// header with 0 Hz or 0 channels, and libsndfile's message for those
// ("SF_INFO struct incomplete") does not say which. "" when they look sane.
std::string WavHeaderProblem(std::span<const std::uint8_t> b) {
  auto u32 = [&b](std::size_t at) { return std::uint32_t(b[at]) | std::uint32_t(b[at + 1]) << 8 | std::uint32_t(b[at + 2]) << 16 | std::uint32_t(b[at + 3]) << 24; };
  for (std::size_t at = 12; at + 8 <= b.size();) {
    const std::uint32_t size = u32(at + 4);
    if (std::memcmp(b.data() + at, "fmt ", 4) == 0 && at + 16 <= b.size()) {
      const unsigned channels = b[at + 10] | b[at + 11] << 8;
      const std::uint32_t rate = u32(at + 12);
      if (rate == 0) return "its header gives a sample rate of 0 Hz";
      if (channels == 0) return "its header gives 0 channels";
      return "";
    }
    at += 8 + size + (size & 1);
  }
  return "";
}

// Why a WAV that libsndfile opened decodes to no samples, when its header
// says: a data chunk declared empty with bytes after it is what a recorder
// that never finalized its file (or a writer to a pipe) leaves. "" otherwise.
std::string WavEmptyDataProblem(std::span<const std::uint8_t> b) {
  auto u32 = [&b](std::size_t at) {
    return std::uint32_t(b[at]) | std::uint32_t(b[at + 1]) << 8 | std::uint32_t(b[at + 2]) << 16 |
           std::uint32_t(b[at + 3]) << 24;
  };
  for (std::size_t at = 12; at + 8 <= b.size();) {
    const std::uint32_t size = u32(at + 4);
    if (std::memcmp(b.data() + at, "data", 4) == 0) {
      const std::size_t after = b.size() - at - 8;
      if (size != 0 || after == 0) return "";
      return Str("its header gives the data chunk a size of 0 bytes, yet ", after,
                 " bytes follow (a recording that was never finalized?): rewrite the file, e.g. ",
                 "ffmpeg -i in.wav out.wav");
    }
    at += 8 + std::size_t{size} + (size & 1);
  }
  return "";
}

}  // namespace

Audio DecodeAudio(std::span<const std::uint8_t> bytes, const AudioLimits& limits) {
  const AudioFormat format = SniffAudioFormat(bytes);
  const char* name = AudioFormatName(format);
  if (bytes.size() > limits.max_bytes) {
    throw Error(Str(name, " file of ", bytes.size(), " bytes is over the limit of ", limits.max_bytes, " bytes"));
  }
  MemoryFile file{bytes};
  SF_VIRTUAL_IO io{&Length, &Seek, &Read, &Write, &Tell};
  SF_INFO info{};
  std::unique_ptr<SNDFILE, decltype(&sf_close)> sf(sf_open_virtual(&io, SFM_READ, &info, &file), &sf_close);
  if (!sf) {
    std::string why = format == AudioFormat::kWav ? WavHeaderProblem(bytes) : "";
    if (why.empty()) why = sf_strerror(nullptr);
    // libsndfile's SFE_BAD_FILE, which it also reports when a read from
    // memory comes up short (an MP3 cut inside its first frame): the
    // path-and-pipe wording would send the user looking at the file system.
    if (why.find("File does not exist or is not a regular file") != std::string::npos) {
      why = Str("the data (", bytes.size(),
                " bytes) ends before libsndfile could read a whole header or frame: the file looks cut short");
    }
    throw Error(Str("corrupt ", name, " audio: ", why));
  }
  if (info.samplerate <= 0) throw Error(Str("corrupt ", name, " audio: its header gives a sample rate of ", info.samplerate, " Hz"));
  if (info.channels <= 0) throw Error(Str("corrupt ", name, " audio: its header gives ", info.channels, " channels"));
  CheckLength(name, static_cast<double>(info.frames), info.samplerate, limits);

  // Read in blocks: an MP3 header's frame count is an estimate, and a
  // truncated file ends early; both are taken as what decodes.
  const int channels = info.channels;
  const sf_count_t max_frames = static_cast<sf_count_t>(limits.max_seconds * info.samplerate) + 1;
  Audio audio{info.samplerate, {}};
  std::vector<float> block(std::size_t(4096) * channels);
  for (;;) {
    const sf_count_t got = sf_readf_float(sf.get(), block.data(), 4096);
    if (got <= 0) break;
    for (sf_count_t i = 0; i < got; ++i) {
      const float* frame = block.data() + i * channels;
      if (channels == 1) {
        audio.samples.push_back(frame[0]);
      } else {
        float sum = 0.0f;  // numpy's float32 mean over the channel axis
        for (int c = 0; c < channels; ++c) sum += frame[c];
        audio.samples.push_back(sum / static_cast<float>(channels));
      }
    }
    if (static_cast<sf_count_t>(audio.samples.size()) > max_frames) {
      CheckLength(name, static_cast<double>(audio.samples.size()), info.samplerate, limits);
    }
  }
  if (sf_error(sf.get()) != SF_ERR_NO_ERROR) throw Error(Str("corrupt ", name, " audio: ", sf_strerror(sf.get())));
  if (audio.samples.empty()) {
    const std::string why = format == AudioFormat::kWav ? WavEmptyDataProblem(bytes) : "";
    throw Error(Str("corrupt ", name, " audio: ", why.empty() ? "it decodes to no samples" : why));
  }
  return audio;
}

Audio LoadAudioFile(const std::string& path, const AudioLimits& limits) {
  // A pipe (a shell's <(ffmpeg ... -f wav -), /dev/stdin) is read as a file is.
  const std::vector<std::uint8_t> bytes = detail::ReadFileLimited(
      path, limits.max_bytes,
      {.over =
           [&](const std::string& size) {
             return Error(
                 Str("audio file '", path, "' of ", size, " bytes is over the limit of ", limits.max_bytes, " bytes"));
           },
       .unreadable =
           [&](const std::string& reason) { return Error(Str("cannot read audio file '", path, "': ", reason)); }});
  try {
    return DecodeAudio(bytes, limits);
  } catch (const Error& e) {
    throw Error(Str("audio file '", path, "': ", e.what()));
  }
}

}  // namespace kvshare
