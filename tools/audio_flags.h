// The audio flags of `kvshare generate` (--audio, --audio-precision, with --mmproj from
// image_flags.h) and the encoding of the clips it names
// (kvshare/runtime/audio_prompt.h).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "kvshare/audio/audio_encoder.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/audio_prompt.h"

namespace kvshare {
class ThreadPool;
}

namespace kvshare::cli {

struct AudioFlags {
  std::vector<std::string> clips;  // --audio PATH (repeatable, in order)
  std::string precision = "auto";  // --audio-precision auto|f32|bf16
};

void AddAudioFlags(CLI::App& cmd, AudioFlags& flags);

// The audio encoder and the encoded clips of `flags` (none without --audio).
struct EncodedAudio {
  std::unique_ptr<AudioEncoder> encoder;
  std::vector<PromptAudio> clips;
  double seconds = 0;  // decoding, resampling, features and encoding, all clips
};

// Loads the audio tower of `mmproj` (checking it fits `model`) and decodes
// and encodes every --audio. Throws kvshare::Error naming the flag and file
// at fault, before any encoding: --audio without --mmproj, an mmproj without
// an audio encoder or of another model, an unreadable, corrupt, unsupported
// or too long clip.
EncodedAudio EncodeAudioFlags(const AudioFlags& flags, const std::string& mmproj, const Model& model,
                              ThreadPool* pool);

}  // namespace kvshare::cli
