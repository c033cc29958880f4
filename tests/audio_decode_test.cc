// Decoding and resampling (kvshare/audio/audio.h): every fixture clip (WAV
// PCM16 / PCM24 / float, FLAC, Ogg Vorbis stereo, MP3; 8 to 48 kHz) decoded
// and resampled to 16 kHz against the waveform transformers' load_audio
// gives for it, and every bad input refused with a named error.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "audio_fixture.h"
#include "kvshare/audio/audio.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace {

using testing::AudioDir;
using testing::ReadBytes;

// A PCM16 WAV file with the given header fields and `frames` frames of a ramp.
std::vector<std::uint8_t> Wav(int rate, int channels, int frames) {
  std::vector<std::uint8_t> b;
  auto put = [&b](const void* p, std::size_t n) { b.insert(b.end(), (const std::uint8_t*)p, (const std::uint8_t*)p + n); };
  auto u32 = [&put](std::uint32_t v) { put(&v, 4); };
  auto u16 = [&put](std::uint16_t v) { put(&v, 2); };
  const std::uint32_t data = static_cast<std::uint32_t>(frames * channels * 2);
  put("RIFF", 4), u32(36 + data), put("WAVEfmt ", 8), u32(16), u16(1), u16(static_cast<std::uint16_t>(channels));
  u32(static_cast<std::uint32_t>(rate)), u32(static_cast<std::uint32_t>(rate * channels * 2));
  u16(static_cast<std::uint16_t>(channels * 2)), u16(16), put("data", 4), u32(data);
  for (int i = 0; i < frames * channels; ++i) u16(static_cast<std::uint16_t>((i * 37) & 0x7fff));
  return b;
}

