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

#include "common/amx_tiles.h"
#include "quant/kernels/amx/scaled_tiles.h"
#include "quant/kernels/avx512/iq_tiles.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"

namespace kvshare::detail {
namespace {

// Up to 16 activation rows (one chunk) the AVX-512 kernel runs: both decode
// every block once, most of the time at any row count, and against its 2
// passes of 8 rows the scale-and-split of each decoded block plus one
// chunk's tile steps win for IQ2_* / IQ1_S (VNNI / AMX at m = 16:
// 1.16-1.23) but lose for the slower decodes of IQ3_S / IQ1_M (0.84-0.92).
// From two chunks on the tile kernel is ahead for every type (2048 x 2048,
// 1 thread, VNNI / AMX, min of 21 alternating runs, all 7 types): m = 17:
// 1.03-1.13, m = 32: 1.24-1.46, m = 64: 1.47-1.70.
constexpr int kAmxIqMinRows = 17;

// One decoded block of a tile: the planes lo, hi (kPlaneBytes each) and the
// 16 rows' factors.
constexpr std::size_t kSlotBytes = 2 * kPlaneBytes + 64;
// The decode of one block of a tile (16 rows at w, nb blocks each) into a
// slot, scaled and split, in kParts steps (8 of 2 rows' grid decode, then 8
// of 8 code vectors), run between the K-steps of the block before: tile
// products in flight hold up retirement, and work issued behind them hides
// their latency (IQ2_XXS at m = 64: VNNI / AMX 1.4 with the whole decode
// after a block's tile products, 2.0 spread between them).
constexpr int kParts = 16;
template <typename Block>
struct BlockDecode {
  alignas(64) std::uint8_t rows[kIqTileRows][256];
  alignas(64) std::int8_t ls[256];
  const Block* w = nullptr;
  std::int64_t nb = 0, b = 0;
  std::uint8_t* slot = nullptr;

  // Steps [p0, p1).
  void Steps(int p0, int p1) {
    for (int p = p0; p < p1; ++p) {
      if (p < 8) {
        DecodeTileRows(w, nb, b, 2 * p, 2 * p + 2, rows, ls, reinterpret_cast<float*>(slot + 2 * kPlaneBytes));
        continue;
      }
      std::uint8_t *lo = slot, *hi = slot + kPlaneBytes;
      GroupScales s(_mm512_setzero_si512(), 0);  // group k / 4's
      GatherCodes(rows, 8 * (p - 8), 8 * (p - 7), [&](int k, __m512i c) {
        if (k % 4 == 0) {
          s = GroupScales(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(ls + 4 * k))),
                          kCodeBias);
        }
        ScaleSplit<true, true>(c, s, lo + 64 * k, hi + 64 * k);
      });
    }
  }
};

// One block's C_lo, C_hi into C set kSet for 16 activation rows a (as
// TileBlock), between(q) after K-step q.
template <int kSet, typename Between>
inline void TileBlockBetween(const std::int8_t* a, const std::uint8_t* lo, const std::uint8_t* hi, Between&& between) {
  ZeroC<true, kSet>();
  Step<true, kSet, 0>(a, lo, hi);
  between(0);
  Step<true, kSet, 1>(a + 1024, lo + 1024, hi + 1024);
  between(1);
  Step<true, kSet, 0>(a + 2048, lo + 2048, hi + 2048);
  between(2);
  Step<true, kSet, 1>(a + 3072, lo + 3072, hi + 3072);
  between(3);
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

// Rows [0, nrows) (a multiple of kIqTileRows), tile by tile: the next
// block's decode in slices between this block's K-steps (BlockDecode), and
// each chunk's sums scaled after the next chunk's first K-step is issued
// (into the other C set).
template <typename Block>
void TiledRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
               float* y, std::int64_t ys) {
  const TileScope tiles(KTiles());
  thread_local AmxActStage stage;
  const std::int8_t* arows = AmxStageQ8K(x, xs, nb, acts, stage).tiles;
  const int chunks = (acts + kTileRows - 1) / kTileRows;
  auto* slots = static_cast<std::uint8_t*>(DecodedCodeScratch(2 * kSlotBytes / 64));
  // Block f = tile * nb + b into slot f % 2.
  BlockDecode<Block> dec;
  const auto start = [&](std::int64_t f) {
    dec.w = w + f / nb * kIqTileRows * nb, dec.nb = nb, dec.b = f % nb, dec.slot = slots + (f % 2) * kSlotBytes;
  };
  const std::int64_t blocks = nrows / kIqTileRows * nb;
  alignas(64) float acc[kMaxActRows][16];
  alignas(64) std::int32_t c[2][2][kTileRows][16];
  int item = 0;
  start(0);
  dec.Steps(0, kParts);
  for (std::int64_t g = 0; g < nrows / kIqTileRows; ++g) {
    std::memset(acc, 0, sizeof(float) * 16 * acts);
    Pending pending;
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t f = g * nb + b;
      const std::uint8_t* slot = slots + (f % 2) * kSlotBytes;
      if (f + 1 < blocks) start(f + 1);
      for (int j0 = 0; j0 < acts; j0 += kTileRows, ++item) {
        const std::int8_t* a = arows + (b * chunks + j0 / kTileRows) * 4 * kTileRows * 64;
        // After K-step q: the pending sums (q = 0), then slice 4 i + q of
        // the next block's decode (i: the chunk).
        const auto between = [&](int q) {
          if (q == 0 && pending.c != nullptr) {
            if (item % 2 == 0) {
              StoreC<true, 1>(c[1]);
            } else {
              StoreC<true, 0>(c[0]);
            }
            Epilogue(pending, x, xs, acc);
          }
          const int slice = 4 * (j0 / kTileRows) + q;
          if (f + 1 < blocks) dec.Steps(kParts * slice / (4 * chunks), kParts * (slice + 1) / (4 * chunks));
        };
        if (item % 2 == 0) {
          TileBlockBetween<0>(a, slot, slot + kPlaneBytes, between);
        } else {
          TileBlockBetween<1>(a, slot, slot + kPlaneBytes, between);
        }
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
