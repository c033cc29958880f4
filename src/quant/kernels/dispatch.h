// The matmul kernels (internal to src/quant): their signatures, and for every
// weight type, kernel level and row count, which function computes MatMul's
// dot products, and why. The kernels are declared here; each type's row of
// the weight-type table (quant/weight_types.cc) names its kernel per level.
//
// How a product reaches a kernel (quant_matmul.cc): DefaultKernelLevel picks
// the level once per process (scalar, avx2, avx512vnni or amx from the CPU's
// features and, for amx, the OS's tile permission: cpu_amx.h; KVSHARE_KERNEL
// overrides; "float" dequantizes instead and uses no kernel here). At load PackForMatMul repacks a matrix (packed.h: 16 weight
// rows interleaved in the SIMD lanes) when the level has a packed kernel for
// its type and its row count is a multiple of 16. MatMulQuantRows then calls,
// for a task's weight rows and up to kMaxActRows activation rows (`acts`: 1
// on a decode step, up to 64 per call in prefill and batched steps), the
// level's packed kernel if the matrix was packed, else the level's row
// kernel, both from the type's row of the table. A row's output never
// depends on acts, the rows beside it, nrows or the thread split. Most
// kernels of a type share one arithmetic (per block in order:
// y = fma(float(p_b), dw_b * dx_b, y), p_b exact in int32), so packed and
// unpacked, AVX2 and AVX-512 give the same bits; the exceptions, which sum
// partial products in float lanes and differ from the scalar twin in the last
// bits, say so in their file comments (tests/quant_test.cc holds both).
//
// Where the kernels live: kernels/<level>/<family>.cc, the level folders
// compiled with their ISA flags (src/quant/CMakeLists.txt):
//   scalar/  the plain twin of every kernel: any CPU; the reference the SIMD
//            kernels are tested against
//   avx2/    AVX2 + FMA + F16C
//   avx512/  AVX-512 F / BW / VL + VNNI (vpdpbusd), for the types that have
//            a kernel there; the rest run the AVX2 kernels
//   amx/     the AVX-512 flags plus AMX-TILE / INT8 / BF16: tile kernels
//            over packed weights and for the IQ1-IQ3 rows (tiles.h: the tile
//            configuration; scaled_tiles.h: the scaled byte planes and the
//            activation rows of tile A); every other product at this level
//            is the avx512vnni level's
// with one file per type family at each level:
//   q32.cc         Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 (32-element blocks, one fp16 scale)
//   k_quants.cc    Q2_K Q3_K Q4_K Q5_K Q6_K (256-element super-blocks)
//   grid4.cc       IQ4_NL IQ4_XS MXFP4 NVFP4 (4-bit indices into a 16-value grid)
//   lowbit.cc      TQ1_0 TQ2_0 Q1_0 Q2_0 (ternary, binary, 2-bit codes)
//   iq.cc          IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S IQ1_S IQ1_M (lattice
//                  grids through quant_iq.h's integer form)
//   packed_q32.cc  packed Q8_0 Q4_0 Q5_0 IQ4_NL IQ4_XS MXFP4
//   packed_k.cc    packed Q4_K Q6_K Q2_K Q3_K
// and helpers beside them: iq_decode.h (the IQ sub-block decoders of avx2/
// and avx512/ iq.cc), avx512/group_dot.h (the vpdpbusd step of avx512/
// packed_k.cc and iq.cc), avx512/packed_q32_codes.h and packed_k_codes.h
// (the code decode the avx512/ and amx/ packed kernels share), avx512/
// iq_tiles.h (the IQ tile decode of avx512/ and amx/ iq.cc).
// F32 / F16 / BF16 weights take float dot products at every level
// (kernels/float.cc, Highway's own run-time dispatch).
//
// The table. "acts" is the activation row count of one call; "n per pass":
// the kernel keeps n activation rows in registers and makes ceil(acts / n)
// passes over the weights, unpacking each weight block once per pass. Figures
// behind each choice: docs/kernels.md.
//
// Packed matrices (rows % 16 == 0; the types whose row names a packed kernel
// for the level, the same at avx2 and avx512: Q8_0 Q4_0 Q5_0 IQ4_NL IQ4_XS
// MXFP4 Q4_K Q6_K Q2_K Q3_K):
//   scalar  reads the ggml layout (the level has no packed kernel, and
//           PackForMatMul does not pack for it).
//   avx2    Avx2PackedRows / Avx2PackedKRows (avx2/packed_q32.cc,
//           packed_k.cc): 16 rows as two ymm halves of 8, maddubs + madd.
//           acts = 1 (q32): GroupOneRow, both halves per block against one
//           broadcast (the decode step; faster than half by half). Else 8
//           per pass; Q5_0 (q32) and Q6_K / Q3_K / Q2_K (k) with acts > 8
//           decode the codes once into scratch for all passes. Q2_K / Q3_K
//           go through Q6_K's loop with their own code decode, a group's 4
//           maddubs summed in int16 (codes <= 7) and one madd by the scale.
//   avx512  Avx512PackedRows / Avx512PackedKRows (avx512/packed_q32.cc,
//           packed_k.cc): 16 rows in the zmm lanes, vpdpbusd against 4
//           activation bytes broadcast from memory; 8 per pass; Q5_0 (q32)
//           and Q4_K / Q6_K / Q3_K / Q2_K (k) with acts > 8 decode once
//           into scratch. Q2_K / Q3_K go through Q6_K's loop (16 groups
//           with one integer scale each) with their own code decode.
//   amx     AmxPackedRows / AmxPackedKRows (amx/packed_q32.cc, packed_k.cc):
//           acts < 16 (q32) / 9 (k): the avx512 kernel (one tile product
//           costs what 16 rows cost). Else per group of 16 rows the codes
//           are decoded once per call into B tiles; tile A: 16 activation
//           rows (q32: read in place; k: copied once per call into 64-byte
//           rows), the last chunk zero-padded; C row j = the avx512
//           kernel's zmm for activation row j, then its float steps: bitwise
//           its outputs. q32: int8 values, one tdpbssd per block (K = 32).
//           k: each group's integer scale folded into the weights, s *
//           (code - bias) split into a low (unsigned) and a high (signed)
//           byte plane, P_b = 256 tdpbssd(hi) + tdpbsud(lo) over 4 K-steps
//           of 64 (Q2_K: the low plane alone); the mins' M_b as in avx512.
//   The levels avx2 and avx512 are not one algorithm at two widths (two
//   8-row halves with maddubs against 16 lanes with vpdpbusd, a one-row path
//   only on AVX2, different decodes per type), so each level has its own
//   file.
//
// Unpacked matrices (every type at the scalar level; at avx2 / avx512 the
// types without a packed kernel, and packable ones whose row count is not a
// multiple of 16). Scalar: Scalar<type>Rows (ScalarIqRows<Block> for IQ1-IQ3)
// in scalar/<family>.cc, one dot product at a time. AVX2 / AVX-512:
// Avx2<type>Rows / Avx512<type>Rows (Avx2IqRows<Block>) in <level>/<family>.cc:
//   type            avx2                               avx512vnni
//   Q8_0            q32: sign trick (|w| x sign(x, w);  q32: Q4_0's kernel with
//                   codes to 255 would saturate         bias 128 (vpdpbusd takes
//                   maddubs), 4 per pass                u8 codes)
//   Q4_0 Q5_0       q32: acts >= 4: 8 activation rows   q32: the same layouts
//                   in the lanes, acts 1-3: 8 weight    with vpdpbusd
//                   rows in the lanes (q32_lanes.h)
//   Q4_1 Q5_1       q32: 4 per pass                     q32: two blocks per zmm,
//                                                       4 per pass
//   Q4_K Q5_K Q6_K  k_quants: 4 per pass                k_quants: lanes / rows
//                                                       layouts as Q4_0
//   Q2_K Q3_K       k_quants: 8 per pass                = avx2 (rows % 16 != 0)
//   IQ4_NL MXFP4    grid4: pshufb grid, 4 per pass      = avx2 (rows % 16 != 0)
//   IQ4_XS          grid4: 4 per pass                   = avx2
//   NVFP4           grid4: 8 per pass                   = avx2
//   TQ1_0 TQ2_0     lowbit: 4 per pass                  = avx2
//   Q1_0 Q2_0       lowbit: 8 per pass                  = avx2
//   IQ1-IQ3         iq: acts >= 2: tiles of 8 rows      iq: acts >= 2: tiles of
//                   decoded once into the lane layout,  16 rows decoded once,
//                   maddubs, 8 per pass; acts 1 and     vpdpbusd, 8 per pass;
//                   the rows past the last tile: 8      acts 1 and the rows
//                   per pass; all end each block in     past the last tile:
//                   the scalar twin's fma (bitwise)     = avx2
// "= avx2": no AVX-512 kernel for the type: its row of the table names none
// at avx512vnni, and the level runs the avx2 one.
// At amx every unpacked product is avx512vnni's but IQ1-IQ3's: AmxIqRows
// (amx/iq.cc): acts < 17 and the rows past the last 16-row tile: the
// avx512vnni kernel. Else its tile decode, each group's odd scale folded into
// the values (ls v, exact in int16) and split into a low (unsigned) and a
// high (signed) byte plane as amx/packed_k.cc does, the next block's decode
// run in slices between this block's K-steps; tile A: 16 activation rows
// copied once per call into 64-byte rows; P_b = 256 tdpbssd(hi) +
// tdpbsud(lo) over 4 K-steps of 64, the scalar twin's integer, then its fma
// per block: bitwise scalar's and avx512vnni's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "quant/quant.h"
#include "quant/quant_iq.h"

