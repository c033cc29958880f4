// AVX2 dot kernels for the IQ1 / IQ2 / IQ3 grid types (compiled with -mavx2
// -mfma -mf16c; entered only after the run-time CPU check, quant_matmul.cc;
// the AVX-512 level runs them too). Each sub-block of 32 is decoded once into
// the integer form of quant/quant_iq.h (32 int8 values v, two odd scales) by
// gathering grid points and applying sign bits, then dotted with up to 8
// activation rows: sum ls_h (v . a)_h in int32 per block, and
// y = fma(sum, factor * dx, y) per block, the scalar twin's arithmetic, so
// the results are bitwise those of scalar/iq.cc.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "quant/kernels/dispatch.h"
#include "quant/kernels/iq_decode.h"
#include "quant/kernels/packed.h"
#include "quant/kernels/rows.h"
#include "quant/kernels/x86.h"

namespace kvshare::detail {
namespace {

// Up to 8 activation rows against one weight row.
template <int R, typename Block>
void DotIqR(const Block* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  float acc[R];
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    __m256i sumi[R];
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const Sub s = Decode(w[b], ib);
      const __m256i abs = _mm256_sign_epi8(s.v, s.v);
      for (int r = 0; r < R; ++r) {
        const __m256i a = _mm256_sign_epi8(Load32(x[r * xs + b].qs + 32 * ib), s.v);
        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(abs, a), s.ls));
      }
    }
    const float f = IqFactor(w[b]);
    for (int r = 0; r < R; ++r) {
      __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sumi[r]), _mm256_extracti128_si256(sumi[r], 1));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
      acc[r] = std::fma(static_cast<float>(_mm_cvtsi128_si32(t)), f * x[r * xs + b].d, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r];
}

// Tiles (from kMinTileActs activation rows on): 8 weight rows decoded once
// into the packed kernels' lane layout (packed.h; here one ymm holds a 4-byte
// group of 8 rows), codes v + 64 (unsigned, <= 126), so every pass of 8
// activation rows reads them with no decode. maddubs of a code vector with an
// activation's broadcast 4 bytes gives int16 pairs of at most 2 * 126 * 128 =
// 32256, and madd by the group's odd scale (in both int16 of a lane) widens
// and scales them: P_b = sum_g ls_g (sum u a) - 64 sum_g ls_g bsum_g, the
// scalar twin's exact integer, then its fma per block: bitwise equal.
constexpr int kTileRows = 8;
constexpr int kTilePassRows = 8;
constexpr int kCodeBias = 64;
constexpr int kMinTileActs = 2;
// Per block, in 32-byte vectors: 64 code vectors, 16 group scales (ls in both
// int16 of each row's lane), 8 scale pairs (ls_2q | ls_2q+1 << 16, for the
// bias), 1 of factors.
constexpr int kTileBlockVectors = 64 + 16 + 8 + 1;

struct Tile {
  __m256i* at;
  const __m256i* At(std::int64_t b) const { return at + kTileBlockVectors * b; }
};

template <typename Block>
void DecodeTile(const Block* w, std::int64_t nb, const Tile& tile) {
  alignas(32) std::uint8_t rows[kTileRows][256];  // v + 64 of each row's block, element order
  alignas(16) std::uint16_t ls[16][kTileRows];
  const __m256i row_start = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);  // dword index of row t
  const __m256i bias = _mm256_set1_epi8(kCodeBias);
  for (std::int64_t b = 0; b < nb; ++b) {
    __m256i* out = tile.at + kTileBlockVectors * b;
    alignas(32) float factor[kTileRows];
    for (int t = 0; t < kTileRows; ++t) {
      const Block& blk = w[t * nb + b];
      for (int ib = 0; ib < 8; ++ib) {
        const Sub s = Decode(blk, ib);
        _mm256_store_si256(reinterpret_cast<__m256i*>(rows[t] + 32 * ib), _mm256_add_epi8(s.v, bias));
        ls[2 * ib][t] = static_cast<std::uint16_t>(_mm256_extract_epi16(s.ls, 0));
        ls[2 * ib + 1][t] = static_cast<std::uint16_t>(_mm256_extract_epi16(s.ls, 8));
      }
      factor[t] = IqFactor(blk);
    }
    for (int k = 0; k < 64; ++k) {
      out[k] = _mm256_i32gather_epi32(reinterpret_cast<const int*>(rows),
                                      _mm256_add_epi32(row_start, _mm256_set1_epi32(k)), 4);
    }
    for (int g = 0; g < 16; ++g) {
      const __m256i v = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(ls[g])));
      out[64 + g] = _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
    }
    for (int q = 0; q < 8; ++q) {
      const __m256i lo = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(ls[2 * q])));
      const __m256i hi = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(ls[2 * q + 1])));
      out[80 + q] = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16));
    }
    out[88] = _mm256_castps_si256(_mm256_load_ps(factor));
  }
}

