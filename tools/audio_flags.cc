// The audio flags of `kvshare generate` (audio_flags.h).
#include "audio_flags.h"

#include <chrono>

#include "kvshare/audio/audio.h"
#include "kvshare/common/error.h"

namespace kvshare::cli {

void AddAudioFlags(CLI::App& cmd, AudioFlags& f) {
  cmd.add_option("--audio", f.clips,
                 "An audio clip (WAV, FLAC, MP3, OGG; at most 600 s, encoded in 30 s chunks) put before the prompt text, "
                 "after any --image; repeat for several, in order. Needs --mmproj with an audio encoder");
  cmd.add_option("--audio-precision", f.precision,
                 "Matrix products of the Gemma 3n / Gemma 4 audio encoders: f32, bf16 (bf16 inputs, f32 sums; "
                 "needs AVX-512) or auto (bf16 for F16 / BF16 mmproj matrices on CPUs with native bf16 dot "
                 "products, else f32); docs/audio.md")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}))
      ->capture_default_str();
}

EncodedAudio EncodeAudioFlags(const AudioFlags& f, const std::string& mmproj, const Model& model, ThreadPool* pool) {
  EncodedAudio out;
  if (f.clips.empty()) return out;
  if (mmproj.empty()) throw Error("--audio needs --mmproj PATH: the model's mmproj GGUF with an audio encoder");
  try {
    out.encoder = AudioEncoder::Load(mmproj, {.precision = EncoderPrecisionFromName(f.precision, "audio")});
    CheckAudioMmprojFitsText(out.encoder->config(), model.config().n_embd);
  } catch (const Error& e) {
    throw Error("--mmproj " + mmproj + ": " + e.what());
  }
  // Every clip is decoded and checked before the first is encoded.
  const double limit = MaxAudioSeconds(out.encoder->config().projector);
  std::vector<Audio> decoded;
  for (const std::string& path : f.clips) {
    try {
      decoded.push_back(LoadAudioFile(path, {.max_seconds = limit}));
    } catch (const Error& e) {
      throw Error("--audio " + path + ": " + e.what());
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < decoded.size(); ++i) {
    try {
      out.clips.push_back(EncodePromptAudio(*out.encoder, decoded[i], AudioKey(decoded[i]), pool));
    } catch (const Error& e) {
      throw Error("--audio " + f.clips[i] + ": " + e.what());
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace kvshare::cli
