// kvshare/runtime/audio_prompt.h — audio clips in a prompt: resampled,
// turned into the encoder's features and encoded by the mmproj's audio
// tower (kvshare/audio/audio_encoder.h), then spliced where the chat
// template put them (ChatTemplate::Encode's audio_slots) in each family's
// markers as its HF processor writes them (docs/audio.md "Prompt"):
//   gemma3na  "\n\n" <start_of_audio> 188 x <audio_soft_token> <end_of_audio> "\n\n"
//             (always 188 soft tokens; the "\n\n" is padding_text(), written
//             by ChatTemplate::Encode with the neighbouring text; HF embeds
//             <end_of_audio> through the audio embedder's hard path, so its
//             row is part of the span: 189 rows)
//   gemma4a,  <|audio> N x <|audio|> <audio|>, N = 25 per second of the clip
//   gemma4ua
// The rows go to the model as one EmbeddingSpan (model.h) per 30 s chunk,
// causal (HF's mm_token_type_ids mark audio 3, which no bidirectional block
// takes). A clip over 30 s (gemma3na, gemma4a) is cut into independent 30 s
// chunks, each encoded as HF's processor encodes a clip of that length, their
// soft tokens back to back between one pair of markers (llama.cpp's
// mtmd_audio_preprocessor_gemma4a; docs/audio.md "Long clips").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvshare/audio/audio.h"
#include "kvshare/audio/audio_encoder.h"
#include "kvshare/runtime/media_prompt.h"
#include "kvshare/tokenizer/tokenizer.h"

namespace kvshare {

class ThreadPool;

// One clip, encoded.
struct PromptAudio {
  std::vector<float> rows;        // [tokens, n_embd_text]: the spans' rows, chunk after chunk
  int tokens = 0;                 // soft tokens (gemma3na: 188 per chunk, plus its end marker's row in `rows`)
  std::uint64_t key = 0;          // identity for the prompt cache (AudioKey)
  std::vector<int> chunk_tokens;  // soft tokens per chunk, summing to `tokens`; empty: one chunk
};

// The longest clip kvshare takes, in seconds: AudioLimits' 600 s (20 chunks
// of 30 s) for every projector.
double MaxAudioSeconds(AudioProjectorType projector);

// The window a tower encodes at once, in samples at 16 kHz: 480 000 (30 s,
// where HF's processors cut a clip) for gemma3na and gemma4a; 0 (no window:
// one chunk) for gemma4ua's raw frames.
std::size_t AudioChunkSamples(AudioProjectorType projector);

// A 64-bit FNV-1a digest of a clip's samples and rate: equal keys mean the
// same soft tokens.
std::uint64_t AudioKey(const Audio& audio);
// The prompt-cache key of chunk `chunk` of the clip keyed `key` (`key` itself
// for chunk 0).
std::uint64_t AudioChunkKey(std::uint64_t key, std::size_t chunk);

// A clip ready to encode: its chunks' features and the soft tokens they
// will take.
struct PreparedAudio {
  std::vector<AudioFeatures> chunks;  // at 16 kHz: log-mel, or raw frames (gemma4ua)
  std::vector<int> chunk_tokens;      // [chunks.size()]
  int tokens = 0;                     // PromptAudio::tokens once encoded
  std::uint64_t key = 0;

  // The clip's PromptAudio before encoding: tokens, chunks and key, no rows.
  PromptAudio Pending() const { return {.rows = {}, .tokens = tokens, .key = key, .chunk_tokens = chunk_tokens}; }
  // Rows of the clip's largest span (gemma3na's last also holds its end
  // marker's row): what one prompt step must hold.
  int LargestSpan(AudioProjectorType projector) const;
};

// Resamples `audio` to the encoders' 16 kHz, cuts it into AudioChunkSamples
// chunks and computes their features (cheap next to the encoding; callers
// check the token count against their context first). A last chunk too
// short to give a soft token (a few tens of ms) is dropped. Throws kvshare::Error,
// before any resampling, for a clip with a sample rate of 0, no samples, a
// NaN or infinite sample (naming the first), or one longer than
// MaxAudioSeconds (naming its length and the limit); and for a whole clip
// too short for one soft token (naming its length and the shortest taken).
PreparedAudio PrepareAudio(const AudioEncoder& encoder, const Audio& audio, std::uint64_t key);

// Encodes a prepared clip, chunk by chunk (AudioEncoder::PromptTokens;
// gemma3na also its end marker's hard row). Throws what the encoder throws.
PromptAudio EncodePromptAudio(const AudioEncoder& encoder, const PreparedAudio& prepared, ThreadPool* pool);

// PrepareAudio, then EncodePromptAudio.
PromptAudio EncodePromptAudio(const AudioEncoder& encoder, const Audio& audio, std::uint64_t key, ThreadPool* pool);

class AudioSplicer {
 public:
  // Looks up the markers of `projector`'s family in the vocabulary. Throws
  // kvshare::Error naming the first one it lacks (the mmproj does not belong
  // to this text model).
  AudioSplicer(const Tokenizer& tokenizer, AudioProjectorType projector);

  // The clips' tokens for SpliceMedia, clip i at slots[i] (non-decreasing):
  // one span per chunk, chunk j > 0 keyed by AudioChunkKey(key, j). Throws
  // kvshare::Error when slots and clips differ in number, a slot is out of
  // order, a clip has no tokens or its chunks do not sum to its tokens.
  std::vector<MediaInsert> Inserts(std::span<const std::size_t> slots, std::span<const PromptAudio> clips) const;
  // SpliceMedia(ids, Inserts(slots, clips)).
  MediaPrompt Splice(std::span<const std::int32_t> ids, std::span<const std::size_t> slots,
                     std::span<const PromptAudio> clips) const;
  // Text around each clip (ChatTemplateOptions::audio_padding_text): "\n\n"
  // for Gemma 3n, "" for Gemma 4.
  const std::string& padding_text() const { return padding_; }

 private:
  AudioProjectorType projector_;
  std::int32_t begin_ = -1, soft_ = -1, end_ = -1;
  std::string padding_;
};

}  // namespace kvshare
