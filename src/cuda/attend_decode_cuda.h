// The decode kernel (attend_decode_cuda.cu): one query per row over fp16 /
// bf16 caches, all heads of a GQA group per K/V load, split-KV into the same
// workspace as attend_cuda.cu's general kernel, whose combine finishes it.
// Internal header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/attend.h"

namespace kvshare::detail {

// True when the decode kernel takes p: S = 1, no output_qk, K and V both fp16
// or both bf16, H in {64, 128, 256, 512}, K/V 16-byte aligned with strides
// multiples of 8 elements. KVSHARE_CUDA_PLAIN=1 in the environment (read
// once, at the first call) turns it off (every call then runs the general kernel: for tests and debugging).
bool DecodeKernelApplies(const AttendParams& p);

// Fills the split workspace ws ((row b * N + h) * splits + split, H + 2
// floats: m, l, acc[H]) for keys [split * per_split, (split + 1) * per_split)
// of each row's visible range. Throws kvshare::Error when the launch fails.
void AttendDecodeCuda(const AttendParams& p, int splits, std::int64_t per_split, float* ws, cudaStream_t stream);

}  // namespace kvshare::detail
