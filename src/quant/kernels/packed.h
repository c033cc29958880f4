// Weights repacked for the kernels with weight rows in the lanes
// (avx2/ and avx512/ packed_q32.cc: Q8_0 / Q4_0 / Q5_0 / IQ4_NL / IQ4_XS /
// MXFP4; packed_k.cc: Q4_K / Q6_K / Q2_K / Q3_K; which runs when:
// dispatch.h).
//
// The ggml layouts keep each row's blocks together, so a kernel that puts
// activation rows in the SIMD lanes must spread every 4-byte group of weight
// codes across them (one permute per vpdpbusd: the AVX-512 kernels of
// avx512/q32.cc / avx512/k_quants.cc reach about a third of the
// vpdpbusd rate at 8 activation rows). Here 16 weight rows are interleaved
// at load time: for a group of 16 rows and block b, the 4-byte code group k
// (elements 4k..4k+3) of the 16 rows fills one 64-byte vector, row t in
// bytes 4t..4t+3, so a vpdpbusd takes it against one activation row's 4
// bytes broadcast from memory and no shuffle is left in the inner loop.
//
// Planes, each [rows / 16][nb][PlaneBytes(type).x] for block b of group g
// (a block is 32 elements for Q8_0 / Q4_0 / Q5_0 / IQ4_NL, 256 for the K-quants):
//   codes   Q8_0: vector k (k < 8) = the rows' bytes 4k..4k+3 as unsigned
//           codes (int8 value + 128). Q4_0 / Q5_0 / IQ4_NL: vector k (k < 4)
//           = the rows' qs bytes 4k..4k+3 as stored (low nibbles: group k,
//           high nibbles: group k + 4; IQ4_NL's and MXFP4's are indices into
//           their grids). Q4_K: vector 8c + k (c < 4, k < 8) = the
//           rows' qs bytes 32c + 4k .. +3 as stored (low nibbles: group 16c
//           + k of sub-block 2c, high nibbles: of sub-block 2c + 1). Q6_K:
//           vector k (k < 32) = the low 4 bits of group k's codes (codes are
//           value + 32, 0..63) in the low nibbles and of group k + 32's in
//           the high nibbles. Q2_K / Q3_K: vector k (k < 16) = the 2-bit
//           codes of groups k, k + 16, k + 32, k + 48 at bits 0-1, 2-3, 4-5,
//           6-7 of each byte;
//   high    Q5_0: 8 64-bit masks, bit 4t + i of mask k = fifth bit of
//           element 4k + i of row t. Q6_K: vector k (k < 16) = the top 2
//           code bits of groups k, k + 16, k + 32, k + 48 at bits 0-1, 2-3,
//           4-5, 6-7 of each byte. Q3_K: vector k (k < 8) = the high code
//           bits of groups k, k + 8, ..., k + 56 at bits 0, 1, ..., 7;
//   subs    Q4_K: [8 sub-blocks][16 rows] 6-bit scales; Q6_K: [16 groups of
//           16 elements][16 rows] int8 scales; Q2_K: the same with the
//           stored byte (scale | min << 4); Q3_K: with the int8 sc_g - 32;
//   mins    Q4_K: [4 pairs q][16 rows][2]: the 6-bit mins of sub-blocks 2q
//           and 2q + 1;
//   d       the 16 rows' fp16 block scales, row order;
//   dmin    Q4_K / Q2_K: the 16 rows' fp16 dmin;
//   dsub    IQ4_XS: the 16 rows' sub-block scales d * (ls - 32) in fp32
//           (IQ4XSSubScale), row order. IQ4_XS packs each 32-element
//           sub-block as an IQ4_NL block with this scale: nb counts
//           sub-blocks, 8 per super-block. MXFP4: the E8M0 block scale
//           2^(e - 128) (Mxfp4Scale), exact in fp32.
// Codes and scales are the file's (reordered, not re-rounded), so a kernel on
// this layout computes every output with exactly the arithmetic of the
// others (the file comments of avx512/q32.cc and avx512/k_quants.cc):
// bitwise the same results. Sizes: as stored, except Q4_K's unpacked scales
// and mins (148 bytes per row and super-block instead of 144) and Q3_K's
// unpacked scales (114 instead of 110).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "common/prefetch.h"
#include "kvshare/gguf/gguf.h"
#include "quant/quant.h"

