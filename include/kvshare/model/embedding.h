// kvshare/model/embedding.h — sentence embeddings (Model::Embed, model.h).
//
// An embedding is the model's final hidden states (after the output norm)
// pooled over one input's tokens, then the file's dense projections
// (EmbeddingGemma: two, no bias, no activation), then L2-normalized. With
// `dimensions` d it is cut to its first d values and normalized again
// (Matryoshka truncation, as sentence-transformers' truncate_dim with
// normalize_embeddings). docs/serving.md, "Embeddings", has the facts.
#pragma once

#include <optional>
#include <string>

namespace kvshare {

// How the token rows of one input become one vector. The ids are llama.cpp's
// (GGUF `<arch>.pooling_type`: 0 none, 1 mean, 2 cls, 3 last, 4 rank);
// kvshare runs mean and last.
enum class Pooling { kNone = 0, kMean = 1, kLast = 3 };
// "none", "mean", "last"; PoolingFromName throws kvshare::Error naming the
// valid names ("mean", "last").
const char* PoolingName(Pooling pooling);
Pooling PoolingFromName(const std::string& name);

struct EmbedOptions {
  // nullopt: the file's (ModelConfig::pooling); kNone, here or as the
  // file's, is an error naming the option to set.
  std::optional<Pooling> pooling;
  // 0: the full ModelConfig::embedding_dim values; otherwise in
  // [1, embedding_dim]: the first `dimensions`, renormalized.
  int dimensions = 0;
  // Inputs run together as the rows of one step while rows x the longest's
  // tokens stays at most this many (an input longer than that runs alone).
  int step_tokens = 2048;
};

}  // namespace kvshare