// The tile's 8 rows against activation rows j < R; y[j * ys + t].
template <int R>
void TilePass(const Tile& tile, std::int64_t nb, const ActQ8K* x, std::int64_t xs, float* y, std::int64_t ys) {
  __m256 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i* v = tile.At(b);
    __m256i P[R];
    for (int j = 0; j < R; ++j) P[j] = _mm256_setzero_si256();
    for (int grp = 0; grp < 16; ++grp) {
      const __m256i c0 = _mm256_load_si256(v + 4 * grp), c1 = _mm256_load_si256(v + 4 * grp + 1);
      const __m256i c2 = _mm256_load_si256(v + 4 * grp + 2), c3 = _mm256_load_si256(v + 4 * grp + 3);
      const __m256i s = _mm256_load_si256(v + 64 + grp);
      for (int j = 0; j < R; ++j) {
        const std::int8_t* a = x[j * xs + b].qs + 16 * grp;
        const __m256i p01 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(c0, Broadcast4Ymm(a)), s),
                                             _mm256_madd_epi16(_mm256_maddubs_epi16(c1, Broadcast4Ymm(a + 4)), s));
        const __m256i p23 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(c2, Broadcast4Ymm(a + 8)), s),
                                             _mm256_madd_epi16(_mm256_maddubs_epi16(c3, Broadcast4Ymm(a + 12)), s));
        P[j] = _mm256_add_epi32(P[j], _mm256_add_epi32(p01, p23));
      }
    }
    const __m256 f = _mm256_castsi256_ps(_mm256_load_si256(v + 88));
    for (int j = 0; j < R; ++j) {
      const ActQ8K& a = x[j * xs + b];
      __m256i bsum = _mm256_setzero_si256();  // sum_g ls_g bsum_g
      for (int q = 0; q < 8; ++q) {
        std::int32_t pair;  // bsums 2q, 2q + 1 as the low, high int16
        std::memcpy(&pair, a.bsums + 2 * q, 4);
        bsum = _mm256_add_epi32(bsum, _mm256_madd_epi16(_mm256_load_si256(v + 80 + q), _mm256_set1_epi32(pair)));
      }
      const __m256i p = _mm256_sub_epi32(P[j], _mm256_slli_epi32(bsum, 6));  // - 64 sum_g ls_g bsum_g
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(f, _mm256_set1_ps(a.d)), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) _mm256_storeu_ps(y + j * ys, acc[j]);
}

// Rows [0, nrows) (a multiple of kTileRows), tile by tile.
template <typename Block>
void TiledRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
               float* y, std::int64_t ys) {
  const Tile tile{
      static_cast<__m256i*>(DecodedCodeScratch(static_cast<std::size_t>((kTileBlockVectors * nb + 1) / 2)))};
  for (std::int64_t r0 = 0; r0 < nrows; r0 += kTileRows) {
    DecodeTile(w + r0 * nb, nb, tile);
    ForEachPass<kTilePassRows>(acts, [&](auto rows, int j0) {
      TilePass<decltype(rows)::value>(tile, nb, x + j0 * xs, xs, y + j0 * ys + r0, ys);
    });
  }
}

template <typename Block>
struct IqKernel {
  template <int R>
  static void Dot(const Block* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
    DotIqR<R, Block>(w, x, xs, nb, out);
  }
};

}  // namespace

template <typename Block>
void Avx2IqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                float* y, std::int64_t ys) {
  const std::int64_t tiled = acts >= kMinTileActs ? nrows / kTileRows * kTileRows : 0;
  if (tiled > 0) TiledRows(w, tiled, x, xs, nb, acts, y, ys);
  if (tiled == nrows) return;
  const auto rows = KVSHARE_ROWS_KERNEL_N(IqKernel<Block>::template Dot, Block, ActQ8K, 8);
  rows(w + tiled * nb, nrows - tiled, x, xs, nb, acts, y + tiled, ys);
}
#define KVSHARE_IQ_INSTANTIATE(Block)                                                                                 \
  template void Avx2IqRows<Block>(const Block*, std::int64_t, const ActQ8K*, std::int64_t, std::int64_t, int, float*, \
                                  std::int64_t);
KVSHARE_FOR_EACH_IQ_BLOCK(KVSHARE_IQ_INSTANTIATE)
#undef KVSHARE_IQ_INSTANTIATE

}  // namespace kvshare::detail
