// Checks of the hyperparameters every family reads from GGUF metadata, made
// before anything is sized or computed from them: a count stored as uint32
// past INT_MAX reads back negative, and a zero, negative or non-finite
// RoPE base or norm epsilon would run as NaN logits rather than fail.
// Internal to src/model.
#pragma once

#include <string>

#include "kvshare/gguf/gguf.h"
#include "kvshare/model/model.h"

namespace kvshare::detail {

// `<prefix>block_count` (n_layer) against the file's layer tensors: at
// least 1, and the blk.<i>.* tensors must number layers 0 .. n_layer - 1,
// no more (llama.cpp refuses a file with tensors it does not load), no
// fewer. Throws kvshare::Error naming the key and what the tensors say.
void CheckLayerCount(const GgufFile& f, int n_layer, const std::string& prefix);

// n_embd, n_head >= 1; rms_eps finite and >= 0; rope_base_full and
// rope_base_sliding finite and > 0; sliding_window >= 0; context_length >= 1.
// Throws kvshare::Error naming the key and the value read.
void CheckScalarHyperparameters(const ModelConfig& c, const std::string& prefix);

// `<prefix>key` (attention.head_count_kv, or one layer's entry of it) must be
// >= 1 and divide attention.head_count. Throws kvshare::Error naming the key.
void CheckKvHeadCount(const std::string& prefix, const std::string& key, int n_head_kv, int n_head);

// `<prefix>v_key`, when present, must equal `key_length`, the K head size
// read from `<prefix>k_key`: kvshare runs equal K and V head sizes only.
// Throws kvshare::Error naming both keys.
void CheckValueLength(const GgufFile& f, const std::string& prefix, const char* k_key, const char* v_key,
                      int key_length);

// `<prefix>final_logit_softcapping`, 0 (off) when absent. Throws
// kvshare::Error unless it is finite and >= 0.
float ReadFinalLogitSoftcap(const GgufFile& f, const std::string& prefix);

}  // namespace kvshare::detail
