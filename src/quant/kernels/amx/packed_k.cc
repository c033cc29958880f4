// AMX-INT8 kernel over packed Q4_K / Q6_K / Q3_K / Q2_K weights (layout:
// packed.h), compiled with the AVX-512 flags plus -mamx-{tile,int8,bf16};
// entered only when AmxUsable (cpu_amx.h).
//
// The AVX-512 kernel (avx512/packed_k.cc) forms per super-block b, activation
// row and weight row the exact int32 P_b = sum_g s_g * sum_{i in g} (c_i -
// bias) x_i (the bias through the activation's bsums, which the quantizer
// makes the exact group sums). Here each group's integer scale is folded into
// its weights once per call: w_i = s_g (c_i - bias), exact in int16 (Q4_K [0,
// 945], Q6_K [-4064, 4096], Q3_K [-124, 128], Q2_K [0, 45]), split into bytes
// w = 256 hi + lo (lo = w & 0xFF unsigned, hi = w >> 8 signed; Q2_K's hi is
// 0 and skipped). Per super-block and 16 activation rows, 4 K-steps of 64
// elements: C_lo += A x B_lo (tdpbsud), C_hi += A x B_hi (tdpbssd), A the
// rows' activation bytes (laid out in 64-byte rows once per MatMulMany chunk,
// or per call: AmxStageQ8K).
// Then P_b = 256 C_hi + C_lo is the
// AVX-512 kernel's integer: every partial sum is exact (|P_b| <= 256 * 4096 *
// 128 = 2^27; |C_lo| <= 256 * 255 * 128 < 2^23). The rest is the AVX-512
// kernel's epilogue, 16 weight rows in the lanes, C row j for activation row
// j: Q4_K / Q2_K's M_b by vpdpwssd from the mins, y = fma(float(P_b), d_b *
// dx_b, y), z = fma(float(M_b), dmin_b * dx_b, z) over the super-blocks in
// order, output y - z (Q6_K / Q3_K: y): bitwise the same outputs for every
// row count. Fewer than kAmxKMinRows activation rows, and a last partial
// tile of fewer than kAmxKMinTail, go to that kernel (AmxTiledRows).
//
// Scaling in the weights costs the second tile product (8 tdp a super-block
// and 16 rows, each as long at K = 64 as one 32-byte sub-block would take)
// but no per-group integer work per activation row, which would cost as much
// as the VNNI kernel's own.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/amx_tiles.h"
#include "quant/kernels/amx/scaled_tiles.h"
#include "quant/kernels/avx512/packed_k_codes.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"
#include "quant/kernels/x86.h"

namespace kvshare::detail {
namespace {

// Below this many activation rows the AVX-512 kernel runs: up to 8 rows it
// makes one pass without a decode, and the tile kernel's decode (64 code
// vectors a super-block, scaled and split) is not paid back. AMX / VNNI time,
// 2048 x 2048, 1 thread: m = 4: Q4_K 2.3, Q6_K 1.3; m = 8: 1.04, 0.94;
// m = 10: 0.77, 0.81.
constexpr int kAmxKMinRows = 9;
// A last partial tile of fewer rows goes to the AVX-512 kernel (640 x 2048
// Q4_K, 1 thread, 3 alternating runs: m = 33 6% faster that way; m = 17
// and 20 the same within noise).
constexpr int kAmxKMinTail = 4;

// Whether the type's scaled weights reach beyond a byte (all but Q2_K).
template <GgmlType T>
inline constexpr bool kHasHi = T != GgmlType::kQ2_K;

template <GgmlType T, int kQuarter>
inline void DecodeQuarter(const BlockPlanes& pl, std::uint8_t* lo, std::uint8_t* hi) {
  using Type = GroupType<T>;
  for (int grp = 4 * kQuarter; grp < 4 * kQuarter + 4; ++grp) {
    const GroupScales s(Type::Scales(pl.subs + 16 * grp), Type::kBias);
    for (int k = 4 * grp; k < 4 * grp + 4; ++k) {
      ScaleSplit<kHasHi<T>, Type::kBias != 0>(Type::template Codes<kQuarter>(pl, k), s, lo + 64 * k, hi + 64 * k);
    }
  }
}

// Super-block pl's scaled weights into the planes lo, hi (kPlaneBytes each;
// vector k = elements 4k .. 4k + 3 of the 16 rows).
template <GgmlType T>
void DecodeBlock(const BlockPlanes& pl, std::uint8_t* lo, std::uint8_t* hi) {
  if constexpr (T == GgmlType::kQ4_K) {
    for (int sb = 0; sb < 8; ++sb) {
      const GroupScales s(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(pl.subs + 16 * sb))), 0);
      for (int k = 8 * sb; k < 8 * sb + 8; ++k)
        ScaleSplit<true, false>(Q4Codes(pl.codes, sb, k % 8), s, lo + 64 * k, hi + 64 * k);
    }
  } else {
    DecodeQuarter<T, 0>(pl, lo, hi);
    DecodeQuarter<T, 1>(pl, lo, hi);
    DecodeQuarter<T, 2>(pl, lo, hi);
    DecodeQuarter<T, 3>(pl, lo, hi);
  }
}

