// AVX-512 VNNI kernel for the IQ1 / IQ2 / IQ3 grid types with many
// activation rows (prefill, batched steps): compiled with
// -mavx512{f,bw,vl,vnni}, entered only when the CPU reports those features
// (quant_matmul.cc).
//
// The AVX2 row kernel (avx2/iq.cc) decodes every sub-block once per pass of
// 8 activation rows, so a 64-row prefill group decodes each weight block 8
// times, with scalar grid loads; that decode held IQ prefill at llama.cpp's
// speed. Here (as the AVX2 level's 8-row tiles do with maddubs) a tile of 16 weight rows is decoded once (iq_decode.h,
// iq_tiles.h) into the layout of the packed kernels (packed.h: 16 rows in the lanes, each 4-byte group of elements in
// one 64-byte vector; codes = v + 64, unsigned) with the odd scales per 16-element group and row and the block factors,
// and every pass of 8 activation rows runs vpdpbusd over it (group_dot.h). The block sums are the scalar twin's exact
// integers (sum_g ls_g (v . a)_g, the bias taken off as 64 bsum_g) and each block ends in its fma(sum, factor * dx, y),
// so outputs are bitwise those of scalar/iq.cc and avx2/iq.cc. With one activation row (a decode step), and for the
// rows past the last whole tile, the AVX2 kernel runs.
#include <immintrin.h>

#include <cstdint>

#include "quant/kernels/avx512/group_dot.h"
#include "quant/kernels/avx512/iq_tiles.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"
#include "quant/kernels/rows.h"

namespace kvshare::detail {
namespace {

constexpr int kPassRows = 8;  // activation rows per pass
// Tiles from 2 activation rows on. MatTypes 2048 x 2048, 1 thread, against
// the AVX2 kernel in the same build: m = 64 2.1-2.4 ms against 8.9-10.9,
// m = 8 0.68-0.95 against 1.11-1.36, m = 1 0.51-0.75 against 0.45-0.75 (the
// decode bounds both there; a decode step keeps the AVX2 kernel).
constexpr int kMinTileActs = 2;

// The tile's 16 rows against activation rows j < R; y[j * ys + t].
template <int R>
void TilePass(const Tile& tile, std::int64_t nb, const ActQ8K* x, std::int64_t xs, float* y, std::int64_t ys) {
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m512i* codes = tile.Codes(b);
    const std::int8_t* ls = tile.Scales(b);
    __m512i P[R];
    for (int j = 0; j < R; ++j) P[j] = _mm512_setzero_si512();
    for (int grp = 0; grp < 16; ++grp) {
      const __m512i c[4] = {codes[4 * grp], codes[4 * grp + 1], codes[4 * grp + 2], codes[4 * grp + 3]};
      const __m512i s = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(ls + 16 * grp)));
      GroupDot<kCodeBias, R>(c, s, x, xs, b, grp, P);
    }
    const __m512 f = _mm512_load_ps(tile.Factors(b));
    for (int j = 0; j < R; ++j) {
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[j]), _mm512_mul_ps(f, _mm512_set1_ps(x[j * xs + b].d)), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) _mm512_storeu_ps(y + j * ys, acc[j]);
}

// Rows [0, nrows) (a multiple of kIqTileRows), tile by tile.
template <typename Block>
void TiledRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
               float* y, std::int64_t ys) {
  const Tile tile{static_cast<__m512i*>(DecodedCodeScratch(static_cast<std::size_t>(kBlockVectors * nb)))};
  for (std::int64_t r0 = 0; r0 < nrows; r0 += kIqTileRows) {
    DecodeTile(w + r0 * nb, nb, tile);
    ForEachPass<kPassRows>(acts, [&](auto rows, int j0) {
      TilePass<decltype(rows)::value>(tile, nb, x + j0 * xs, xs, y + j0 * ys + r0, ys);
    });
  }
}

}  // namespace

template <typename Block>
void Avx512IqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys) {
  const std::int64_t tiled = acts >= kMinTileActs ? nrows / kIqTileRows * kIqTileRows : 0;
  if (tiled > 0) TiledRows(w, tiled, x, xs, nb, acts, y, ys);
  if (tiled < nrows) Avx2IqRows(w + tiled * nb, nrows - tiled, x, xs, nb, acts, y + tiled, ys);
}
#define KVSHARE_IQ_INSTANTIATE(Block)                                                                           \
  template void Avx512IqRows<Block>(const Block*, std::int64_t, const ActQ8K*, std::int64_t, std::int64_t, int, \
                                    float*, std::int64_t);
KVSHARE_FOR_EACH_IQ_BLOCK(KVSHARE_IQ_INSTANTIATE)
#undef KVSHARE_IQ_INSTANTIATE

}  // namespace kvshare::detail