std::string ErrorOf(std::span<const std::uint8_t> bytes, const AudioLimits& limits = {}) {
  try {
    DecodeAudio(bytes, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(AudioDecode, ClipsMatchTransformersLoadAudio) {
  for (const auto& clip : testing::AudioClips()) {
    const std::string name = clip["name"];
    SCOPED_TRACE(name);
    const Audio decoded = LoadAudioFile(AudioDir() + clip["file"].get<std::string>());
    EXPECT_EQ(decoded.sample_rate, clip["rate"].get<int>());
    EXPECT_EQ(decoded.samples.size(), clip["source_frames"].get<std::size_t>());
    const Audio at16k = ResampleAudio(decoded, 16000);
    const std::vector<float> want = testing::ReadF32(AudioDir() + name + ".wave.f32");
    ASSERT_EQ(at16k.samples.size(), want.size());
    // Same libraries as transformers' soundfile backend (libsndfile, libsoxr
    // HQ); the wheels bundle other builds (libsndfile 1.2.2, their own
    // libsoxr), whose float32 rounding may differ: bit-identical here but for
    // the resampled Ogg clip (6e-8).
    EXPECT_LT(testing::MaxAbsDiff(at16k.samples, want), 2e-7);
  }
}

TEST(AudioDecode, StereoIsTheChannelMean) {
  std::vector<std::uint8_t> wav = Wav(16000, 2, 10);
  const Audio audio = DecodeAudio(wav);
  ASSERT_EQ(audio.samples.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    const float left = float((2 * i * 37) & 0x7fff) / 32768.0f, right = float(((2 * i + 1) * 37) & 0x7fff) / 32768.0f;
    EXPECT_EQ(audio.samples[i], (left + right) / 2.0f) << i;
  }
}

TEST(AudioDecode, SameRateIsUnchanged) {
  const Audio in{16000, {0.25f, -0.5f, 0.125f}};
  EXPECT_EQ(ResampleAudio(in, 16000).samples, in.samples);
}

TEST(AudioDecode, ResampledLengthIsTheCeiling) {
  for (int n : {1, 7, 441, 1000}) {
    const Audio out = ResampleAudio(Audio{44100, std::vector<float>(std::size_t(n), 0.1f)}, 16000);
    EXPECT_EQ(out.samples.size(), std::size_t((n * 16000 + 44099) / 44100)) << n;
    const Audio up = ResampleAudio(Audio{8000, std::vector<float>(std::size_t(n), 0.1f)}, 16000);
    EXPECT_EQ(up.samples.size(), std::size_t(2 * n)) << n;
  }
}

TEST(AudioDecode, NamesUnsupportedAndUnknownFormats) {
  const std::string m4a("\0\0\0\x20" "ftypM4A \0\0\0\0", 16);
  EXPECT_NE(ErrorOf({(const std::uint8_t*)m4a.data(), m4a.size()}).find("unsupported audio format: the data is M4A/MP4"),
            std::string::npos);
  const std::string webm("\x1A\x45\xDF\xA3\x01\x02", 6);
  EXPECT_NE(ErrorOf({(const std::uint8_t*)webm.data(), webm.size()}).find("WebM/Matroska"), std::string::npos);
  const std::string aiff("FORM\0\0\0\0AIFF", 12);
  EXPECT_NE(ErrorOf({(const std::uint8_t*)aiff.data(), aiff.size()}).find("AIFF"), std::string::npos);
  const std::string text = "hello, not audio";
  const std::string err = ErrorOf({(const std::uint8_t*)text.data(), text.size()});
  EXPECT_NE(err.find("unknown audio format (first bytes 68 65 6c 6c"), std::string::npos) << err;
  EXPECT_NE(err.find("expected WAV, FLAC, OGG"), std::string::npos) << err;
  EXPECT_NE(ErrorOf({}).find("empty audio data"), std::string::npos);
  EXPECT_EQ(SniffAudioFormat(Wav(16000, 1, 4)), AudioFormat::kWav);
}

TEST(AudioDecode, NamesCorruptAndTruncatedFiles) {
  std::vector<std::uint8_t> flac = ReadBytes(AudioDir() + "fox_16000.flac");
  flac.resize(20);  // the STREAMINFO block cut short
  EXPECT_NE(ErrorOf(flac).find("corrupt FLAC audio: "), std::string::npos) << ErrorOf(flac);
  std::vector<std::uint8_t> ogg = ReadBytes(AudioDir() + "stereo_44100.ogg");
  for (std::size_t i = 28; i < ogg.size(); ++i) ogg[i] ^= 0x5a;  // headers scrambled after the first page's
  EXPECT_NE(ErrorOf(ogg).find("corrupt OGG audio: "), std::string::npos) << ErrorOf(ogg);
  const std::vector<std::uint8_t> wav = Wav(16000, 1, 100);
  const std::vector<std::uint8_t> header_only(wav.begin(), wav.begin() + 20);
  EXPECT_NE(ErrorOf(header_only).find("corrupt WAV audio: "), std::string::npos) << ErrorOf(header_only);
  // An MP3 cut inside its first frame: libsndfile's "File does not exist or
  // is not a regular file (possibly a pipe?)" is replaced by what happened.
  std::vector<std::uint8_t> mp3 = ReadBytes(AudioDir() + "mp3_24000.mp3");
  mp3.resize(60);
  const std::string cut = ErrorOf(mp3);
  EXPECT_NE(cut.find("corrupt MP3 audio: the data (60 bytes) ends before libsndfile could read a whole header or "
                     "frame: the file looks cut short"),
            std::string::npos)
      << cut;
  // A data chunk declared empty with samples after it (an unfinalized
  // recording): named as such, not only "decodes to no samples".
  std::vector<std::uint8_t> unfinalized = wav;
  std::fill(unfinalized.begin() + 40, unfinalized.begin() + 44, 0);
  const std::string empty = ErrorOf(unfinalized);
  EXPECT_NE(empty.find("corrupt WAV audio: its header gives the data chunk a size of 0 bytes, yet 200 bytes follow"),
            std::string::npos)
      << empty;
  const std::vector<std::uint8_t> no_data(wav.begin(), wav.begin() + 44);
  EXPECT_NE(ErrorOf(no_data).find("corrupt WAV audio"), std::string::npos) << ErrorOf(no_data);
}

TEST(AudioDecode, NamesASampleRateOfZero) {
  const std::string err = ErrorOf(Wav(0, 1, 100));
  EXPECT_NE(err.find("corrupt WAV audio"), std::string::npos) << err;
  EXPECT_NE(err.find("sample rate"), std::string::npos) << err;
  try {
    ResampleAudio(Audio{0, {0.1f}}, 16000);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample rate 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ResampleAudio(Audio{16000, {0.1f}}, 0), Error);
}

TEST(AudioDecode, RefusesClipsOverTheLimits) {
  const std::vector<std::uint8_t> wav = Wav(16000, 1, 16000 * 3);  // 3 s
  std::string err = ErrorOf(wav, AudioLimits{.max_seconds = 2.5});
  EXPECT_NE(err.find("WAV clip of 3 s is over the limit of 2.5 s"), std::string::npos) << err;
  err = ErrorOf(wav, AudioLimits{.max_bytes = 1000});
  EXPECT_NE(err.find("is over the limit of 1000 bytes"), std::string::npos) << err;
  EXPECT_EQ(DecodeAudio(wav, AudioLimits{.max_seconds = 3.0}).samples.size(), 48000u);
  // MP3 headers only estimate the length: the decoded length is checked too.
  err = ErrorOf(ReadBytes(AudioDir() + "mp3_24000.mp3"), AudioLimits{.max_seconds = 0.5});
  EXPECT_NE(err.find("MP3 clip of"), std::string::npos) << err;
}

// A pipe (a shell's <(ffmpeg -i clip.m4a -f wav -), /dev/stdin) has no size
// to check first: it is read to its end, up to the limit. It was refused
// with "cannot read audio file '/dev/fd/63': Operation not supported".
TEST(AudioDecode, LoadAudioFileReadsPipes) {
  std::signal(SIGPIPE, SIG_IGN);  // a writer whose reader stopped early gets EPIPE
  const std::vector<std::uint8_t> wav = Wav(16000, 1, 1600);
  const std::string fifo = ::testing::TempDir() + "kvshare_audio_pipe_" + std::to_string(::getpid());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << fifo;
  // LoadAudioFile(fifo, limits) while a thread writes `copies` copies of the
  // clip; the writer never outlives the call, even when the call did not
  // open the pipe (a read end opened without blocking lets it open and write).
  const auto load = [&](int copies, const AudioLimits& limits) {
    std::thread writer([&fifo, &wav, copies] {
      std::ofstream out(fifo, std::ios::binary);
      for (int i = 0; i < copies; ++i)
        out.write(reinterpret_cast<const char*>(wav.data()), std::streamsize(wav.size()));
    });
    std::string error;
    Audio audio;
    try {
      audio = LoadAudioFile(fifo, limits);
    } catch (const Error& e) {
      error = e.what();
    }
    const int fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // held until the writer is done
    writer.join();
    if (fd >= 0) ::close(fd);
    return std::make_pair(audio, error);
  };
  const auto [audio, error] = load(1, {});
  EXPECT_EQ(error, "");
  EXPECT_EQ(audio.samples, DecodeAudio(wav).samples);
  // Over max_bytes: refused after max_bytes + 1 bytes, naming the path.
  const std::string over = load(3, {.max_bytes = wav.size() * 2}).second;
  EXPECT_NE(over.find("'" + fifo + "' of more than " + std::to_string(wav.size() * 2) + " bytes is over the limit"),
            std::string::npos)
      << over;
  std::remove(fifo.c_str());
}

TEST(AudioDecode, LoadAudioFileNamesThePath) {
  try {
    LoadAudioFile("/nonexistent/clip.wav");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'/nonexistent/clip.wav'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvshare
