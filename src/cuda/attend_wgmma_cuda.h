// Prefill attention on Hopper (attend_wgmma_cuda.cu, sm_90a): warpgroup MMA
// with K/V tiles brought in by TMA, into the split workspace of
// attend_cuda.cu, whose combine kernel finishes it (sinks, normalization,
// output dtype) as for attend_mma_cuda.cu's kernel. Internal header.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>

#include "attention/attend.h"
#include "cuda/attend_mma_cuda.h"

namespace kvshare::detail {

// Which kernel takes prefill calls over fp16 / bf16 K/V:
//   kAuto       the Hopper kernel where PrepareWgmma allows it (else
//               attend_mma_cuda.cu's); with one key split it writes the
//               output itself, else it fills the split workspace for the
//               combine kernel;
//   kWorkspace  the same, but always through the workspace and the combine
//               kernel (isolates the kernel's own output stage);
//   kNoOverlap  the same as kAuto, but the kernel's plain loop: one tile's
//               Q K^T, softmax and P V after the other (isolates the
//               overlap of one tile's softmax with the previous P V);
//   kMma        always attend_mma_cuda.cu's kernel.
// KVSHARE_CUDA_PREFILL=workspace / =nooverlap / =mma in the environment
// (read once) give kWorkspace / kNoOverlap / kMma; SetPrefillPath overrides
// it for the process (tests and benchmarks that compare them).
// KVSHARE_CUDA_PLAIN=1 keeps every call on the fp32 kernels whatever the path.
enum class PrefillPath { kAuto, kWorkspace, kNoOverlap, kMma };
void SetPrefillPath(PrefillPath path);
void ResetPrefillPath();  // back to the environment's choice
PrefillPath CurrentPrefillPath();

// Everything one launch needs: the key split and the tensor maps of K and V
// (attend_wgmma_plan.h's KvTensorMapPlan, encoded by the driver).
struct WgmmaCall {
  MmaSplit split;
  int m_tiles = 0;
  bool direct_output = false;  // one key split (not kWorkspace): the kernel normalizes and writes p.out
  bool overlap = true;         // the overlapped loop (not kNoOverlap)
  CUtensorMap k_map{}, v_map{};
  int slot_key = 0, slot_head = 1, slot_batch = 2;  // the same for K and V (checked)
};

// The launch of p on the current device, or nullopt when the Hopper kernel
// does not take p (attend_wgmma_plan.h's WgmmaRefusal, the path, the
// driver's tensor-map encoder missing or refusing the maps); the reason is
// kept for LastWgmmaRefusal. Throws nothing.
std::optional<WgmmaCall> PrepareWgmma(const AttendParams& p, std::int64_t max_kv_len);

// Why the last PrepareWgmma of this process returned nullopt ("" if it did not).
std::string LastWgmmaRefusal();

// Launches of the Hopper kernel so far in this process (tests check that the
// path they mean to test ran).
std::int64_t WgmmaLaunchCount();

// With call.direct_output, writes p.out (sinks, normalization, output dtype
// as attend_cuda.cu's combine kernel; ws unused, may be null); else fills
// the split workspace ws ((row (b * N + h) * S + s) * key_splits + split,
// H + 2 floats: m, l, acc[H]; every slot is written), as AttendMmaCuda does.
// Throws kvshare::Error when the launch fails.
void AttendWgmmaCuda(const AttendParams& p, const WgmmaCall& call, float* ws, cudaStream_t stream);

}  // namespace kvshare::detail
