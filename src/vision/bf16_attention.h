// The encoders' bidirectional attention in bf16 (docs/vision.md "Precision"):
// per head, Q K^T and P V as oneDNN bf16 matmuls with f32 accumulation, the
// softmax in f32 between them. Per head the keys and values are converted to
// bf16 and packed once; then each block of kQueryRows queries (the last one
// zero-padded) is one task on kvshare's ThreadPool: its scores [kQueryRows, S]
// in f32, p = bf16(exp(scale (s - max))) per row, O = (P V) / sum(p). A row's
// result does not depend on the thread count. Internal to src/vision.
#pragma once

#include <cstdint>

namespace kvshare {
class ThreadPool;
}

namespace kvshare::detail {

inline constexpr std::int64_t kQueryRows = 64;

// out[S, heads * hd] = softmax(scale q k^T) v per head, every query seeing
// every key; q, k, v: [S, heads * hd] f32. Throws kvshare::Error when oneDNN
// has no bf16 matmul here (Bf16MatMulSupported() false) or fails.
void Bf16Attention(const float* q, const float* k, const float* v, std::int64_t S, int heads, int hd, float scale,
                   float* out, ThreadPool* pool);

}  // namespace kvshare::detail
