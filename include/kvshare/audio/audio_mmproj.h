// kvshare/audio/audio_mmproj.h — the audio half of an mmproj GGUF as
// llama.cpp's converter writes it (convert_hf_to_gguf.py --mmproj; Gemma 3n's
// as tests/tools/audio_mmproj_fixtures.py writes it, since that converter
// cannot; docs/audio.md "The mmproj"):
//   gemma3na  Gemma 3n's USM conformer (SSCP with cumulative group norm,
//             conformer blocks, every 4th frame kept) + the multimodal
//             embedder: 6.25 tokens per second, the prompt always holds 188
//   gemma4a   Gemma 4's conformer (SSCP with LayerNorm, conformer blocks,
//             output projection) + projection: 25 tokens per second
//   gemma4ua  Gemma 4 unified: no tower, RMSNorm + projection of raw
//             640-sample frames: 25 tokens per second
// Every hyperparameter comes from the tensor shapes where the file has them
// (several keys are dummies); the keys fill in the rest.
#pragma once

#include <cstdint>

#include "kvshare/audio/audio_features.h"
#include "kvshare/gguf/gguf.h"

namespace kvshare {

enum class AudioProjectorType { kGemma3nA, kGemma4A, kGemma4UA };
// "gemma3na", "gemma4a", "gemma4ua".
const char* AudioProjectorTypeName(AudioProjectorType type);

// The audio encoder's geometry, from the mmproj's keys and shapes.
struct AudioConfig {
  AudioProjectorType projector = AudioProjectorType::kGemma4A;
  int n_mel = 0;              // mel bins the tower takes (0: raw frames)
  int samples_per_token = 0;  // gemma4ua: raw samples per soft token (640); 0 otherwise
  int n_embd = 0;             // conformer width (0 for gemma4ua)
  int n_ff = 0;               // conformer FFN width
  int n_layer = 0;            // conformer blocks
  int n_head = 0;
  int head_dim = 0;
  int sscp_channels[2] = {0, 0};  // the two SSCP convolutions' output channels
  int sscp_freq = 0;          // mel bins left after the two stride-2 convolutions
  int conv_kernel = 0;        // light convolution's depthwise kernel (5)
  int n_embd_out = 0;         // tower output width (gemma4a: output_proj's, 1536; else n_embd)
  int n_embd_text = 0;        // soft-token width: the text model's n_embd
  int n_vocab_hard = 0;       // gemma3na: rows of mm.a.embedding (the hard tokens); 0 otherwise
  bool clipped_linears = false;  // gemma4a: X.input_min ... clamp scalars present
  float eps = 1e-6f;
};

// Reads and checks the audio part of an mmproj. Throws kvshare::Error for a
// file that is not an mmproj (general.architecture != "clip" or general.type
// != "mmproj"), one without an audio encoder (clip.has_audio_encoder false or
// no clip.audio.projector_type: audio sent to a model whose projector has
// none), a projector type other than the three (naming it and listing those),
// a missing tensor, or one whose shape does not fit the others (naming the
// expected and actual shape).
AudioConfig ReadAudioConfig(const GgufFile& file);

// Throws kvshare::Error naming both widths unless the soft tokens have the
// text model's embedding width.
void CheckAudioMmprojFitsText(const AudioConfig& config, int text_n_embd);

// The log-mel front end a tower takes (Gemma3nLogMelConfig or
// Gemma4LogMelConfig with n_mels = config.n_mel). Throws kvshare::Error for
// gemma4ua, which takes raw frames (RawAudioFrames(samples, samples_per_token)).
LogMelConfig AudioFrontEndFor(const AudioConfig& config);

// Soft tokens for a clip's features, as the HF processors count them:
// gemma4a the mask decimated by the two stride-2 convolutions, then its valid
// entries (Gemma4Processor.replace_audio_token); gemma3na the same, then
// every 4th (ceil), before HF pads the prompt to 188; gemma4ua one per frame.
int AudioSoftTokens(const AudioConfig& config, const AudioFeatures& features);

}  // namespace kvshare