namespace kvshare::detail {

inline constexpr int kMaxActRows = 64;
// The AMX level's packed kernels take up to this many activation rows a call
// (their code decode and activation staging are once per call): 256.
inline constexpr int kMaxAmxActRows = 256;
// ... and fewer for long rows: their staged activations (a byte per element)
// within kAmxStageBytes, beside the activations' own blocks, stay in the
// per-core L2 (2 MiB on the Xeons with AMX) that every weight group rereads
// them from. Q4_K 1536 x 6144 took twice as long per row at m = 256 (1.5 MiB
// staged) as at 64 or 128, while 6144 x 1536 was fastest at 256 (384 KiB):
// docs/benchmarks.md, "Gemma 4 E2B and Gemma 3n E2B geometries".
inline constexpr std::int64_t kAmxStageBytes = 768 * 1024;
// Activation rows per AMX packed-kernel call for rows of `cols` elements:
// kAmxStageBytes / cols in whole tiles of 16, from 16 to kMaxAmxActRows.
inline int AmxActRowsPerCall(std::int64_t cols) {
  const std::int64_t rows = kAmxStageBytes / std::max<std::int64_t>(cols, 1) / 16 * 16;
  return static_cast<int>(std::clamp<std::int64_t>(rows, 16, kMaxAmxActRows));
}

// A chunk of activation rows (one AmxActRowsPerCall step of MatMulMany)
// laid out once for the AMX level's tile kernels (amx/staging.cc), which
// every task of the call then reads: a task copying them itself spent up to
// a tenth of its time on the copy, and the copies multiply with the tasks
// (docs/kernels.md, AMX tile kernels). Chunks of 16 rows, the last one
// zero-padded. ActQ8 (the 32-element kernel): `tiles` per chunk, per block,
// the 16 rows' 32 values (512 bytes), `d` the rows' scales in the same
// order. ActQ8K (the K-quant and IQ kernels): `tiles` per block, per chunk,
// per K-step of 64 elements, the 16 rows' 64 values (4 KiB a block and
// chunk); d[b * rows + j] the scales, pairs[(b * rows + j) * 4 + q] the rows'
// sub-block sum pairs (SubBlockSumPair in x86.h).
struct AmxStagedActs {
  const std::int8_t* tiles = nullptr;
  const float* d = nullptr;
  const std::int32_t* pairs = nullptr;
  int rows = 0;  // activation rows staged
};
// MatMulMany lays out chunks of at least this many rows (one tile); the
// kernels lay out smaller calls themselves, if they take them to the tiles.
inline constexpr int kAmxStageMinRows = 16;
// The storage one staging writes into (reused: it only grows).
struct AmxActStage {
  struct alignas(64) Line {
    std::int8_t bytes[64];
  };
  std::vector<Line> tiles;
  std::vector<float> d;
  std::vector<std::int32_t> pairs;
};

// A row kernel: y[j * y_stride + r] = dot(weight row r, activation row j)
// for the weight rows r < nrows (row r at w + r * nb: nb blocks each, rows
// packed) and the activation rows j < acts (1 <= acts <= kMaxActRows; row j
// at x + j * x_stride, in activation blocks: one per weight block, except
// IQ4_XS: 8, NVFP4 / Q2_0: 2, Q1_0: 4). A row's result is the same, bit for
// bit, whether it is computed alone or in a group, and whatever nrows is.
template <typename Block, typename Act>
using RowsKernel = void(const Block* w, std::int64_t nrows, const Act* x, std::int64_t x_stride, std::int64_t nb,
                        int acts, float* y, std::int64_t y_stride);
template <typename Block, typename Act>
using DotRowsFn = RowsKernel<Block, Act>*;

struct PackedWeights;

// Weight rows [r0, r1) (multiples of kPackRows) of packed weights (Act: ActQ8
// for Q8_0 / Q4_0 / Q5_0 / IQ4_NL / IQ4_XS, ActQ8K for the K-quants) against
// activation rows j < acts (row j at x + j * x_stride; acts <= kMaxActRows,
// kMaxAmxActRows for the AMX level's); y points at row r0's output for
// activation row 0 (y[j * y_stride + r - r0]). staged: the same rows laid
// out by AmxStageQ8 / AmxStageQ8K, or null; the AMX level's kernels read it
// instead of staging the rows themselves, the other levels ignore it.
template <typename Act>
using PackedKernel = void(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const Act* x, std::int64_t x_stride,
                          int acts, float* y, std::int64_t y_stride, const AmxStagedActs* staged);

// The kernels, one line per type: its scalar twin, then its SIMD kernels.
// Each is defined in kernels/<level>/<family>.cc (the family: the table above).
RowsKernel<BlockQ8_0, ActQ8> ScalarQ8_0Rows;
RowsKernel<BlockQ4_0, ActQ8> ScalarQ4_0Rows;
RowsKernel<BlockQ4_1, ActQ8> ScalarQ4_1Rows;
RowsKernel<BlockQ5_0, ActQ8> ScalarQ5_0Rows;
RowsKernel<BlockQ5_1, ActQ8> ScalarQ5_1Rows;
RowsKernel<BlockQ2_K, ActQ8K> ScalarQ2_KRows;
RowsKernel<BlockQ3_K, ActQ8K> ScalarQ3_KRows;
RowsKernel<BlockQ4_K, ActQ8K> ScalarQ4_KRows;
RowsKernel<BlockQ5_K, ActQ8K> ScalarQ5_KRows;
RowsKernel<BlockQ6_K, ActQ8K> ScalarQ6_KRows;
RowsKernel<BlockIQ4_NL, ActQ8> ScalarIQ4_NLRows;
RowsKernel<BlockIQ4_XS, ActQ8> ScalarIQ4_XSRows;
RowsKernel<BlockMXFP4, ActQ8> ScalarMXFP4Rows;
RowsKernel<BlockNVFP4, ActQ8> ScalarNVFP4Rows;
RowsKernel<BlockTQ1_0, ActQ8K> ScalarTQ1_0Rows;
RowsKernel<BlockTQ2_0, ActQ8K> ScalarTQ2_0Rows;
RowsKernel<BlockQ1_0, ActQ8> ScalarQ1_0Rows;
RowsKernel<BlockQ2_0, ActQ8> ScalarQ2_0Rows;
// The IQ1-IQ3 grid types: one template over the 7 block types (defined for
// each in scalar/iq.cc, avx2/iq.cc and avx512/iq.cc).
template <typename Block>
void ScalarIqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys);

