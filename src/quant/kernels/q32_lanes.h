// The activation layout of the 32-element block kernels with activation rows
// in the lanes (avx512/q32.cc, avx2/q32.cc): groups of 8 rows,
// 4-byte groups of each block interleaved across the rows. Everything is in an
// anonymous namespace so each kernel file gets its own copy under its own
// target flags (as x86.h).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "quant/kernels/lanes.h"
#include "quant/kernels/x86.h"
#include "quant/quant.h"

namespace kvshare::detail {
namespace {

constexpr int kTile = 4;  // weight rows per decoded tile (ForLaneTiles' tile)

// The activation rows of one call in groups of kLanes, with ne = Even(nb)
// slots per group and block: for block b = 2q + h of group g, slot
// (g ne + 2q) 8 + 2k + h holds bytes 4k .. 4k+3 of each row's block in lane j
// (row 8g + j), so the two blocks of a pair load as one zmm per k; slot
// g ne + b of init holds -bias sum x per lane, of d the scale dx per lane.
// Rows past `acts` are zero (their outputs are not stored).
struct LaneActs {
  Slots x, init, d;
};

void MakeLaneActs(const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts, int bias, LaneActs& out) {
  const std::int64_t groups = (acts + kLanes - 1) / kLanes, ne = Even(nb);
  out.x.Assign(static_cast<std::size_t>(groups * ne * 8));
  out.init.Assign(static_cast<std::size_t>(groups * ne));
  out.d.Assign(static_cast<std::size_t>(groups * ne));
  for (int j = 0; j < acts; ++j) {
    const std::int64_t g = j / kLanes, lane = j % kLanes;
    for (std::int64_t b = 0; b < nb; ++b) {
      const ActQ8& a = x[j * xs + b];
      const std::size_t gb = static_cast<std::size_t>(g * ne + b);
      for (int k = 0; k < 8; ++k) std::memcpy(out.x[XSlot(g, ne, b, k)] + 4 * lane, a.qs + 4 * k, 4);
      const std::int32_t init = -bias * a.sum;
      std::memcpy(out.init[gb] + 4 * lane, &init, 4);
      std::memcpy(out.d[gb] + 4 * lane, &a.d, 4);
    }
  }
}

template <typename Block>
struct Codes;

// Weight rows r0 .. r0+T-1 decoded once for several activation groups: row
// t's block b as codes in slot t ne + b of c and its scale in dw[t ne + b].
template <typename Block, int T>
void DecodeTile(const Block* w, std::int64_t r0, std::int64_t nb, Slots& c, std::vector<float>& dw) {
  const std::int64_t ne = Even(nb);
  for (int t = 0; t < T; ++t) {
    for (std::int64_t b = 0; b < nb; ++b) {
      const Block& blk = w[(r0 + t) * nb + b];
      _mm256_store_si256(reinterpret_cast<__m256i*>(c[static_cast<std::size_t>(t * ne + b)]), Codes<Block>::Get(blk));
      dw[static_cast<std::size_t>(t * ne + b)] = H2F(blk.d);
    }
  }
}

// The rows layout's step for one activation row a and block: v[t] = the 8
// int32 partial sums of weight row t's codes against a's block; dw = the 8
// rows' scales. acc (lane t) = fma(float(p), dw_t dx, acc).
inline void RowsStep(const __m256i v[8], const ActQ8& a, int bias, __m256 dw, __m256& acc) {
  const __m256i p = _mm256_sub_epi32(SumLanes8(v), _mm256_set1_epi32(bias * a.sum));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dw, _mm256_set1_ps(a.d)), acc);
}

// What each kernel file defines for the drivers below (in its own anonymous
// namespace, under its own target flags):
//   Codes<Block>::kBias, Get(b)  code - value of the type's codes; one
//                                block's codes (32 bytes, element order);
//   LaneRows<Block, T>(w, r0, ...)  weight rows r0 .. r0+T-1 against every
//                                group of the call's activation rows (lanes
//                                layout; c / dw: room for T rows' blocks);
//   BlockDot(c, x)               u8 x s8 dot of 4-byte groups (RowsTile).
template <typename Block, int T>
void LaneRows(const Block* w, std::int64_t r0, const LaneActs& a, std::int64_t nb, int acts, float* y, std::int64_t ys,
              Slots& c, std::vector<float>& dw);
// u8 codes c against s8 activations x: 8 int32 sums of 4 products each.
inline __m256i BlockDot(__m256i c, __m256i x);

// Weight rows in the lanes: rows[t] (rows past the matrix repeat the last
// one; lanes t >= valid are not stored) against R <= 3 activation rows.
template <int R, typename Block>
void RowsTile(const Block* const rows[8], int valid, std::int64_t r0, const ActQ8* x, std::int64_t xs, std::int64_t nb,
              float* y, std::int64_t ys) {
  // Byte offsets of the rows from rows[0]: the 8 block scales (the first 2
  // bytes of every 32-element block type) in one gather.
  alignas(32) std::int32_t off[8];
  for (int t = 0; t < 8; ++t) {
    off[t] = static_cast<std::int32_t>(reinterpret_cast<const char*>(rows[t]) - reinterpret_cast<const char*>(rows[0]));
  }
  const __m256i offsets = _mm256_load_si256(reinterpret_cast<const __m256i*>(off));
  __m256 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    __m256i c[8];
    for (int t = 0; t < 8; ++t) c[t] = Codes<Block>::Get(rows[t][b]);
    const __m256 dw = LowHalvesToFloat(_mm256_i32gather_epi32(reinterpret_cast<const int*>(rows[0] + b), offsets, 1));
    for (int j = 0; j < R; ++j) {
      const ActQ8& a = x[j * xs + b];
      const __m256i xv = Load32(a.qs);
      __m256i v[8];
      for (int t = 0; t < 8; ++t) v[t] = BlockDot(c[t], xv);
      RowsStep(v, a, Codes<Block>::kBias, dw, acc[j]);
    }
  }
  StoreRowsLanes<R>(acc, valid, r0, y, ys);
}

// The DotRowsFn: activation rows in the lanes from 4 on (tiles of kTile
// weight rows), weight rows in the lanes below.
template <typename Block>
void Q32Rows(const Block* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts, float* y,
             std::int64_t ys) {
  ByActs(
      acts,
      [&] {
        thread_local LaneActs a;
        thread_local Slots c;
        thread_local std::vector<float> dw;
        MakeLaneActs(x, xs, nb, acts, Codes<Block>::kBias, a);
        c.Assign(static_cast<std::size_t>(kTile * Even(nb)));
        dw.resize(static_cast<std::size_t>(kTile * Even(nb)));
        ForLaneTiles(w, nrows, nb,
                     [&](auto T, std::int64_t r0) { LaneRows<Block, T()>(w, r0, a, nb, acts, y, ys, c, dw); });
      },
      [&](auto R) {
        ForRowTiles(w, nrows, nb, [&](const Block* const* rows, int valid, std::int64_t r0) {
          RowsTile<R(), Block>(rows, valid, r0, x, xs, nb, y, ys);
        });
      });
}

}  // namespace
}  // namespace kvshare::detail