// A super-block's tile sums waiting for their epilogue: activation rows j0
// .. j0 + rows - 1 (x rows, stride xs) of block b.
struct Pending {
  const std::int32_t (*c)[kTileRows][16] = nullptr;
  BlockPlanes pl{};
  std::int64_t b = 0;
  int j0 = 0, rows = 0;
};

// The AVX-512 kernel's scale step for one pending super-block, into the
// accumulators acc, accm (row j: 16 weight rows). The pending block's fields
// are copied to restrict-qualified locals: through the Pending reference the
// accumulator stores would make the compiler reload every one of them per
// row. M_b runs as two dpwssd chains added at the end (exact int32 sums in
// any order).
template <GgmlType T>
void Epilogue(const Pending& p, const ActQ8K* x, std::int64_t xs, const AmxStagedActs& a, float (*__restrict acc)[16],
              float (*__restrict accm)[16]) {
  const std::int32_t(*__restrict c_lo)[16] = p.c[0];
  const std::int32_t(*__restrict c_hi)[16] = p.c[1];
  const int rows = p.rows, j0 = p.j0;
  const std::int64_t b = p.b, stride = a.rows;
  const float* __restrict dx = a.d + b * stride + j0;
  const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.pl.d)));
  float(*__restrict y)[16] = acc + j0;
  for (int j = 0; j < rows; ++j) {
    __m512i P = _mm512_load_si512(c_lo[j]);
    if constexpr (kHasHi<T>) P = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c_hi[j]), 8), P);
    _mm512_store_ps(
        y[j], _mm512_fmadd_ps(_mm512_cvtepi32_ps(P), _mm512_mul_ps(dw, _mm512_set1_ps(dx[j])), _mm512_load_ps(y[j])));
  }
  if constexpr (T == GgmlType::kQ4_K || T == GgmlType::kQ2_K) {
    constexpr int kPairs = T == GgmlType::kQ4_K ? 4 : 8;
    __m512i mins[kPairs];
    for (int q = 0; q < kPairs; ++q) {
      mins[q] = T == GgmlType::kQ4_K
                    ? _mm512_cvtepu8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.pl.mins + 32 * q)))
                    : Q2MinPairs(p.pl.subs, q);
    }
    const __m512 dmin = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.pl.dmin)));
    const std::int32_t* __restrict pairs = T == GgmlType::kQ4_K ? a.pairs + (b * stride + j0) * 4 : nullptr;
    float(*__restrict z)[16] = accm + j0;
    for (int j = 0; j < rows; ++j) {
      // Q4_K: sub-block sums 2q, 2q + 1; Q2_K: bsums 2q, 2q + 1 (low, high int16).
      const auto pair = [&](int q) {
        std::int32_t v;
        if constexpr (T == GgmlType::kQ4_K) {
          v = pairs[4 * j + q];
        } else {
          std::memcpy(&v, x[(j0 + j) * xs + b].bsums + 2 * q, 4);
        }
        return _mm512_set1_epi32(v);
      };
      __m512i m0 = _mm512_setzero_si512(), m1 = _mm512_setzero_si512();
      for (int q = 0; q < kPairs; q += 2) {
        m0 = _mm512_dpwssd_epi32(m0, mins[q], pair(q));
        m1 = _mm512_dpwssd_epi32(m1, mins[q + 1], pair(q + 1));
      }
      _mm512_store_ps(z[j], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(m0, m1)),
                                            _mm512_mul_ps(dmin, _mm512_set1_ps(dx[j])), _mm512_load_ps(z[j])));
    }
  }
}