// KVSHARE_SCALAR_KERNELS_ONLY: a build of the quant layer with the scalar
// twins alone (the fuzz targets: clang-14 does not compile the SIMD files).
#if (defined(__x86_64__) || defined(_M_X64)) && !defined(KVSHARE_SCALAR_KERNELS_ONLY)
#define KVSHARE_HAVE_X86_KERNELS 1
RowsKernel<BlockQ8_0, ActQ8> Avx2Q8_0Rows, Avx512Q8_0Rows;
RowsKernel<BlockQ4_0, ActQ8> Avx2Q4_0Rows, Avx512Q4_0Rows;
RowsKernel<BlockQ4_1, ActQ8> Avx2Q4_1Rows, Avx512Q4_1Rows;
RowsKernel<BlockQ5_0, ActQ8> Avx2Q5_0Rows, Avx512Q5_0Rows;
RowsKernel<BlockQ5_1, ActQ8> Avx2Q5_1Rows, Avx512Q5_1Rows;
RowsKernel<BlockQ2_K, ActQ8K> Avx2Q2_KRows;
RowsKernel<BlockQ3_K, ActQ8K> Avx2Q3_KRows;
RowsKernel<BlockQ4_K, ActQ8K> Avx2Q4_KRows, Avx512Q4_KRows;
RowsKernel<BlockQ5_K, ActQ8K> Avx2Q5_KRows, Avx512Q5_KRows;
RowsKernel<BlockQ6_K, ActQ8K> Avx2Q6_KRows, Avx512Q6_KRows;
RowsKernel<BlockIQ4_NL, ActQ8> Avx2IQ4_NLRows;
RowsKernel<BlockIQ4_XS, ActQ8> Avx2IQ4_XSRows;
RowsKernel<BlockMXFP4, ActQ8> Avx2MXFP4Rows;
RowsKernel<BlockNVFP4, ActQ8> Avx2NVFP4Rows;
RowsKernel<BlockTQ1_0, ActQ8K> Avx2TQ1_0Rows;
RowsKernel<BlockTQ2_0, ActQ8K> Avx2TQ2_0Rows;
RowsKernel<BlockQ1_0, ActQ8> Avx2Q1_0Rows;
RowsKernel<BlockQ2_0, ActQ8> Avx2Q2_0Rows;
template <typename Block>
void Avx2IqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                float* y, std::int64_t ys);
template <typename Block>
void Avx512IqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys);
template <typename Block>
void AmxIqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
               float* y, std::int64_t ys);
