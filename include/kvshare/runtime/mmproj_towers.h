// kvshare/runtime/mmproj_towers.h — the towers an mmproj GGUF holds, loaded
// for a text model: its vision encoder (kvshare/vision/vision_encoder.h)
// unless the file holds only an audio encoder, its audio encoder
// (kvshare/audio/audio_encoder.h) when it has one, and the splicers of their
// families' markers in the model's vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvshare/audio/audio_encoder.h"
#include "kvshare/model/model.h"
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

// Loads the towers of `path` for `model`, whose vocabulary `tokenizer` holds
// (it must outlive the splicers), and installs the towers' hard-token rows
// on `model` (MmprojHardTokenRows; Model::SetHardTokenRows, replacing those
// of an mmproj loaded before; none for the families without hard tokens).
// Throws kvshare::Error, leaving `model` as it was, for what
// VisionEncoder::Load, AudioEncoder::Load, CheckMmprojFitsText,
// CheckAudioMmprojFitsText, the splicers and SetHardTokenRows refuse, except
// an audio part's error beside a working vision tower (audio_error: that
// part installs no rows). `pool` computes the hard-token rows.
MmprojTowers LoadMmprojTowers(const std::string& path, const Tokenizer& tokenizer, Model& model,
                              ThreadPool* pool = nullptr);

// Gemma 3n's hard-token rows (docs/vision.md "Gemma 3n's hard tokens") for a
// model of `n_vocab` ids: a gemma3nv `vision` tower's
// (VisionEncoder::HardTokenRows) for ids [n_vocab - A - V, n_vocab - A), a
// gemma3na `audio` tower's (AudioEncoder::HardToken of every row) for
// [n_vocab - A, n_vocab); V = the vision vocabulary's rows, A = the audio
// one's (mm.a.embedding in the vision tower's file, else the `audio` tower's,
// else V), as the converter pads the text tables (HF: 262400 - 128 - 128 =
// 262144). Null towers and the other families give no range. Throws
// kvshare::Error when a range would start below id 0.
std::vector<HardTokenRows> MmprojHardTokenRows(const VisionEncoder* vision, const AudioEncoder* audio,
                                               std::int64_t n_vocab, ThreadPool* pool = nullptr);

// The CLI's form: installs on `model` the hard-token rows of the mmproj at
// `path`, using the towers already loaded from it (null: loaded here when
// the file has a gemma3nv / gemma3na part; a file of another family installs
// none and changes nothing). Throws kvshare::Error as the loads and
// SetHardTokenRows do.
void InstallMmprojHardTokenRows(const std::string& path, const VisionEncoder* vision, const AudioEncoder* audio,
                                Model& model, ThreadPool* pool = nullptr);

}  // namespace kvshare
