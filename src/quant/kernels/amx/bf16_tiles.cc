// The bf16 tile loops of quant/bf16_tiles.h. Every tile is 16 rows of 64
// bytes: C (16 activation rows x 16 weight rows, f32) += A (16 activation
// rows x 32 columns, bf16) times B (one packed block: 32 columns of 16 weight
// rows as pairs), over the columns in steps of 32. A step over 32 activation
// rows and 32 weight rows loads 2 A and 2 B tiles for 4 products.
#include <immintrin.h>

#include <algorithm>

#include "common/amx_tiles.h"
#include "quant/bf16_tiles.h"

namespace kvshare::detail {

namespace {

// tilestored of C tile T (the intrinsic's tile number must be a literal).
template <int T>
inline void TileStore(float* p, std::int64_t stride) {
  if constexpr (T == 0) _tile_stored(0, p, stride);
  if constexpr (T == 1) _tile_stored(1, p, stride);
  if constexpr (T == 2) _tile_stored(2, p, stride);
  if constexpr (T == 3) _tile_stored(3, p, stride);
}

// C tile T into rows [0, rows) (at most 16) and columns [col, min(col + 16, n))
// of y: straight from the tile when it is all inside, else through a buffer.
template <int T>
inline void StoreC(float* y, std::int64_t ys, std::int64_t rows, std::int64_t col, std::int64_t n) {
  if (col >= n) return;
  if (rows >= kTileRows && col + 16 <= n) {
    TileStore<T>(y + col, ys * static_cast<std::int64_t>(sizeof(float)));
    return;
  }
  alignas(64) float c[kTileRows * 16];
  TileStore<T>(c, 64);
  const __mmask16 mask = TailMask16(col, n);
  for (std::int64_t r = 0; r < std::min<std::int64_t>(rows, kTileRows); ++r) {
    _mm512_mask_storeu_ps(y + r * ys + col, mask, _mm512_load_ps(c + 16 * r));
  }
}

// Steps ahead whose A (rows 0-15) and B tiles are prefetched into L1: the
// six Bf16Matrix shapes of bench/bf16_matmul_bench.cc went from 14.9% to
// 19.2% of the tdpbf16ps peak (means over 6 alternating rounds; 5 of 6 won).
constexpr std::int64_t kPrefetchSteps = 2;

// C 0, 1 (and 2, 3 for kRows = 32) = A rows times B blocks b0, b1 over
// `steps` steps of 32 columns.
template <int kRows>
inline void Products(const std::uint16_t* a, std::int64_t kp, const std::uint16_t* b0, const std::uint16_t* b1,
                     std::int64_t steps) {
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (kRows == 32) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (std::int64_t s = 0; s < steps; ++s) {
    // The operands of step s + kPrefetchSteps into L1 (from L2, where a
    // task's rows and weight blocks sit; past the last step the hints read
    // nothing that matters).
    for (int l = 0; l < 1024; l += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(a + 512 * (s + kPrefetchSteps)) + l, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b0 + 512 * (s + kPrefetchSteps)) + l, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b1 + 512 * (s + kPrefetchSteps)) + l, _MM_HINT_T0);
    }
    _tile_loadd(4, a + 512 * s, 64);
    _tile_loadd(6, b0 + 512 * s, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b1 + 512 * s, 64);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kRows == 32) {
      _tile_loadd(5, a + 16 * kp + 512 * s, 64);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
}

}  // namespace

void AmxBf16StageRows(const float* x, std::int64_t m, std::int64_t r0, std::int64_t r1, std::int64_t k,
                      std::int64_t kp, std::uint16_t* a) {
  for (std::int64_t i = r0; i < r1; ++i) {
    std::uint16_t* ar = a + (i - i % kTileRows) * kp + 32 * (i % kTileRows);
    if (i >= m) {
      for (std::int64_t c = 0; c < kp; c += 32) _mm512_storeu_si512(ar + 16 * c, _mm512_setzero_si512());
      continue;
    }
    const float* xr = x + i * k;
    for (std::int64_t c = 0; c < kp; c += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(TailMask16(c, k), xr + c);
      const __m512 hi = _mm512_maskz_loadu_ps(TailMask16(c + 16, k), xr + c + 16);
      _mm512_storeu_si512(ar + 16 * c, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

void AmxBf16Product(const AmxBf16Block& blk) {
  // FullTiles: 0-3 C; 4, 5 A (activation rows 0-15, 16-31); 6, 7 B (weight
  // row blocks b, b + 1).
  const TileScope tiles(FullTiles());
  const std::int64_t steps = blk.kp / 32;
  for (std::int64_t b = blk.block0; b < blk.block1; b += 2) {
    const std::uint16_t* b0 = blk.packed + b * steps * 512;
    const std::uint16_t* b1 = b0 + steps * 512;
    const std::int64_t col = 16 * b;
    for (std::int64_t r = 0; r < blk.rows; r += 32) {
      const std::int64_t left = blk.rows - r;
      const std::uint16_t* a = blk.a + r * blk.kp;
      float* y = blk.y + r * blk.ys;
      if (left > kTileRows) {
        Products<32>(a, blk.kp, b0, b1, steps);
        StoreC<2>(y + kTileRows * blk.ys, blk.ys, left - kTileRows, col, blk.n);
        StoreC<3>(y + kTileRows * blk.ys, blk.ys, left - kTileRows, col + 16, blk.n);
      } else {
        Products<16>(a, blk.kp, b0, b1, steps);
      }
      StoreC<0>(y, blk.ys, left, col, blk.n);
      StoreC<1>(y, blk.ys, left, col + 16, blk.n);
    }
  }
}

}  // namespace kvshare::detail