PackedKernel<ActQ8> Avx2PackedRows, Avx512PackedRows, AmxPackedRows;
PackedKernel<ActQ8K> Avx2PackedKRows, Avx512PackedKRows, AmxPackedKRows;
// Activation rows j < acts of x (row j at x + j * x_stride, nb blocks each)
// laid out into `stage` for the AMX level's kernels (AmxStagedActs).
AmxStagedActs AmxStageQ8(const ActQ8* x, std::int64_t x_stride, std::int64_t nb, int acts, AmxActStage& stage);
AmxStagedActs AmxStageQ8K(const ActQ8K* x, std::int64_t x_stride, std::int64_t nb, int acts, AmxActStage& stage);
#endif

// Float-weight dot products (kernels/float.cc: Highway, dynamically dispatched).
float DotF32(const float* w, const float* x, std::int64_t n);
float DotF16(const std::uint16_t* w, const float* x, std::int64_t n);
float DotBF16(const std::uint16_t* w, const float* x, std::int64_t n);
// Their RowsKernels (nb = elements a row): register tiles of several weight and
// activation rows, each output bitwise equal to the Dot above.
RowsKernel<float, float> RowsF32;
RowsKernel<std::uint16_t, float> RowsF16, RowsBF16;

}  // namespace kvshare::detail
