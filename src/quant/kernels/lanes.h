// Layout helpers shared by the kernels that hold 8 activation rows (lanes
// layout) or 8 weight rows (rows layout) in the lanes of a 256-bit half:
// q32_lanes.h (Q8_0 / Q4_0 / Q5_0) and avx512/k_quants.cc (K-quants).
// Everything is in an anonymous namespace so each kernel file gets its own
// copy under its own target flags (as x86.h).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace kvshare::detail {
namespace {

constexpr int kLanes = 8;  // activation rows per group (lanes of a 256-bit half)

// 32-byte slots in 64-byte aligned storage (a pair of slots loads as one zmm).
struct Slots {
  struct alignas(64) Vec64 {
    std::uint8_t bytes[64];
  };
  std::vector<Vec64> v;
  void Assign(std::size_t n) { v.assign((n + 1) / 2, Vec64{}); }
  std::uint8_t* operator[](std::size_t i) { return v.data()->bytes + 32 * i; }
  const std::uint8_t* operator[](std::size_t i) const { return v.data()->bytes + 32 * i; }
};

inline std::int64_t Even(std::int64_t nb) { return (nb + 1) & ~std::int64_t{1}; }

// The slot of an activation layout's x holding bytes 4k .. 4k+3 of block b
// for group g, ne = Even(nb) blocks per group: blocks 2q and 2q+1 sit in
// adjacent slots so that they load as one zmm per k (q32_lanes.h's
// LaneActs, avx512/k_quants.cc's KLaneActs).
inline std::size_t XSlot(std::int64_t g, std::int64_t ne, std::int64_t b, int k) {
  return static_cast<std::size_t>((g * ne + (b & ~std::int64_t{1})) * 8 + 2 * k + (b & 1));
}

// Group g's results (out[t] lane j: activation row 8g + j, weight row r0 + t)
// into y, for the rows below acts.
template <int T>
void StoreLaneGroup(const __m256 out[T], std::int64_t g, int acts, std::int64_t r0, float* y, std::int64_t ys) {
  const int lanes = std::min<int>(kLanes, acts - static_cast<int>(g) * kLanes);
  for (int t = 0; t < T; ++t) {
    alignas(32) float v[kLanes];
    _mm256_store_ps(v, out[t]);
    for (int j = 0; j < lanes; ++j) y[(g * kLanes + j) * ys + r0 + t] = v[j];
  }
}

// Lane t = the sum of v[t]'s 8 int32 lanes.
inline __m256i SumLanes8(const __m256i v[8]) {
  const __m256i h0 = _mm256_hadd_epi32(v[0], v[1]), h1 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h2 = _mm256_hadd_epi32(v[4], v[5]), h3 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i g0 = _mm256_hadd_epi32(h0, h1), g1 = _mm256_hadd_epi32(h2, h3);
  return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
}

// y[j ys + r0 + t] = lane t of acc[j] for t < valid.
template <int R>
void StoreRowsLanes(const __m256 acc[R], int valid, std::int64_t r0, float* y, std::int64_t ys) {
  for (int j = 0; j < R; ++j) {
    alignas(32) float v[8];
    _mm256_store_ps(v, acc[j]);
    for (int t = 0; t < valid; ++t) y[j * ys + r0 + t] = v[t];
  }
}

// Prefetches bytes [from, from + len) of base, clipped to [0, total). The
// kernels read a tile's rows block by block, interleaved streams that the
// hardware prefetchers follow poorly from DRAM (the LM head at m = 1 ran at a
// quarter of the bandwidth without this), so they prefetch tiles ahead whole.
inline void PrefetchBytes(const char* base, std::int64_t from, std::int64_t len, std::int64_t total) {
  const std::int64_t end = std::min(total, from + len);
  for (std::int64_t o = from; o < end; o += 64) _mm_prefetch(base + o, _MM_HINT_T0);
}

#if defined(__AVX512F__) && defined(__AVX512VNNI__)
// The lanes layout's inner step on 512-bit vectors: w2 holds a weight row's
// codes for two 32-element halves (blocks b, b+1, or a K-quant chunk's two
// halves), xk[k] the activation rows' bytes 4k .. 4k+3 of both halves (8
// rows each). Each code group k is spread over its half (two 128-bit-lane
// shuffles, then an in-lane vpshufd) and dotted with xk[k] by vpdpbusd:
// groups 0-3 accumulate into lo, 4-7 into hi (two independent chains; the
// sums are exact int32, so any split gives the same total).
inline void DotGroups(__m512i w2, const __m512i xk[8], __m512i& lo, __m512i& hi) {
  const __m512i w03 = _mm512_shuffle_i64x2(w2, w2, _MM_SHUFFLE(2, 2, 0, 0));
  const __m512i w47 = _mm512_shuffle_i64x2(w2, w2, _MM_SHUFFLE(3, 3, 1, 1));
  lo = _mm512_dpbusd_epi32(lo, _mm512_shuffle_epi32(w03, _MM_PERM_AAAA), xk[0]);
  hi = _mm512_dpbusd_epi32(hi, _mm512_shuffle_epi32(w47, _MM_PERM_AAAA), xk[4]);
  lo = _mm512_dpbusd_epi32(lo, _mm512_shuffle_epi32(w03, _MM_PERM_BBBB), xk[1]);
  hi = _mm512_dpbusd_epi32(hi, _mm512_shuffle_epi32(w47, _MM_PERM_BBBB), xk[5]);
  lo = _mm512_dpbusd_epi32(lo, _mm512_shuffle_epi32(w03, _MM_PERM_CCCC), xk[2]);
  hi = _mm512_dpbusd_epi32(hi, _mm512_shuffle_epi32(w47, _MM_PERM_CCCC), xk[6]);
  lo = _mm512_dpbusd_epi32(lo, _mm512_shuffle_epi32(w03, _MM_PERM_DDDD), xk[3]);
  hi = _mm512_dpbusd_epi32(hi, _mm512_shuffle_epi32(w47, _MM_PERM_DDDD), xk[7]);
}
#endif

// The drivers of both layouts over a task's nrows weight rows (nb blocks of
// Block each, rows packed):
//  - ForLaneTiles: tiles of 4 rows, then the 1-3 left, the tile two ahead
//    prefetched; tile(std::integral_constant<int, T>, r0) computes rows
//    r0 .. r0+T-1 (lanes layout);
//  - ForRowTiles: tiles of 8 rows (past the end: the last row again, not
//    stored), the tile two ahead prefetched; tile(rows[8], valid, r0) (rows
//    layout);
//  - ByActs: the layout for `acts` activation rows: lanes() from 4 on, else
//    rows(std::integral_constant<int, acts>).
template <typename Block, class Tile>
void ForLaneTiles(const Block* w, std::int64_t nrows, std::int64_t nb, Tile&& tile) {
  constexpr int kT = 4;
  const char* base = reinterpret_cast<const char*>(w);
  const std::int64_t row_bytes = nb * static_cast<std::int64_t>(sizeof(Block)), total = nrows * row_bytes;
  std::int64_t r = 0;
  for (; r + kT <= nrows; r += kT) {
    PrefetchBytes(base, (r + 2 * kT) * row_bytes, kT * row_bytes, total);
    tile(std::integral_constant<int, kT>{}, r);
  }
  switch (nrows - r) {
    case 1: tile(std::integral_constant<int, 1>{}, r); break;
    case 2: tile(std::integral_constant<int, 2>{}, r); break;
    case 3: tile(std::integral_constant<int, 3>{}, r); break;
    default: break;
  }
}

template <typename Block, class Tile>
void ForRowTiles(const Block* w, std::int64_t nrows, std::int64_t nb, Tile&& tile) {
  const char* base = reinterpret_cast<const char*>(w);
  const std::int64_t row_bytes = nb * static_cast<std::int64_t>(sizeof(Block)), total = nrows * row_bytes;
  for (std::int64_t r0 = 0; r0 < nrows; r0 += 8) {
    PrefetchBytes(base, (r0 + 16) * row_bytes, 8 * row_bytes, total);
    const int valid = static_cast<int>(std::min<std::int64_t>(8, nrows - r0));
    const Block* rows[8];
    for (int t = 0; t < 8; ++t) rows[t] = w + (r0 + std::min(t, valid - 1)) * nb;
    tile(rows, valid, r0);
  }
}

template <class Lanes, class Rows>
void ByActs(int acts, Lanes&& lanes, Rows&& rows) {
  switch (acts) {
    case 1: rows(std::integral_constant<int, 1>{}); break;
    case 2: rows(std::integral_constant<int, 2>{}); break;
    case 3: rows(std::integral_constant<int, 3>{}); break;
    default: lanes(); break;
  }
}

// The 8 fp16 values in the low halves of the int32 lanes, as floats.
inline __m256 LowHalvesToFloat(__m256i v) {
#if defined(__AVX512VL__) && defined(__AVX512F__)
  return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(v));
#else
  const __m256i pick = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                        0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, pick), 0x08);  // qwords 0, 2
  return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
#endif
}

}  // namespace
}  // namespace kvshare::detail
