// The attention kernel on the GPU (attend_cuda.cu): the score pipeline of
// attention.h over AttendParams whose every pointer is device memory, with an
// online softmax per fixed key split and a fixed-order combine (deterministic
// for given shapes). Internal header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/attend.h"

namespace kvshare::detail {

// Largest head size of the CUDA kernels (Gemma 4's full layers).
inline constexpr int kCudaMaxHeadSize = 512;
// Most key splits of one call (the combine kernel's shared weights).
inline constexpr int kCudaMaxKeySplits = 64;

// Runs attention on `stream` (asynchronously); p.head_size <= kCudaMaxHeadSize
// (the front end checks it before writing anything). max_kv_len: the largest
// kv_len[b] (sizes the key splits). output_qk, when requested, must already be
// zeroed (invisible keys and padding queries keep 0). Throws kvshare::Error
// when a launch or the scratch allocation fails.
void AttendCuda(const AttendParams& p, std::int64_t max_kv_len, cudaStream_t stream);

}  // namespace kvshare::detail
