// The optimized CPU kernel's bf16 form (GqaMatMulPrecision::kBf16, gqa.h):
// the call's check and the kernel. Internal header.
#pragma once

#include "attention/attend.h"
#include "kvshare/attention/gqa.h"

namespace kvshare::detail {

// Throws kvshare::Error naming matmul_precision and the first parameter the
// bf16 kernel does not cover (gqa.h, GqaRunOptions::matmul_precision), or
// saying that oneDNN has no bf16 matmul on this CPU. Reads no tensor data.
void CheckAttendBf16(const GqaAttributes& attrs, const GqaInputs& in, const GqaOutputs& out,
                     const GqaRunOptions& options);

// Attention with bf16 score and value products (f32 accumulation) for p as
// CheckAttendBf16 allows it: not causal, no window, softcap, bias, sink or
// qk output, K/V float32 / float16 / bfloat16 and not a ring. Throws
// kvshare::Error when oneDNN fails.
void AttendBf16(const AttendParams& p, ThreadPool* pool);

}  // namespace kvshare::detail
