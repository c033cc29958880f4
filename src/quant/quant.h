// Quantized weight formats (the block layouts of ggml's ggml-common.h),
// reference dequantization, and matrix products against float activations.
//
// MatMul quantizes activations to int8 blocks (per 32 for Q4_0/Q4_1/Q5_0/
// Q5_1/Q8_0/Q1_0/Q2_0/IQ4_NL/IQ4_XS/MXFP4/NVFP4 weights, per 256 with
// 16-element sums for the K-quants, the IQ1-IQ3 types (quant/quant_iq.h),
// TQ1_0 and TQ2_0) and runs integer dot
// products; F32/F16/BF16 weights use float dot products. The SIMD level is
// chosen once at run time from the CPU (AVX-512 VNNI, AVX2, or the scalar
// twin that is always compiled); KVSHARE_KERNEL=scalar|avx2|avx512 overrides.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "kvshare/common/thread_pool.h"
#include "kvshare/gguf/gguf.h"

namespace kvshare {
namespace detail {
struct PackedWeights;  // quant/kernels/packed.h
class AmxBf16Weights;  // quant/bf16_tiles.h
}  // namespace detail

// ---- weight blocks (byte-exact ggml layouts; fp16 fields are IEEE half bits) ----
struct BlockQ4_0 {
  std::uint16_t d;
  std::uint8_t qs[16];  // element j: low nibble of qs[j]; element j+16: high nibble
};
// Q4_1: element = d * code + m, code in [0, 15] (nibbles as in Q4_0).
struct BlockQ4_1 {
  std::uint16_t d;
  std::uint16_t m;
  std::uint8_t qs[16];
};
struct BlockQ5_0 {
  std::uint16_t d;
  std::uint8_t qh[4];  // bit j = 5th bit of element j (little-endian u32)
  std::uint8_t qs[16];
};
// Q5_1: element = d * code + m, code in [0, 31] (qh and qs as in Q5_0).
struct BlockQ5_1 {
  std::uint16_t d;
  std::uint16_t m;
  std::uint8_t qh[4];
  std::uint8_t qs[16];
};
struct BlockQ8_0 {
  std::uint16_t d;
  std::int8_t qs[32];
};
struct BlockQ4_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[12];  // 8 x (6-bit scale, 6-bit min), packed
  std::uint8_t qs[128];
};
// Q5_K: Q4_K plus a 5th bit per element: bit j of qh[l] belongs to element
// 32j + l (j = sub-block), so element = d * sc_j * (nibble + 16 * bit) - dmin * m_j.
struct BlockQ5_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[12];  // as in Q4_K
  std::uint8_t qh[32];
  std::uint8_t qs[128];  // as in Q4_K
};
struct BlockQ6_K {
  std::uint8_t ql[128];
  std::uint8_t qh[64];
  std::int8_t scales[16];
  std::uint16_t d;
};
// Q2_K: 16 groups of 16; element = d * (scales[g] & 0xF) * code - dmin *
// (scales[g] >> 4), 2-bit codes: element 128n + 32j + l (l < 32) is bits 2j of
// qs[32n + l], in group 8n + 2j + l / 16.
struct BlockQ2_K {
  std::uint8_t scales[16];
  std::uint8_t qs[64];
  std::uint16_t d;
  std::uint16_t dmin;
};
// Q3_K: 16 groups of 16; element = d * (sc_g - 32) * (code - 4 * !hbit), the
// 2-bit codes placed as in Q2_K, hbit = bit 4n + j of hmask[l], sc_g the
// 6-bit scales packed in 12 bytes (Q3KScale).
struct BlockQ3_K {
  std::uint8_t hmask[32];
  std::uint8_t qs[64];
  std::uint8_t scales[12];
  std::uint16_t d;
};
// IQ4_NL: element = d * kIq4Values[nibble], nibbles as in Q4_0.
struct BlockIQ4_NL {
  std::uint16_t d;
  std::uint8_t qs[16];
};
// IQ4_XS: 8 sub-blocks of 32 laid out as IQ4_NL's, each with a 6-bit scale
// ls_ib (low 4 bits in scales_l, high 2 in scales_h): element = d * (ls - 32)
// * kIq4Values[nibble].
struct BlockIQ4_XS {
  std::uint16_t d;
  std::uint16_t scales_h;
  std::uint8_t scales_l[4];
  std::uint8_t qs[128];
};
// TQ2_0 (ternary): element = d * (code - 1), 2-bit codes 0..2 placed as in Q2_K.
struct BlockTQ2_0 {
  std::uint8_t qs[64];
  std::uint16_t d;
};
// TQ1_0 (ternary, 1.6 bits): element = d * (trit - 1). Trits are base-3
// digits packed 5 per byte (qs) or 4 per byte (qh) as b = ceil(256 * v / 243);
// digit m of byte b is ((uint8(b * 3^m) * 3) >> 8). Element order: digit m of
// qs[l] for l < 32 is element 32m + l; of qs[32 + l] (l < 16), 160 + 16m + l;
// of qh[l] (l < 4), 240 + 4m + l.
struct BlockTQ1_0 {
  std::uint8_t qs[48];
  std::uint8_t qh[4];
  std::uint16_t d;
};
// MXFP4 (OCP microscaling): element = 2^(e - 128) * kMxfp4Values[nibble]
// (ggml's E8M0 "half" scale times the doubled E2M1 values), nibbles as in Q4_0.
struct BlockMXFP4 {
  std::uint8_t e;
  std::uint8_t qs[16];
};
// NVFP4: 4 sub-blocks of 16, each with an unsigned E4M3 scale d[s]: element
// 16s + j = Ue4m3Scale(d[s]) * kMxfp4Values[nibble], the low nibbles of
// qs[8s .. 8s + 7] first (j < 8), then their high nibbles.
struct BlockNVFP4 {
  std::uint8_t d[4];
  std::uint8_t qs[32];
};
// Q1_0 (binary): element j = bit j of qs (LSB first) ? d : -d.
struct BlockQ1_0 {
  std::uint16_t d;
  std::uint8_t qs[16];
};
// Q2_0: element j = d * (code - 1), code = bits 2 (j % 4) of qs[j / 4].
struct BlockQ2_0 {
  std::uint16_t d;
  std::uint8_t qs[16];
};
// The doubled E2M1 values of MXFP4 (ggml's kvalues_mxfp4).
inline constexpr std::int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// MXFP4's block scale as float: ggml_e8m0_to_fp32_half (2^(e - 128); e < 2
// gives the subnormals 2^-128 and 2^-127).
inline float Mxfp4Scale(std::uint8_t e) {
  return std::bit_cast<float>(e < 2 ? (0x00200000u << e) : (static_cast<std::uint32_t>(e - 1) << 23));
}
// NVFP4's sub-block scale as float: ggml_ue4m3_to_fp32 (bit 7 ignored; 0 and
// 0x7F, the NaN, give 0; halved for the doubled E2M1 values).
// Exact without libm: man * 2^-9, or (8 + man) * 2^(exp - 10) with the power
// of two built from its bits.
inline float Ue4m3Scale(std::uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const unsigned exp = (x >> 3) & 0xF, man = x & 7;
  const float raw = exp == 0 ? static_cast<float>(man) * 0x1p-9f
                             : static_cast<float>(8 + man) * std::bit_cast<float>((exp + 117) << 23);
  return raw * 0.5f;
}
// Digit m (0..4) of a TQ1_0 byte: 0, 1 or 2.
inline int Tq1Digit(std::uint8_t b, int m) {
  static constexpr std::uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  return (static_cast<std::uint8_t>(b * kPow3[m]) * 3) >> 8;
}
// The trit (0..2) of TQ1_0 element e (0..255).
inline int Tq1Trit(const BlockTQ1_0& b, int e) {
  if (e < 160) return Tq1Digit(b.qs[e % 32], e / 32);
  if (e < 240) return Tq1Digit(b.qs[32 + (e - 160) % 16], (e - 160) / 16);
  return Tq1Digit(b.qh[(e - 240) % 4], (e - 240) / 4);
}
// The non-linear 4-bit grid of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr std::int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                               1,    13,   25,  38,  53,  69,  89,  113};
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockIQ4_NL) == 18 &&
              sizeof(BlockIQ4_XS) == 136 && sizeof(BlockTQ2_0) == 66 && sizeof(BlockTQ1_0) == 54 &&
              sizeof(BlockMXFP4) == 17 && sizeof(BlockNVFP4) == 36 && sizeof(BlockQ1_0) == 18 &&
              sizeof(BlockQ2_0) == 18);
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// ---- activation blocks (kvshare-internal; not a file format) ----
// x[i] ~= d * qs[i]; sum = sum(qs).
struct ActQ8 {
  float d;
  std::int32_t sum;
  std::int8_t qs[32];
};
// x[i] ~= d * qs[i]; bsums[g] = sum(qs[16g .. 16g+15]).
struct ActQ8K {
  float d;
  std::int16_t bsums[16];
  std::int8_t qs[256];
};

