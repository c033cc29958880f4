// kvshare/vocab.h — the vocabulary of a GGUF file as plain data: what the
// model layer reads from `tokenizer.ggml.*` metadata (ReadVocab, kvshare/model.h)
// and the runtime's Tokenizer (kvshare/tokenizer.h) is built from. Its own
// header so that the model layer's public header names it without including
// the runtime's tokenizer (docs/architecture.md §1: no include climbs a layer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvshare {

// GGUF `tokenizer.ggml.token_type` values (same numbering as SentencePiece).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,  // text is exactly "<0xNN>", NN two upper-case hex digits
};

// The vocabulary as stored in GGUF. All vectors are indexed by token id.
struct VocabData {
  std::vector<std::string> tokens;   // [n_vocab] piece text, UTF-8, non-empty, unique
  std::vector<float> scores;         // [n_vocab] merge priority (higher merges first)
  std::vector<int32_t> token_types;  // [n_vocab] TokenType values 1..6
  // tokenizer.ggml.model: "llama" (SentencePiece BPE by scores) or "gemma4" (BPE
  // by merge rank; see the top of kvshare/tokenizer.h).
  std::string model = "llama";
  // tokenizer.ggml.merges, "gemma4" only (required there, ignored for "llama"):
  // "left right", the two token texts separated by one space; rank = index.
  std::vector<std::string> merges;
  int32_t bos = -1;                  // tokenizer.ggml.bos_token_id (-1: none)
  int32_t eos = -1;                  // tokenizer.ggml.eos_token_id (-1: none)
  int32_t pad = -1;                  // tokenizer.ggml.padding_token_id (-1: none)
  int32_t unk = -1;                  // tokenizer.ggml.unknown_token_id (required)
  bool add_bos = true;               // tokenizer.ggml.add_bos_token
  bool add_eos = false;              // tokenizer.ggml.add_eos_token
  bool add_space_prefix = false;     // tokenizer.ggml.add_space_prefix (Gemma 3: false)
  // End-of-turn token text; its id (if present) is looked up by text, as
  // llama.cpp does. Empty: none.
  std::string end_of_turn_text = "<end_of_turn>";
  std::string start_of_turn_text = "<start_of_turn>";
};

}  // namespace kvshare
