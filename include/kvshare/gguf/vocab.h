// kvshare/gguf/vocab.h — the vocabulary of a GGUF file as plain data (gguf
// layer, src/gguf/vocab.cc): what ReadVocab reads from the `tokenizer.ggml.*`
// metadata and the Tokenizer (kvshare/tokenizer/tokenizer.h) is built from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvshare/gguf/gguf.h"

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
  // by merge rank; see the top of kvshare/tokenizer/tokenizer.h).
  std::string model = "llama";
  // tokenizer.ggml.merges, "gemma4" only (required there, ignored for "llama"):
  // "left right", the two token texts separated by one space; rank = index.
  std::vector<std::string> merges;
  int32_t bos = -1;               // tokenizer.ggml.bos_token_id (-1: none)
  int32_t eos = -1;               // tokenizer.ggml.eos_token_id (-1: none)
  int32_t pad = -1;               // tokenizer.ggml.padding_token_id (-1: none)
  int32_t unk = -1;               // tokenizer.ggml.unknown_token_id (required)
  bool add_bos = true;            // tokenizer.ggml.add_bos_token
  bool add_eos = false;           // tokenizer.ggml.add_eos_token
  bool add_space_prefix = false;  // tokenizer.ggml.add_space_prefix (Gemma 3: false)
  // End-of-turn token text; its id (if present) is looked up by text, as
  // llama.cpp does. Empty: none.
  std::string end_of_turn_text = "<end_of_turn>";
  std::string start_of_turn_text = "<start_of_turn>";
};

// The tokenizer.ggml.* metadata as a VocabData. `tokenizer.ggml.model` must be
// "llama" (also when absent) or "gemma4"; "gemma4" requires
// `tokenizer.ggml.merges` and, as llama.cpp loads it, always adds BOS and never a
// space prefix. For both models, as llama.cpp does, the end-of-generation tokens
// <eos>, <end_of_turn>, <turn|> and <|tool_response> are CONTROL whatever type
// the file gives them. Throws kvshare::Error if the vocabulary arrays are
// missing, or naming the key and its value for an unsupported tokenizer model.
VocabData ReadVocab(const GgufFile& file);

}  // namespace kvshare
