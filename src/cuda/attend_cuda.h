// The attention kernel on the GPU (attend_cuda.cu): the score pipeline of
// attention.h over AttendParams whose every pointer is device memory, with an
// online softmax per fixed key split and a fixed-order combine (deterministic
// for given shapes). Internal header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/attend.h"
#include "cuda/gqa_workspace.h"

namespace kvshare::detail {

// Largest head size of the CUDA kernels (Gemma 4's full layers).
inline constexpr int kCudaMaxHeadSize = 512;
// Most key splits of one call (the combine kernel's shared weights).
inline constexpr int kCudaMaxKeySplits = 64;

// Element offset of key / value j of (b, n) in a strided source (a ring
// wraps j at its capacity).
__device__ inline std::int64_t KvOffset(const KvSource& src, int b, int n, std::int64_t j) {
  const std::int64_t slot = src.ring_capacity > 0 ? j % src.ring_capacity : j;
  return b * src.batch_stride + n * src.head_stride + slot * src.row_stride;
}

inline std::int64_t CeilDiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// True when KVSHARE_CUDA_PLAIN=1 was in the environment at the first call:
// every call then runs the general fp32 kernel (tests, debugging).
bool CudaPlainKernelsOnly();

// K and V both fp16 or both bf16, H in {64, 128, 256, 512}, 16-byte aligned
// with strides multiples of 8 elements: what the decode and tensor-core
// kernels read in 16-byte slices.
bool HalfKvSlices(const AttendParams& p);

// Runs attention on `stream` (asynchronously); p.head_size <= kCudaMaxHeadSize
// (the front end checks it before writing anything). max_kv_len: the largest
// kv_len[b] (sizes the key splits). output_qk, when requested, must already be
// zeroed (invisible keys and padding queries keep 0). Throws kvshare::Error
// when a launch or the scratch allocation fails. ws: the caller's reusable
// scratch (gqa_workspace.h); null => allocated on the stream per call.
void AttendCuda(const AttendParams& p, std::int64_t max_kv_len, cudaStream_t stream, GqaCudaWorkspace* ws = nullptr);

}  // namespace kvshare::detail
