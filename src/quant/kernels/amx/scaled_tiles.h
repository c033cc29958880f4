// The tile steps of the AMX kernels that fold an integer scale per group of
// 16 elements into their weights (amx/packed_k.cc: the K-quants; amx/iq.cc:
// the IQ1-IQ3 grid types): the weights s * value, exact in int16, split into
// a low (unsigned) and a high (signed) byte plane, and per block of 256
// elements and 16 activation rows 4 K-steps of 64 bytes, C_lo by tdpbsud and
// C_hi by tdpbssd, so that P = 256 C_hi + C_lo. Compiled with the AMX files'
// flags only; in an anonymous namespace as x86.h.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "common/amx_tiles.h"
#include "quant/quant.h"

namespace kvshare::detail {
namespace {

// Bytes of one plane (lo or hi) of one super-block: 64 B-tile rows of 64
// (256 elements of 16 weight rows), K-step q at 1024 q.
constexpr std::size_t kPlaneBytes = 4096;

// Tiles 0 / 1: A of the even / odd K-steps (16 activation rows of 64
// bytes); 2, 3: B_lo, B_hi (16 rows of 64 bytes: 64 elements of 16 weight
// rows); 4, 5 and 6, 7: two sets of C_lo, C_hi (16 rows of 16 int32), for
// alternate chunks, so one chunk's sums are stored and scaled while the next
// one's products run.
const TileConfig& KTiles() { return FullTiles(); }

// One group's scales for ScaleSplit, from the 16 rows' scales s (int32
// lanes, each in int8 range) and the codes' bias: the scale byte at the even
// (sE) and odd (sO) bytes of each lane, and bias * s as two int16 (sb).
struct GroupScales {
  __m512i sE, sO, sb;
  GroupScales(__m512i s, int bias) {
    const __m512i s8 = _mm512_and_si512(s, _mm512_set1_epi32(0xFF));
    sE = _mm512_or_si512(s8, _mm512_slli_epi32(s8, 16));
    sO = _mm512_slli_epi32(sE, 8);
    const __m512i b = _mm512_mullo_epi32(s, _mm512_set1_epi32(bias));
    sb = _mm512_or_si512(_mm512_slli_epi32(b, 16), _mm512_and_si512(b, _mm512_set1_epi32(0xFFFF)));
  }
};

// One code vector c (unsigned codes) scaled: w = s (c - bias) per byte, exact
// in int16 (vpmaddubsw against the scale at one byte of each pair and 0 at
// the other: c s, at most 63 * 128 (K-quants), 126 * 31 (IQ)), its bytes
// lo, hi into the two planes.
template <bool kHi, bool kBias>
inline void ScaleSplit(__m512i c, const GroupScales& s, std::uint8_t* lo, std::uint8_t* hi) {
  constexpr __mmask64 kOdd = 0xAAAAAAAAAAAAAAAAull;
  __m512i pe = _mm512_maddubs_epi16(c, s.sE), po = _mm512_maddubs_epi16(c, s.sO);
  if constexpr (kBias) pe = _mm512_sub_epi16(pe, s.sb), po = _mm512_sub_epi16(po, s.sb);
  _mm512_store_si512(lo, _mm512_mask_blend_epi8(kOdd, pe, _mm512_slli_epi16(po, 8)));
  if constexpr (kHi) _mm512_store_si512(hi, _mm512_mask_blend_epi8(kOdd, _mm512_srli_epi16(pe, 8), po));
}

// K-step kOdd of one super-block: A = 16 activation rows of 64 bytes (tile
// 0 / 1 on even / odd steps, so one step's load can start while the other's
// products still read), B_lo, B_hi (tiles 2, 3) against the planes' K-step
// at lo, hi, into C set kSet (tiles 4, 5 or 6, 7).
constexpr std::size_t kTileBytes = kTileRows * 64;
template <bool kHi, int kSet, int kOdd>
inline void Step(const std::int8_t* a, const std::uint8_t* lo, const std::uint8_t* hi) {
  constexpr int kC = 4 + 2 * kSet;
  TileLoad<kOdd, kTileBytes>(a, 64);
  TileLoad<2, kTileBytes>(lo, 64);
  if constexpr (kHi) TileLoad<3, kTileBytes>(hi, 64);
  TileDpbsud<kC, kOdd, 2>();
  if constexpr (kHi) TileDpbssd<kC + 1, kOdd, 3>();
}

// Zeroes C set kSet.
template <bool kHi, int kSet>
inline void ZeroC() {
  TileZero<4 + 2 * kSet>();
  if constexpr (kHi) TileZero<5 + 2 * kSet>();
}

// One super-block's C_lo, C_hi into C set kSet for 16 activation rows a
// (AmxStageQ8K in dispatch.h: 4 K-steps of 16 rows of 64 bytes).
template <bool kHi, int kSet>
inline void TileBlock(const std::int8_t* a, const std::uint8_t* lo, const std::uint8_t* hi) {
  ZeroC<kHi, kSet>();
  Step<kHi, kSet, 0>(a, lo, hi);
  Step<kHi, kSet, 1>(a + 1024, lo + 1024, hi + 1024);
  Step<kHi, kSet, 0>(a + 2048, lo + 2048, hi + 2048);
  Step<kHi, kSet, 1>(a + 3072, lo + 3072, hi + 3072);
}

// C set kSet into c[0] (C_lo), c[1] (C_hi): 16 activation rows of 16 int32.
template <bool kHi, int kSet>
inline void StoreC(std::int32_t c[2][kTileRows][16]) {
  TileStore<4 + 2 * kSet, kTileBytes>(c[0], 64);
  if constexpr (kHi) TileStore<5 + 2 * kSet, kTileBytes>(c[1], 64);
}

}  // namespace
}  // namespace kvshare::detail
