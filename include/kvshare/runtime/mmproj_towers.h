// kvshare/runtime/mmproj_towers.h — the towers an mmproj GGUF holds, loaded
// for a text model: its vision encoder (kvshare/vision/vision_encoder.h)
// unless the file holds only an audio encoder, its audio encoder
// (kvshare/audio/audio_encoder.h) when it has one, and the splicers of their
// families' markers in the model's vocabulary.
#pragma once

#include <memory>
#include <string>

#include "kvshare/audio/audio_encoder.h"
#include "kvshare/runtime/audio_prompt.h"
#include "kvshare/runtime/image_prompt.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "kvshare/vision/vision_encoder.h"

namespace kvshare {

struct MmprojTowers {
  std::unique_ptr<VisionEncoder> vision;  // null: the file holds only an audio encoder
  std::unique_ptr<ImageSplicer> image_splicer;
  std::unique_ptr<AudioEncoder> audio;    // null: no audio encoder, or audio_error
  std::unique_ptr<AudioSplicer> audio_splicer;
  // Why the file's audio part cannot serve this model, when it has a vision
  // tower that can (images keep working); empty otherwise.
  std::string audio_error;
};

// Loads the towers of `path` for a text model of width `text_n_embd` whose
// vocabulary `tokenizer` holds (it must outlive the splicers). Throws
// kvshare::Error for what VisionEncoder::Load, AudioEncoder::Load,
// CheckMmprojFitsText, CheckAudioMmprojFitsText and the splicers refuse,
// except an audio part's error beside a working vision tower (audio_error).
// `pool` computes Gemma 3n's hard-embedding rows (ImageSplicer).
MmprojTowers LoadMmprojTowers(const std::string& path, const Tokenizer& tokenizer, int text_n_embd,
                              ThreadPool* pool = nullptr);

}  // namespace kvshare
