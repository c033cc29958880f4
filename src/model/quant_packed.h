// Weights of the 32-element block types Q8_0 / Q4_0 / Q5_0 repacked for the
// AVX-512 VNNI kernel with weight rows in the lanes (quant_avx512_packed.cc).
//
// The ggml layouts keep each row's blocks together, so a kernel that puts
// activation rows in the SIMD lanes must spread every 4-byte group of weight
// codes across them (one permute per vpdpbusd: the AVX-512 kernels of
// quant_avx512_q32.cc reach about a third of the vpdpbusd rate at 8
// activation rows). Here 16 weight rows are interleaved at load time: for a
// group of 16 rows and block b, the 4-byte code group k (elements 4k..4k+3)
// of the 16 rows fills one 64-byte vector, row t in bytes 4t..4t+3, so a
// vpdpbusd takes it against one activation row's 4 bytes broadcast from
// memory and no shuffle is left in the inner loop.
//
// Per group of 16 rows (rows 16g .. 16g+15), for each block b in order:
//   codes:  Q8_0: 8 vectors, vector k = the rows' bytes 4k..4k+3 as unsigned
//           codes (int8 value + 128); Q4_0 / Q5_0: 4 vectors, vector k = the
//           rows' qs bytes 4k..4k+3 as stored (low nibbles: elements 4k..4k+3,
//           high nibbles: elements 16+4k..16+4k+3);
//   high:   Q5_0 only: 8 64-bit masks, bit 4t+i of mask k = fifth bit of
//           element 4k+i of row t;
//   scales: the 16 rows' fp16 block scales, row order.
// The bytes are the file's, only reordered (same size), so a kernel on this
// layout computes every output with exactly the arithmetic of the others
// (quant_avx512_q32.cc's file comment): bitwise the same results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "kvshare/gguf.h"

namespace kvshare::detail {

inline constexpr int kPackRows = 16;  // weight rows per interleaved group

struct PackedWeights {
  GgmlType type = GgmlType::kQ8_0;  // Q8_0, Q4_0 or Q5_0
  std::int64_t rows = 0;            // a multiple of kPackRows
  std::int64_t nb = 0;              // blocks per row (cols / 32)
  const std::uint8_t* codes = nullptr;    // [rows / 16][nb][CodeBytes(type)]
  const std::uint64_t* high = nullptr;    // Q5_0: [rows / 16][nb][8]; else null
  const std::uint16_t* scales = nullptr;  // [rows / 16][nb][16]
  std::unique_ptr<void, void (*)(void*)> storage{nullptr, std::free};  // the three arrays (64-byte aligned)

  // Code bytes per (group, block): 512 for Q8_0, 256 for Q4_0 / Q5_0.
  static constexpr std::size_t CodeBytes(GgmlType t) { return t == GgmlType::kQ8_0 ? 512 : 256; }
};

// Whether Pack can repack a matrix of this type and row count (a type above,
// rows a positive multiple of kPackRows).
bool CanPack(GgmlType type, std::int64_t rows);

// The packed copy of `rows` rows of `nb` blocks of `type` at data (ggml
// layout). Requires CanPack(type, rows).
std::shared_ptr<const PackedWeights> Pack(const void* data, GgmlType type, std::int64_t rows, std::int64_t nb);

}  // namespace kvshare::detail
