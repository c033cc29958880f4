// AMX-INT8 kernel for the IQ1 / IQ2 / IQ3 grid types with many activation
// rows, compiled with the AVX-512 flags plus -mamx-{tile,int8,bf16}; entered
// only when AmxUsable (cpu_amx.h).
//
// The AVX-512 kernel (avx512/iq.cc) decodes a tile of 16 weight rows into
// codes v + 64, odd scales ls per 16-element group and row and a factor per
// block and row (iq_tiles.h), and forms per block, activation row and weight
// row the scalar twin's exact int32 P_b = sum_g ls_g (v . a)_g. Here each
// decoded block's scales are folded into its values, w = ls_g v, exact in
// int16 (|v| <= 43 with ls <= 31 for IQ2, 62 and 31 for IQ3_XXS, 15 and 31
// for IQ3_S, 9 and 15 for IQ1: |w| <= 1922), split into a low (unsigned) and
// a high (signed) byte plane as amx/packed_k.cc does (scaled_tiles.h), and
// per block and 16 activation rows 4 K-steps of 64 bytes give C_lo (tdpbsud)
// and C_hi (tdpbssd); P_b = 256 C_hi + C_lo is the AVX-512 kernel's integer,
// every partial sum exact (|P_b| <= 256 * 1922 * 128 < 2^26, |C_lo| <= 256 *
// 255 * 128 < 2^23). Each block then ends in the AVX-512 kernel's
// fma(float(P_b), factor * dx, y), in block order, so the outputs are
// bitwise its (and the scalar twin's) for every row count. Fewer than
// kAmxIqMinRows activation rows, and the rows past the last whole tile of 16,
// go to that kernel.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "quant/kernels/amx/scaled_tiles.h"
#include "quant/kernels/amx/tiles.h"
#include "quant/kernels/avx512/iq_tiles.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"

namespace kvshare::detail {
namespace {

// Below this many activation rows the AVX-512 kernel runs: both decode every
// block once (most of the time at any row count), and its passes of 8 rows
// cost less than the scale-and-split of each decoded block plus the tile
// steps until 3 passes. VNNI / AMX time (min of 21 alternating runs), 2048 x
// 2048, 1 thread, IQ2_XXS and IQ3_S: m = 16: 0.96, 0.92; m = 20: 0.95, 0.98;
// m = 22: 1.01-1.03, 1.01-1.02; m = 24: 1.05-1.07, 1.04-1.06; m = 32: 1.17,
// 1.17; m = 64: 1.39, 1.27.
constexpr int kAmxIqMinRows = 22;

// One decoded block of a tile: the planes lo, hi (kPlaneBytes each) and the
// 16 rows' factors.
constexpr std::size_t kSlotBytes = 2 * kPlaneBytes + 64;
// The block whose products run and the next one, decoded meanwhile (decoding
// two ahead, 3 slots, measured 3-10% slower at m = 12-32).
constexpr int kSlots = 2;

// Block b of the 16 rows at w (nb blocks each), scaled and split, into slot.
template <typename Block>
void DecodeScaled(const Block* w, std::int64_t nb, std::int64_t b, std::uint8_t* slot) {
  alignas(64) std::int8_t ls[256];
  std::uint8_t *lo = slot, *hi = slot + kPlaneBytes;
  const auto scales = [&ls](int grp) {
    return GroupScales(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(ls + 16 * grp))),
                       kCodeBias);
  };
  GroupScales s(_mm512_setzero_si512(), 0);  // group k / 4's, once ls is decoded
  DecodeTileBlock(w, nb, b, ls, reinterpret_cast<float*>(slot + 2 * kPlaneBytes), [&](int k, __m512i c) {
    if (k % 4 == 0) s = scales(k / 4);
    ScaleSplit<true, true>(c, s, lo + 64 * k, hi + 64 * k);
  });
}

// A block's tile sums waiting for their epilogue: activation rows j0 .. j0 +
// rows - 1 (x rows, stride xs) of block b, the 16 weight rows' factors.
struct Pending {
  const std::int32_t (*c)[kTileRows][16] = nullptr;
  const float* factor = nullptr;
  std::int64_t b = 0;
  int j0 = 0, rows = 0;
};

