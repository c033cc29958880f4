// kvshare/audio/audio_encoder.h — the audio encoders, loaded from an mmproj
// GGUF (kvshare/audio/audio_mmproj.h; docs/audio.md "Encoders").
//
// Use: features from the encoder's front end (AudioFrontEndFor(config()) or,
// for gemma4ua, RawAudioFrames(samples, config().samples_per_token)), then
// Encode(features): the soft tokens of the valid frames, [tokens,
// n_embd_text] as the language model's first layer takes them (not scaled by
// sqrt(n_embd)). Runs gemma3na (Gemma 3n's USM conformer and the soft path
// of its embedder), gemma4a (Gemma 4's conformer and embedder) and gemma4ua
// (the unified model's projection). Gemma 3n's prompt always holds 188 audio
// slots: PromptTokens fills those past the clip with its hard token.
//
// Precision (AudioEncoderOptions::precision; docs/audio.md "Precision"): the
// conformer blocks' linears of gemma3na and gemma4a (and gemma4a's output
// projection) run either in float32 (F16 / BF16 weights widened exactly;
// within 1e-5 of HF's float32 forward) or with bf16 inputs and float32
// accumulation (oneDNN: weights and activations rounded to bf16, nearest
// even); everything else (subsampling, norms, attention, convolution, the
// other projections) is float32 either way.
// gemma4ua always runs float32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvshare/audio/audio_features.h"
#include "kvshare/audio/audio_mmproj.h"
#include "kvshare/common/encoder_precision.h"
#include "kvshare/gguf/gguf.h"

namespace kvshare {

class ThreadPool;

// A tower's output for every subsampled frame, valid or not (HF's
// last_hidden_state), and which are valid (HF's output mask).
struct AudioTowerOutput {
  int n_frames = 0;
  int width = 0;
  std::vector<float> values;         // [n_frames, width] row-major
  std::vector<std::uint8_t> mask;    // [n_frames]
};

struct AudioEncoderOptions {
  EncoderPrecision precision = EncoderPrecision::kAuto;
};

class AudioEncoder {
 public:
  // Opens and validates an mmproj file (ReadAudioConfig's errors: not an
  // mmproj, no audio encoder, an unknown projector type, a missing or
  // ill-shaped tensor) and throws kvshare::Error for a tensor of an
  // unsupported type (the SSCP convolutions must be F32), or kBF16 on a CPU
  // without AVX-512.
  static std::unique_ptr<AudioEncoder> Load(const std::string& path, const AudioEncoderOptions& options = {});
  virtual ~AudioEncoder() = default;

  virtual const AudioConfig& config() const = 0;
  // The precision Encode runs at: kF32 or kBF16 (options.precision resolved).
  virtual EncoderPrecision precision() const { return EncoderPrecision::kF32; }

  // The tower alone, before the embedder: gemma4a [frames after the two
  // stride-2 convolutions, n_embd_out]; gemma3na every 4th of those, padded
  // ones zeroed, [ceil(frames / 4), n_embd]; gemma4ua the frames unchanged.
  // Throws kvshare::Error for features of the wrong width (n_bins) or with
  // mask and frame counts that disagree.
  virtual AudioTowerOutput Tower(const AudioFeatures& features, ThreadPool* pool) const = 0;

  // Soft tokens of the valid frames (AudioSoftTokens(config(), features)
  // rows), [tokens, n_embd_text] row-major. Results do not depend on the
  // thread count of `pool` (null: the calling thread).
  virtual std::vector<float> Encode(const AudioFeatures& features, ThreadPool* pool) const = 0;

  // The rows the prompt's audio placeholders take, [rows, n_embd_text]:
  // Encode's soft tokens for gemma4a and gemma4ua; for gemma3na always 188
  // (HF Gemma3nModel.forward: per tower frame the soft token, or for a padded
  // frame the hard token of the last audio vocabulary row, then that hard
  // token up to 188). Throws kvshare::Error as Encode does, and for a
  // gemma3na clip of more than 188 tower frames.
  virtual std::vector<float> PromptTokens(const AudioFeatures& features, ThreadPool* pool) const {
    return Encode(features, pool);
  }

  // gemma3na's hard tokens (ids vocab_offset + row: the end-of-audio marker
  // is row 0): RMSNorm(mm.a.hard_emb_norm)(mm.a.embedding[row]) ->
  // projection -> RMSNorm without weight, [n_embd_text]. Throws
  // kvshare::Error for a row outside 0 .. n_vocab_hard - 1 and for the
  // projector types without hard tokens.
  virtual std::vector<float> HardToken(int row) const;
};

}  // namespace kvshare
