// Test helper: decodes an audio file, resamples it to 16 kHz, computes the
// mmproj's features and soft tokens (kvshare/audio), for
// tests/tools/audio_llamacpp_peer.py.
//   audio_encode_dump MMPROJ AUDIO OUT [--floor-max] [--threads N]
// --floor-max takes ln(max(mel, floor)) for Gemma 4, as llama.cpp does,
// instead of HF's ln(mel + floor); --threads runs on a pool of N threads.
// Prints the token count and the milliseconds the features and the encoder
// took (a first look, not the benchmark). Writes OUT as llama.cpp's
// MTMD_DEBUG_EMBEDDINGS dump does: int32 tokens, int32 width, then float32
// [tokens, width].
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
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
    int threads = 1;
    for (int i = 4; i < argc; ++i) {
      if (std::strcmp(argv[i], "--floor-max") == 0) floor_max = true;
      if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = std::atoi(argv[++i]);
    }
    kvshare::ThreadPool pool(threads);
    const auto enc = kvshare::AudioEncoder::Load(argv[1]);
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
    const auto t1 = Clock::now();
    const std::vector<float> tokens = enc->Encode(features, &pool);
    const auto t2 = Clock::now();
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
    std::printf("tokens %d width %d features_ms %.1f encode_ms %.1f\n", header[0], header[1], ms(t0, t1), ms(t1, t2));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