// The AVX-512 kernel's fma for one pending block, into acc (row j: 16 weight
// rows).
void Epilogue(const Pending& p, const ActQ8K* x, std::int64_t xs, float (*acc)[16]) {
  const __m512 f = _mm512_load_ps(p.factor);
  for (int j = 0; j < p.rows; ++j) {
    const __m512i P =
        _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(p.c[1][j]), 8), _mm512_load_si512(p.c[0][j]));
    float* yj = acc[p.j0 + j];
    _mm512_store_ps(yj,
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(P), _mm512_mul_ps(f, _mm512_set1_ps(x[(p.j0 + j) * xs + p.b].d)),
                                    _mm512_load_ps(yj)));
  }
}

// Rows [0, nrows) (a multiple of kIqTileRows), tile by tile; as in
// amx/packed_k.cc, the next block is decoded while this one's tile products
// run, and each chunk's sums are scaled after the next chunk's products are
// issued (into the other C set).
template <typename Block>
void TiledRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
               float* y, std::int64_t ys) {
  UseTiles(KTiles());
  const std::int8_t* arows = ActRows(x, xs, nb, acts);
  const int chunks = (acts + kTileRows - 1) / kTileRows;
  auto* slots = static_cast<std::uint8_t*>(DecodedCodeScratch(kSlots * kSlotBytes / 64));
  const auto decode = [&](std::int64_t f) {  // f: tile * nb + b
    DecodeScaled(w + f / nb * kIqTileRows * nb, nb, f % nb, slots + (f % kSlots) * kSlotBytes);
  };
  const std::int64_t blocks = nrows / kIqTileRows * nb;
  alignas(64) float acc[kMaxActRows][16];
  alignas(64) std::int32_t c[2][2][kTileRows][16];
  int item = 0;
  for (std::int64_t f = 0; f < std::min<std::int64_t>(kSlots - 1, blocks); ++f) decode(f);
  for (std::int64_t g = 0; g < nrows / kIqTileRows; ++g) {
    std::memset(acc, 0, sizeof(float) * 16 * acts);
    Pending pending;
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t f = g * nb + b;
      const std::uint8_t* slot = slots + (f % kSlots) * kSlotBytes;
      for (int j0 = 0; j0 < acts; j0 += kTileRows, ++item) {
        const std::int8_t* a = arows + (b * chunks + j0 / kTileRows) * 4 * kTileRows * 64;
        if (item % 2 == 0) {
          TileBlock<true, 0>(a, slot, slot + kPlaneBytes);
        } else {
          TileBlock<true, 1>(a, slot, slot + kPlaneBytes);
        }
        if (pending.c != nullptr) {
          if (item % 2 == 0) {
            StoreC<true, 1>(c[1]);
          } else {
            StoreC<true, 0>(c[0]);
          }
          Epilogue(pending, x, xs, acc);
        }
        if (j0 == 0 && f + kSlots - 1 < blocks) decode(f + kSlots - 1);
        pending = {c[item % 2], reinterpret_cast<const float*>(slot + 2 * kPlaneBytes), b, j0,
                   std::min(kTileRows, acts - j0)};
      }
    }
    if (item % 2 == 1) {
      StoreC<true, 0>(c[0]);
    } else {
      StoreC<true, 1>(c[1]);
    }
    Epilogue(pending, x, xs, acc);
    for (int j = 0; j < acts; ++j) _mm512_storeu_ps(y + j * ys + g * kIqTileRows, _mm512_load_ps(acc[j]));
  }
}

}  // namespace

template <typename Block>
void AmxIqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
               float* y, std::int64_t ys) {
  const std::int64_t tiled = acts >= kAmxIqMinRows ? nrows / kIqTileRows * kIqTileRows : 0;
  if (tiled > 0) TiledRows(w, tiled, x, xs, nb, acts, y, ys);
  if (tiled < nrows) Avx512IqRows(w + tiled * nb, nrows - tiled, x, xs, nb, acts, y + tiled, ys);
}
#define KVSHARE_IQ_INSTANTIATE(Block)                                                                                \
  template void AmxIqRows<Block>(const Block*, std::int64_t, const ActQ8K*, std::int64_t, std::int64_t, int, float*, \
                                 std::int64_t);
KVSHARE_FOR_EACH_IQ_BLOCK(KVSHARE_IQ_INSTANTIATE)
#undef KVSHARE_IQ_INSTANTIATE

}  // namespace kvshare::detail
