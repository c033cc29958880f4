// Test helper: a synthetic vocabulary for the tiny random models
// (model_tiny_gemma.h): <pad> <eos> <bos> <unk>, then one-character pieces
// '4', '5', ... so every id >= 4 decodes to exactly one character.
#pragma once

#include <cstdint>

#include "kvshare/tokenizer/tokenizer.h"

namespace kvshare::testing {

inline VocabData TinyVocab(int n_vocab) {
  VocabData v;
  for (const char* s : {"<pad>", "<eos>", "<bos>", "<unk>"}) {
    v.tokens.emplace_back(s);
    v.token_types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  for (int i = 4; i < n_vocab; ++i) {
    v.tokens.emplace_back(1, static_cast<char>('0' + i));
    v.token_types.push_back(static_cast<int32_t>(TokenType::kNormal));
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  v.pad = 0;
  v.eos = 1;
  v.bos = 2;
  v.unk = 3;
  return v;
}

}  // namespace kvshare::testing
