// Tensor-core attention (attend_mma_cuda.cu) over fp16 / bf16 K/V: the
// FlashAttention-2 loop on mma.sync for prefill and decode alike, into the
// split workspace of attend_cuda.cu, whose combine kernel finishes it (sinks,
// normalization, output dtype). Internal header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/attend.h"

namespace kvshare::detail {

// True when the tensor-core kernel takes p: no output_qk, no attention_bias,
// K and V both fp16 or both bf16, H in {64, 128, 256, 512}, K/V 16-byte aligned
// with strides multiples of 8 elements. KVSHARE_CUDA_PLAIN=1 in the
// environment turns it off (read once).
//
// Precision: the queries (fp32 after RoPE) and the probabilities are rounded
// to the cache dtype for the tensor cores, the products accumulate in fp32
// (FlashAttention-2's scheme, Dao 2023, §3.1); the outputs then agree with the
// fp32 reference to the 16-bit tolerance (fp16 / bf16: 1e-2 relative to the
// largest output), not to fp32's. KVSHARE_CUDA_PLAIN=1 keeps every case on
// the fp32-exact kernels.
bool MmaKernelApplies(const AttendParams& p);

// The split of the key axis the kernel runs with: key_splits ranges of
// per_split keys, one workspace slot per row and range.
struct MmaSplit {
  int key_splits = 1;
  std::int64_t per_split = 1;
};
MmaSplit MmaSplitFor(const AttendParams& p, std::int64_t max_kv_len);

// Fills the split workspace ws ((row (b * N + h) * S + s) * key_splits +
// split, H + 2 floats: m, l, acc[H]; every slot is written). Throws kvshare::Error
// when the launch fails.
void AttendMmaCuda(const AttendParams& p, const MmaSplit& s, float* ws, cudaStream_t stream);

}  // namespace kvshare::detail
