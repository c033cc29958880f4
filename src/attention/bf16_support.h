// Whether oneDNN runs bf16 matmuls on this CPU, for the bf16 products of the
// GQA op (GqaMatMulPrecision::kBf16) and of src/vision (bf16_matmul.h).
// Defined in onednn.cc; this header keeps oneDNN's headers out of its users.
#pragma once

namespace kvshare::detail {

// AVX-512 at least (emulated below AVX512_BF16).
bool Bf16MatMulSupported();
// Natively: AVX512_BF16 dot products or AMX.
bool Bf16MatMulNative();

}  // namespace kvshare::detail
