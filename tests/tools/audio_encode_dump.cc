// Test helper: decodes an audio file, resamples it to 16 kHz, computes the
// mmproj's features and soft tokens (kvshare/audio), for
// tests/tools/audio_llamacpp_peer.py.
//   audio_encode_dump MMPROJ AUDIO OUT [--floor-max]
// --floor-max takes ln(max(mel, floor)) for Gemma 4, as llama.cpp does,
// instead of HF's ln(mel + floor). Writes OUT as llama.cpp's
// MTMD_DEBUG_EMBEDDINGS dump does: int32 tokens, int32 width, then float32
// [tokens, width].
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "kvshare/audio/audio.h"
#include "kvshare/audio/audio_encoder.h"
#include "kvshare/audio/audio_features.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: audio_encode_dump MMPROJ AUDIO OUT [--floor-max]\n");
    return 2;
  }
  try {
    const auto enc = kvshare::AudioEncoder::Load(argv[1]);
    const kvshare::Audio audio = kvshare::ResampleAudio(kvshare::LoadAudioFile(argv[2]), 16000);
    kvshare::AudioFeatures features;
    if (enc->config().projector == kvshare::AudioProjectorType::kGemma4UA) {
      features = kvshare::RawAudioFrames(audio.samples, enc->config().samples_per_token);
    } else {
      kvshare::LogMelConfig c = kvshare::AudioFrontEndFor(enc->config());
      if (argc > 4 && std::strcmp(argv[4], "--floor-max") == 0) c.floor_is_added = false;
      features = kvshare::LogMelExtractor(c).Extract(audio.samples);
    }
    const std::vector<float> tokens = enc->Encode(features, nullptr);
    const std::int32_t header[2] = {static_cast<std::int32_t>(tokens.size() / enc->config().n_embd_text),
                                    enc->config().n_embd_text};
    std::FILE* f = std::fopen(argv[3], "wb");
    if (f == nullptr || std::fwrite(header, sizeof(header), 1, f) != 1 ||
        std::fwrite(tokens.data(), sizeof(float), tokens.size(), f) != tokens.size()) {
      std::fprintf(stderr, "cannot write %s\n", argv[3]);
      return 1;
    }
    std::fclose(f);
    std::printf("tokens %d width %d\n", header[0], header[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
