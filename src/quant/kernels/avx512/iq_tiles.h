// The tile decode of the IQ1-IQ3 grid kernels with many activation rows
// (avx512/iq.cc, amx/iq.cc): 16 weight rows' blocks into the layout of the
// packed kernels (packed.h: 16 rows in the lanes, each 4-byte group of
// elements in one 64-byte vector), codes = v + 64 unsigned, with the odd
// scales per 16-element group and row and the block factors. Compiled with
// the AVX-512 files' flags (or the AMX files', a superset); in an anonymous
// namespace as x86.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "quant/kernels/iq_decode.h"

namespace kvshare::detail {
namespace {

constexpr int kIqTileRows = 16;            // weight rows per tile (the lanes)
constexpr int kCodeBias = 64;              // |v| <= 62: v + 64 is an unsigned byte
constexpr int kBlockVectors = 64 + 4 + 1;  // per block: codes, scales (256 bytes), factors (16 floats)

// One tile's decoded blocks, kBlockVectors 64-byte vectors per block.
struct Tile {
  __m512i* at;
  __m512i* Codes(std::int64_t b) const { return at + kBlockVectors * b; }
  std::int8_t* Scales(std::int64_t b) const { return reinterpret_cast<std::int8_t*>(at + kBlockVectors * b + 64); }
  float* Factors(std::int64_t b) const { return reinterpret_cast<float*>(at + kBlockVectors * b + 68); }
};

// Rows [t0, t1) of a tile's block b (rows of w, nb blocks each): v + 64 of
// row t's elements into rows[t], ls[16 g + t] the scale of group g of row
// t, factor[t] row t's IqFactor.
template <typename Block>
void DecodeTileRows(const Block* w, std::int64_t nb, std::int64_t b, int t0, int t1, std::uint8_t (*rows)[256],
                    std::int8_t* ls, float* factor) {
  const __m256i bias = _mm256_set1_epi8(kCodeBias);
  for (int t = t0; t < t1; ++t) {
    const Block& blk = w[t * nb + b];
    for (int ib = 0; ib < 8; ++ib) {
      const Sub s = Decode(blk, ib);
      _mm256_store_si256(reinterpret_cast<__m256i*>(rows[t] + 32 * ib), _mm256_add_epi8(s.v, bias));
      ls[16 * (2 * ib) + t] = static_cast<std::int8_t>(_mm256_extract_epi16(s.ls, 0));
      ls[16 * (2 * ib + 1) + t] = static_cast<std::int8_t>(_mm256_extract_epi16(s.ls, 8));
    }
    factor[t] = IqFactor(blk);
  }
}

// Code vectors [k0, k1) of the 16 decoded rows (vector k: elements 4k .. 4k
// + 3 of each) in order to sink(k, code vector): stored, or scaled and split
// (amx/iq.cc), without a round trip through memory.
template <typename Sink>
void GatherCodes(const std::uint8_t (*rows)[256], int k0, int k1, Sink&& sink) {
  // Dword index of row t's first 4-byte group in `rows`.
  const __m512i row_start = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(64));
  for (int k = k0; k < k1; ++k) {
    sink(k, _mm512_i32gather_epi32(_mm512_add_epi32(row_start, _mm512_set1_epi32(k)), rows, 4));
  }
}

// Rows [0, 16) of w (nb blocks each) into the tile.
template <typename Block>
void DecodeTile(const Block* w, std::int64_t nb, const Tile& tile) {
  alignas(64) std::uint8_t rows[kIqTileRows][256];
  for (std::int64_t b = 0; b < nb; ++b) {
    __m512i* codes = tile.Codes(b);
    DecodeTileRows(w, nb, b, 0, kIqTileRows, rows, tile.Scales(b), tile.Factors(b));
    GatherCodes(rows, 0, 64, [codes](int k, __m512i c) { codes[k] = c; });
  }
}

}  // namespace
}  // namespace kvshare::detail
