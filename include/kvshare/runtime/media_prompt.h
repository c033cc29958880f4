// kvshare/runtime/media_prompt.h — images and audio clips in a prompt: the
// splice both share. Each item (kvshare/runtime/image_prompt.h's ImageSplicer,
// kvshare/runtime/audio_prompt.h's AudioSplicer) is a run of tokens (its
// markers and placeholder soft tokens) put at its slot in the chat
// template's ids (ChatTemplate::Encode's image_slots / audio_slots), with the
// EmbeddingSpans (model.h) whose rows replace its soft tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvshare/model/model.h"

namespace kvshare {

// A prompt with its images and audio: token ids (a soft token holds its
// family's placeholder id) and the spans whose rows replace them, pointing
// into the encoded items' rows (which must outlive it).
struct MediaPrompt {
  std::vector<std::int32_t> tokens;
  std::vector<EmbeddingSpan> embeddings;  // sorted, disjoint
  std::vector<std::uint64_t> keys;        // [embeddings.size()]: each span's identity for the prompt cache
};

// One item's tokens, ready to be put at `slot`.
struct MediaInsert {
  std::size_t slot = 0;               // index into the template's ids
  std::vector<std::int32_t> tokens;   // markers, soft-token placeholders, text
  std::vector<EmbeddingSpan> spans;   // begin relative to the start of `tokens`
  std::vector<std::uint64_t> keys;    // [spans.size()]
};

// `ids` with every insert's tokens put at its slot. Inserts at the same slot
// keep their order in `inserts` (callers list images before audio clips,
// the order ChatTemplate::Encode writes them at one offset). Throws
// kvshare::Error for a slot past the end of `ids`, or a span outside its
// insert's tokens.
MediaPrompt SpliceMedia(std::span<const std::int32_t> ids, std::span<const MediaInsert> inserts);

}  // namespace kvshare
