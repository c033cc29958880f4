// The geometry the Gemma 4 family reads from GGUF metadata (the target model
// `gemma4`, its assistant drafter `gemma4-assistant` and Gemma 3n `gemma3n`
// write the same keys under their own prefix). Internal to src/model.
#pragma once

#include <string>
#include <vector>

#include "kvshare/gguf/gguf.h"
#include "kvshare/model/model.h"
#include "model/decoder.h"

namespace kvshare::detail {

struct Gemma4Geometry {
  ModelConfig config;                     // every field but n_vocab (from the tensors) and architecture
  std::vector<RopeFamily> rope_families;  // [full, sliding]: NeoX; full layers turn by rope_freqs.weight
  std::vector<int> layer_rope;            // [n_layer]: index into rope_families
};

// Reads `<prefix>block_count`, embedding_length, attention.* (head counts,
// key / value lengths per layer type, sliding window and pattern, rms eps,
// shared_kv_layers), feed_forward_length, rope.* and the rope_freqs tensor.
// Throws kvshare::Error naming the key and the expected value.
Gemma4Geometry ReadGemma4Geometry(const GgufFile& f, const std::string& prefix);

}  // namespace kvshare::detail