namespace kvshare::detail {

inline constexpr int kPackRows = 16;  // weight rows per interleaved group

// Code bytes the kernels prefetch ahead of the block they read. A matrix
// larger than the caches (the LM head) streams from DRAM; with only the
// hardware prefetchers an 8-row step over the 178 MB Gemma 3 head took longer
// than the unpacked kernel, and 4 KiB ahead gave the best model step times of
// the distances tried (2, 4, 8 KiB; kvshare bench, 2 threads).
inline constexpr std::size_t kPackedPrefetchAhead = 4096;

// Prefetches the `bytes` bytes kPackedPrefetchAhead past p into L2 (T1), not
// L1: with each block's 16-48 line prefetches going to L1, 8-row steps over
// weights streamed from DRAM ran slower (MatPackedDram Q4_K / Q6_K at m = 8;
// docs/kernels.md).
inline void PrefetchPackedAhead(const void* p, std::size_t bytes) {
  PrefetchToL2(static_cast<const char*>(p) + kPackedPrefetchAhead, bytes);
}

// Bytes of each plane per (group of 16 rows, block); 0: the type has none.
struct PlaneBytes {
  std::size_t codes = 0, high = 0, subs = 0, mins = 0, d = 0, dmin = 0, dsub = 0;
  std::size_t Total() const { return codes + high + subs + mins + d + dmin + dsub; }
};
// The planes in PlaneBytes order.
inline constexpr int kPackPlanes = 7;

// Packs `rows` rows (a multiple of kPackRows) of nb blocks at w (ggml layout)
// into the planes (plane[i] in PlaneBytes order, zeroed; null where the type
// has none), `sub` packed blocks per block (the type's activation blocks per
// block: IQ4_XS 8, the others 1). Defined in packed.cc for the blocks with a
// packed layout, each through its per-row pack function there (IQ4_XS: a
// loop of its own, one sub-block at a time).
template <typename Block>
void PackRows(const Block* w, std::int64_t rows, std::int64_t nb, std::int64_t sub, const PlaneBytes& pb,
              std::uint8_t* const plane[kPackPlanes]);
// PackRows with the block type erased.
using PackFn = void (*)(const void* w, std::int64_t rows, std::int64_t nb, std::int64_t sub, const PlaneBytes& pb,
                        std::uint8_t* const plane[kPackPlanes]);

// A type's packed layout (its row of quant/weight_types.cc).
struct PackLayout {
  PlaneBytes planes;      // per packed block
  PackFn pack = nullptr;  // null: the type has no packed layout
};

struct PackedWeights {
  GgmlType type = GgmlType::kQ8_0;  // Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS, MXFP4, Q2_K, Q3_K, Q4_K or Q6_K
  std::int64_t rows = 0;            // a multiple of kPackRows
  std::int64_t nb = 0;              // blocks per row (IQ4_XS: its 32-element sub-blocks)
  PlaneBytes bytes;                 // the type's PackLayout planes
  // The planes (64-byte aligned; null where the type has none).
  const std::uint8_t* codes = nullptr;
  const std::uint8_t* high = nullptr;
  const std::uint8_t* subs = nullptr;
  const std::uint8_t* mins = nullptr;
  const std::uint16_t* d = nullptr;
  const std::uint16_t* dmin = nullptr;
  const float* dsub = nullptr;
  std::unique_ptr<void, void (*)(void*)> storage{nullptr, std::free};  // owns the planes
};

// How the packed 32-element types' codes read (avx2/ and avx512/
// packed_q32.cc, each of which adds its own bias to them):
// 4-bit indices into a 16-value grid: kIq4Values, or MXFP4's kMxfp4Values.
template <GgmlType kType>
inline constexpr bool kPackedGrid =
    kType == GgmlType::kIQ4_NL || kType == GgmlType::kIQ4_XS || kType == GgmlType::kMXFP4;
template <GgmlType kType>
inline const std::int8_t* PackedGridValues() {
  return kType == GgmlType::kMXFP4 ? kMxfp4Values : kIq4Values;
}
// Signed values (Q8_0's stored + 128, the grids' once looked up) rather than
// unsigned codes with an offset.
template <GgmlType kType>
inline constexpr bool kPackedSigned = kType == GgmlType::kQ8_0 || kPackedGrid<kType>;
// The unsigned codes' offset, value = code - offset: Q5_0 16, Q4_0 8.
template <GgmlType kType>
inline constexpr int kPackedCodeOffset = kPackedSigned<kType>       ? 0
                                         : kType == GgmlType::kQ5_0 ? 16
                                                                    : 8;
// Whose scales are the fp32 dsub plane rather than the fp16 d plane.
template <GgmlType kType>
inline constexpr bool kPackedFloatScales = kType == GgmlType::kIQ4_XS || kType == GgmlType::kMXFP4;

// Whether Pack can repack a matrix of this type and row count (a type with a
// packed layout, rows a positive multiple of kPackRows).
bool CanPack(GgmlType type, std::int64_t rows);

// The packed copy of `rows` rows of `nb` blocks of `type` at data (ggml
// layout). Throws kvshare::Error unless CanPack(type, rows) and nb > 0.
std::shared_ptr<const PackedWeights> Pack(const void* data, GgmlType type, std::int64_t rows, std::int64_t nb);

// This thread's scratch for at least `vectors` 64-byte code vectors (64-byte
// aligned; kept and grown between calls, contents undefined): where a kernel
// making several passes over a group of rows decodes its codes once.
void* DecodedCodeScratch(std::size_t vectors);

}  // namespace kvshare::detail
