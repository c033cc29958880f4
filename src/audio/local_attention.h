// The conformer's chunked local attention with relative positions (HF
// Gemma3nAudioAttention / Gemma4AudioAttention; docs/audio.md "Encoders"),
// in float with SIMD dot products (Highway, run-time dispatch). Queries come
// in blocks of kChunk; each sees the kSlots frames starting kPast frames
// before its block; slot logit = softcap(q.k + q.rel[distance]) with
// distance = query - key, visible when the key is inside the clip, valid and
// 0 .. max_distance back, else hidden_logit (so a query with no visible key
// averages all kSlots values, zeros outside the clip, as HF's softmax over
// equal logits does). Float error: each logit's two dot products are within
// about hd 2^-24 sum_i |q_i| (|k_i| + |rel_i|) of the exact ones, which
// tests/audio_local_attention_test.cc checks against a double reference.
// Internal to src/audio.
#pragma once

#include <cstdint>

namespace kvshare {
class ThreadPool;
}

namespace kvshare::detail {

inline constexpr int kChunk = 12;  // attention_chunk_size: queries per block
inline constexpr int kPast = 12;   // attention_context_left - 1: distances 12 .. 0 before a block
inline constexpr int kSlots = kChunk + kPast;
inline constexpr float kSoftcap = 50.0f;  // attention_logit_cap

struct LocalAttentionShape {
  std::int64_t frames = 0;  // T
  int n_head = 0;
  int head_dim = 0;
  int max_distance = 12;       // keys visible at distance 0 .. max_distance (<= kPast)
  float hidden_logit = -1e9f;  // a hidden slot's logit
};

// out[T, n_head * head_dim] from q, k, v [T, n_head * head_dim] (q and k
// already scaled), rel [kPast + 1, n_head * head_dim] (row c: distance
// kPast - c) and valid [T]. Results do not depend on the thread count.
void LocalAttention(const float* q, const float* k, const float* v, const float* rel, const std::uint8_t* valid,
                    const LocalAttentionShape& shape, float* out, ThreadPool* pool);

}  // namespace kvshare::detail
