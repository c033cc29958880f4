// Test helper: decodes an audio file, resamples it to 16 kHz, computes the
// mmproj's features and soft tokens (kvshare/audio), for
// tests/tools/audio_llamacpp_peer.py.
//   audio_encode_dump MMPROJ AUDIO OUT [--floor-max] [--threads N]
//                     [--precision auto|f32|bf16] [--repeat N]
// --floor-max takes ln(max(mel, floor)) for Gemma 4, as llama.cpp does,
// instead of HF's ln(mel + floor); --threads runs on a pool of N threads;
// --precision picks AudioEncoderOptions::precision; --repeat encodes N times
// (for a profiler) and reports the last. Prints the token count,
// the milliseconds the features and the encoder took, the process's CPU
// milliseconds during the encoder (all threads) and the precision it ran at
// (bench/audio_peer.py reads them). Writes OUT as llama.cpp's
// MTMD_DEBUG_EMBEDDINGS dump does: int32 tokens, int32 width, then float32
// [tokens, width].
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sys/resource.h>
#include <string>
#include <vector>

#include "kvshare/audio/audio.h"
#include "kvshare/audio/audio_encoder.h"
#include "kvshare/audio/audio_features.h"
#include "kvshare/common/thread_pool.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: audio_encode_dump MMPROJ AUDIO OUT [--floor-max]\n");
    return 2;
  }
  try {
    bool floor_max = false;
    int threads = 1, repeat = 1;
    kvshare::AudioEncoderOptions options;
    for (int i = 4; i < argc; ++i) {
      if (std::strcmp(argv[i], "--floor-max") == 0) floor_max = true;
      if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = std::atoi(argv[++i]);
      if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
      if (std::strcmp(argv[i], "--precision") == 0 && i + 1 < argc) {
        options.precision = kvshare::EncoderPrecisionFromName(argv[++i], "audio");
      }
    }
    kvshare::ThreadPool pool(threads);
    const auto enc = kvshare::AudioEncoder::Load(argv[1], options);
    const kvshare::Audio audio = kvshare::ResampleAudio(kvshare::LoadAudioFile(argv[2]), 16000);
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    kvshare::AudioFeatures features;
    if (enc->config().projector == kvshare::AudioProjectorType::kGemma4UA) {
      features = kvshare::RawAudioFrames(audio.samples, enc->config().samples_per_token);
    } else {
      kvshare::LogMelConfig c = kvshare::AudioFrontEndFor(enc->config());
      if (floor_max) c.floor_is_added = false;
      features = kvshare::LogMelExtractor(c).Extract(audio.samples);
    }
    const auto cpu_ms = [] {
      rusage u{};
      getrusage(RUSAGE_SELF, &u);
      const auto ms = [](const timeval& v) { return v.tv_sec * 1e3 + v.tv_usec / 1e3; };
      return ms(u.ru_utime) + ms(u.ru_stime);
    };
    const auto t1 = Clock::now();
    for (int r = 1; r < repeat; ++r) enc->Encode(features, &pool);
    const double c1 = cpu_ms();
    const auto t_enc = Clock::now();
    const std::vector<float> tokens = enc->Encode(features, &pool);
    const auto t2 = Clock::now();
    const double c2 = cpu_ms();
    const std::int32_t header[2] = {static_cast<std::int32_t>(tokens.size() / enc->config().n_embd_text),
                                    enc->config().n_embd_text};
    std::FILE* f = std::fopen(argv[3], "wb");
    if (f == nullptr || std::fwrite(header, sizeof(header), 1, f) != 1 ||
        std::fwrite(tokens.data(), sizeof(float), tokens.size(), f) != tokens.size()) {
      std::fprintf(stderr, "cannot write %s\n", argv[3]);
      return 1;
    }
    std::fclose(f);
    const auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    std::printf("tokens %d width %d features_ms %.1f encode_ms %.1f encode_cpu_ms %.1f precision %s\n", header[0],
                header[1], ms(t0, t1), ms(t_enc, t2), c2 - c1, kvshare::EncoderPrecisionName(enc->precision()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