// The (sc, m) pair of Q4_K / Q5_K sub-block j (0..7) from the 12 packed scale bytes.
inline void Q4KScaleMin(int j, const std::uint8_t* s, std::uint8_t* sc, std::uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<std::uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<std::uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q6_K's 6-bit code (value + 32, 0..63) of element 128n + 32k + l (n < 2,
// k < 4, l < 32): the low 4 bits are nibble k / 2 of ql[64n + 32 (k % 2) + l],
// the high 2 bits 2k of qh[32n + l]. Element = d * scales[e / 16] * (code - 32).
inline int Q6KCode(const BlockQ6_K& b, int n, int k, int l) {
  return ((b.ql[64 * n + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xF) | (((b.qh[32 * n + l] >> (2 * k)) & 3) << 4);
}

// Q3_K's 6-bit scale of group g (0..15), unpacked from the 12 scale bytes
// (without the -32 offset).
inline int Q3KScale(int g, const std::uint8_t* s) {
  return ((s[g % 8] >> (4 * (g / 8))) & 0xF) | (((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4);
}
// IQ4_XS's 6-bit scale of sub-block ib (0..7), without the -32 offset.
inline int IQ4XSScale(int ib, const BlockIQ4_XS& b) {
  return ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
}
// IQ4_XS sub-block ib's scale d * (ls - 32) in fp32, as every kernel forms it.
float IQ4XSSubScale(int ib, const BlockIQ4_XS& b);

// The reference dequantizers (quant.cc; the IQ1-IQ3 ones: quant_iq.h): nb
// blocks at b to fp32 y, element by element as ggml does. DequantizeRow
// reaches them through the weight-type table (quant/weight_types.h).
namespace detail {
void DequantF32(const float* b, float* y, std::int64_t nb);
void DequantF16(const std::uint16_t* b, float* y, std::int64_t nb);
void DequantBF16(const std::uint16_t* b, float* y, std::int64_t nb);
void DequantQ4_0(const BlockQ4_0* b, float* y, std::int64_t nb);
void DequantQ4_1(const BlockQ4_1* b, float* y, std::int64_t nb);
void DequantQ5_0(const BlockQ5_0* b, float* y, std::int64_t nb);
void DequantQ5_1(const BlockQ5_1* b, float* y, std::int64_t nb);
void DequantQ8_0(const BlockQ8_0* b, float* y, std::int64_t nb);
void DequantQ2_K(const BlockQ2_K* b, float* y, std::int64_t nb);
void DequantQ3_K(const BlockQ3_K* b, float* y, std::int64_t nb);
void DequantQ4_K(const BlockQ4_K* b, float* y, std::int64_t nb);
void DequantQ5_K(const BlockQ5_K* b, float* y, std::int64_t nb);
void DequantQ6_K(const BlockQ6_K* b, float* y, std::int64_t nb);
void DequantIQ4_NL(const BlockIQ4_NL* b, float* y, std::int64_t nb);
void DequantIQ4_XS(const BlockIQ4_XS* b, float* y, std::int64_t nb);
void DequantTQ1_0(const BlockTQ1_0* b, float* y, std::int64_t nb);
void DequantTQ2_0(const BlockTQ2_0* b, float* y, std::int64_t nb);
void DequantMXFP4(const BlockMXFP4* b, float* y, std::int64_t nb);
void DequantNVFP4(const BlockNVFP4* b, float* y, std::int64_t nb);
void DequantQ1_0(const BlockQ1_0* b, float* y, std::int64_t nb);
void DequantQ2_0(const BlockQ2_0* b, float* y, std::int64_t nb);
}  // namespace detail

// True for F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q1_0, Q2_0, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4, NVFP4: every type llama.cpp's
// llama-quantize writes (the rows of the weight-type table,
// quant/weight_types.cc).
bool IsSupportedWeightType(GgmlType type);
// "F32, F16, ..., Q2_0": the list above in the table's order, for error
// messages.
const char* SupportedWeightTypesString();
// Throws kvshare::Error naming the tensor and its type unless `t`'s type is
// one of the above, e.g. "tensor 'blk.0.attn_q.weight' has type Q8_K, which
// kvshare does not support (supported: ...)": model loaders call it (through
// WeightMatrix::FromTensor) for every weight they use, so such a file is
// refused at load rather than at the first forward pass.
void CheckWeightType(const GgufTensor& t);
// Whether MatMul quantizes activations for `type` per 256 (ActQ8K: the
// K-quants, the IQ1-IQ3 types, TQ1_0, TQ2_0) rather than per 32 (ActQ8: the
// others, IQ4_XS's 32-element sub-blocks included); false for float types.
bool UsesSuperBlockActivations(GgmlType type);

// Reference dequantization of one row of n elements (n a multiple of the
// block size) in fp32 math, element by element as ggml does. Throws
// kvshare::Error for unsupported types or a bad n.
void DequantizeRow(GgmlType type, const void* src, float* dst, std::int64_t n);

// Activation quantization (round to nearest, ties to even; d = amax / 127,
// NaN elements ignored by the amax and stored as 127). n % 32 == 0 (resp.
// 256). SIMD with run-time dispatch (quantize_act.cc), bitwise equal to the
// scalar references (quant.cc), which the tests compare against.
void QuantizeRowQ8(const float* x, ActQ8* y, std::int64_t n);
void QuantizeRowQ8K(const float* x, ActQ8K* y, std::int64_t n);
void QuantizeRowQ8Reference(const float* x, ActQ8* y, std::int64_t n);
void QuantizeRowQ8KReference(const float* x, ActQ8K* y, std::int64_t n);

// A weight matrix W [rows, cols] (cols = GGUF ne[0]), row r at data + r*row_bytes.
struct WeightMatrix {
  const void* data = nullptr;
  GgmlType type = GgmlType::kF32;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::size_t row_bytes = 0;
  // The same rows repacked for the kernels that put weight rows in the SIMD
  // lanes (quant/kernels/packed.h; PackForMatMul), or null. MatMul reads it at
  // the levels with a kernel for it and `data` at the others; the results are
  // bitwise those of the AVX-512 kernels either way (the unpacked AVX2 Q8_0
  // kernel differs from them in the last bits).
  std::shared_ptr<const detail::PackedWeights> packed;
  // A float matrix (F32, F16, BF16) rounded to bf16 for the AMX tiles
  // (quant/bf16_tiles.h; PackForMatMul with PackOptions::float_weights_bf16),
  // or null. When set, MatMul runs every product of it there, at every level
  // but kFloat, with that header's arithmetic and bound instead of exact f32
  // products.
  std::shared_ptr<const detail::AmxBf16Weights> bf16_tiles;

  // 2-D tensor view (ne[1] rows of ne[0]); throws kvshare::Error on rank > 2
  // or an unsupported type (CheckWeightType).
  static WeightMatrix FromTensor(const GgufTensor& t);
  // Builds a view over packed rows of `type`.
  static WeightMatrix Make(const void* data, GgmlType type, std::int64_t rows, std::int64_t cols);
};

// kScalar/kAvx2/kAvx512Vnni/kAmx quantize the activations to int8 (per
// 32-block or per 256-block, as UsesSuperBlockActivations says) and compute
// integer block dot products. kAmx is kAvx512Vnni with Intel AMX tiles for
// the packed weight types' products of several activation rows, bitwise
// equal to kAvx512Vnni's (kernels/dispatch.h). kFloat is their plain twin without activation rounding:
// it dequantizes each weight row to fp32 (DequantizeRow) and multiplies it with
// the fp32 activations. It is slow and never the default; it exists to check a
// forward pass against a float reference (KVSHARE_KERNEL=float).
enum class KernelLevel { kScalar = 0, kAvx2 = 1, kAvx512Vnni = 2, kAmx = 3, kFloat = 4 };
const char* KernelLevelName(KernelLevel level);
// Whether this build and this CPU can run `level`.
bool KernelLevelAvailable(KernelLevel level);
// The level MatMul uses: the best available int8 level, or KVSHARE_KERNEL if set
// ("scalar", "avx2", "avx512vnni" or "avx512", "amx", "float"; unavailable
// names are ignored).
KernelLevel DefaultKernelLevel();

struct MatMulParams {
  const float* x = nullptr;  // [m, w.cols]
  std::int64_t m = 0;
  float* y = nullptr;          // [m, w.rows]
  ThreadPool* pool = nullptr;  // null: run on the calling thread
  KernelLevel level = DefaultKernelLevel();
};

// Y[i, r] = sum_c W[r, c] * X[i, c]. Work is split over blocks of output rows;
// results are identical for any thread count. Throws kvshare::Error (before
// writing y) for an unsupported type, a level not available here, or null
// pointers with m > 0.
void MatMul(const WeightMatrix& w, const MatMulParams& p);

struct PackOptions {
  // F32 / F16 / BF16 matrices also get their bf16 tile form
  // (WeightMatrix::bf16_tiles). Throws kvshare::Error where the tiles are
  // not usable (AmxBf16Usable, quant/bf16_tiles.h).
  bool float_weights_bf16 = false;
};

// w with a packed copy of its rows (w.packed) when w has a multiple of 16
// rows and MatMul's default level has a kernel over packed weights of its type
// (kAmx, kAvx512Vnni and kAvx2: Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS, MXFP4,
// Q2_K, Q3_K, Q4_K, Q6_K); w
// unchanged otherwise (and when KVSHARE_KERNEL picks another level). The copy
// takes as many bytes as w's rows: call it for the matrices of matrix products,
// not for tables that are only looked up (embeddings).
WeightMatrix PackForMatMul(WeightMatrix w, const PackOptions& options = {});

// One product of several that share their input (q / k / v, gate / up).
struct MatMulTarget {
  WeightMatrix w;
  float* y = nullptr;  // [m, w.rows]
};

struct MatMulManyParams {
  const float* x = nullptr;  // [m, cols]: the input of every target
  std::int64_t m = 0;
  std::span<const MatMulTarget> targets;  // every w.cols == cols; types may differ
  ThreadPool* pool = nullptr;             // null: run on the calling thread
  KernelLevel level = DefaultKernelLevel();
};

// For every target: y[i, r] = sum_c w[r, c] * x[i, c], each output row
// bitwise equal to what MatMul(w, ...) gives it, as one pool job with the
// activations quantized once per format (per 32, per 256) instead of once per
// matrix: one wake-up and one wait for all of them. Throws kvshare::Error
// (before writing any y) as MatMul does, and for targets of different column
// counts.
void MatMulMany(const MatMulManyParams& p);

}  // namespace kvshare