template <GgmlType T>
void AmxKRowsT(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8K* x, std::int64_t xs, int acts,
               float* y, std::int64_t ys, const AmxStagedActs* staged) {
  constexpr bool kMins = T == GgmlType::kQ4_K || T == GgmlType::kQ2_K;
  const std::int64_t nb = w.nb, g0 = r0 / kPackRows, g1 = r1 / kPackRows;
  const TileScope tiles(KTiles());
  thread_local AmxActStage own;
  // Staged rows may be more than acts (the call's last tile left to the
  // AVX-512 kernel): the layout's strides are the staged count's.
  const AmxStagedActs ea = staged != nullptr ? *staged : AmxStageQ8K(x, xs, nb, acts, own);
  const std::int8_t* arows = ea.tiles;
  const int chunks = (ea.rows + kTileRows - 1) / kTileRows;
  // Two super-blocks' planes (lo, hi), in the order (group, block): the next
  // one is decoded while the tile products of this one run.
  auto* planes = static_cast<std::uint8_t*>(DecodedCodeScratch(4 * kPlaneBytes / 64));
  const auto decode = [&](std::int64_t f) {  // f: (g - g0) * nb + b
    const BlockPlanes pl = PlanesAt(w, g0 + f / nb, f % nb);
    PrefetchPackedAhead(pl.codes, w.bytes.codes);
    if (pl.high != nullptr) PrefetchPackedAhead(pl.high, w.bytes.high);
    std::uint8_t* lo = planes + (f % 2) * 2 * kPlaneBytes;
    DecodeBlock<T>(pl, lo, lo + kPlaneBytes);
  };
  const std::int64_t blocks = (g1 - g0) * nb;
  alignas(64) float acc[kMaxAmxActRows][16], accm[kMaxAmxActRows][16];
  alignas(64) std::int32_t c[2][2][kTileRows][16];
  int item = 0;
  decode(0);
  for (std::int64_t g = g0; g < g1; ++g) {
    std::memset(acc, 0, sizeof(float) * 16 * acts);
    if constexpr (kMins) std::memset(accm, 0, sizeof(float) * 16 * acts);
    // Each chunk's sums are scaled after the next chunk's tile products are
    // issued (into the other C set), so the vector units work while the tile
    // unit multiplies.
    Pending pending;
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t f = (g - g0) * nb + b;
      const std::uint8_t* lo = planes + (f % 2) * 2 * kPlaneBytes;
      const BlockPlanes pl = PlanesAt(w, g, b);
      for (int j0 = 0; j0 < acts; j0 += kTileRows, ++item) {
        const std::int8_t* a = arows + (b * chunks + j0 / kTileRows) * 4 * kTileRows * 64;
        // The tile unit runs in order: the previous chunk's sums are stored
        // before this chunk's products are issued, or the store (and the
        // epilogue waiting on it) would wait for them too.
        if (pending.c != nullptr) {
          if (item % 2 == 0) {
            StoreC<kHasHi<T>, 1>(c[1]);
          } else {
            StoreC<kHasHi<T>, 0>(c[0]);
          }
        }
        if (item % 2 == 0) {
          TileBlock<kHasHi<T>, 0>(a, lo, lo + kPlaneBytes);
        } else {
          TileBlock<kHasHi<T>, 1>(a, lo, lo + kPlaneBytes);
        }
        if (pending.c != nullptr) Epilogue<T>(pending, x, xs, ea, acc, accm);
        if (j0 == 0 && f + 1 < blocks) decode(f + 1);
        auto* cc = c[item % 2];
        pending = {cc, pl, b, j0, std::min(kTileRows, acts - j0)};
      }
    }
    if (item % 2 == 1) {
      StoreC<kHasHi<T>, 0>(c[0]);
    } else {
      StoreC<kHasHi<T>, 1>(c[1]);
    }
    Epilogue<T>(pending, x, xs, ea, acc, accm);
    float* yg = y + (g * kPackRows - r0);
    for (int j = 0; j < acts; ++j) {
      const __m512 v = _mm512_load_ps(acc[j]);
      _mm512_storeu_ps(yg + j * ys, kMins ? _mm512_sub_ps(v, _mm512_load_ps(accm[j])) : v);
    }
  }
}

}  // namespace

void AmxPackedKRows(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8K* x, std::int64_t xs,
                    int acts, float* y, std::int64_t ys, const AmxStagedActs* staged) {
  const int tiled = AmxTiledRows(acts, kAmxKMinRows, kAmxKMinTail);
  if (tiled > 0) {
    switch (w.type) {
      case GgmlType::kQ4_K: AmxKRowsT<GgmlType::kQ4_K>(w, r0, r1, x, xs, tiled, y, ys, staged); break;
      case GgmlType::kQ2_K: AmxKRowsT<GgmlType::kQ2_K>(w, r0, r1, x, xs, tiled, y, ys, staged); break;
      case GgmlType::kQ3_K: AmxKRowsT<GgmlType::kQ3_K>(w, r0, r1, x, xs, tiled, y, ys, staged); break;
      default: AmxKRowsT<GgmlType::kQ6_K>(w, r0, r1, x, xs, tiled, y, ys, staged); break;
    }
  }
  if (tiled < acts) Avx512PackedKRows(w, r0, r1, x + tiled * xs, xs, acts - tiled, y + tiled * ys, ys, nullptr);
}

}  // namespace kvshare::detail
