// AVX-512 VNNI kernel over packed Q4_K / Q6_K / Q3_K / Q2_K weights
// (layout: packed.h), compiled with -mavx512{f,bw,vl,vnni}; entered only
// when the CPU reports those features (quant_matmul.cc).
//
// The 16 lanes are 16 weight rows, as in avx512/packed_q32.cc. Per
// super-block and activation row: each scale group's codes (Q4_K: a 32-
// element sub-block, 8 code vectors; the others: a 16-element group, 4) go
// through vpdpbusd against the activation's 4-byte groups broadcast from
// memory, and the group's exact int32 sum is multiplied by the group's
// integer scale per lane (vpmulld) and added to P_b. Q6_K / Q3_K start each
// group's sum at -32 / -4 * bsum_g (the codes' bias), so P_b = sum_g s_g (sum
// c x - bias bsum_g), the same integer as avx512/k_quants.cc's (Q6_K) and
// avx2/k_quants.cc's (Q3_K) sums. Q4_K's M_b = sum_j m_j (sum of the
// activation's sub-block j) comes from 4 vpdpwssd of int16 pairs, Q2_K's
// M_b = sum_g m_g bsum_g from 8. Then y = fma(float(P_b), d_b * dx_b, y), z =
// fma(float(M_b), dmin_b * dx_b, z) over the super-blocks in order, output
// y - z (Q6_K / Q3_K: y): for Q4_K / Q6_K the arithmetic of
// avx512/k_quants.cc's file comment, so bitwise the same outputs. Q2_K /
// Q3_K have no AVX-512 row kernel; their AVX2 one sums partial products in
// float lanes, so packed and unpacked differ in the last bits.
#include <immintrin.h>

#include <cstring>

#include "quant/kernels/avx512/group_dot.h"
#include "quant/kernels/avx512/packed_k_codes.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"
#include "quant/kernels/rows.h"
#include "quant/kernels/x86.h"

namespace kvshare::detail {
namespace {

// Activation rows per pass (R int32 sums and R or 2R float accumulators next
// to a group's code vectors).
constexpr int kPassRows = 8;

// Decoded code vectors per super-block (64 x 64 bytes: 256 elements of 16
// rows, one byte each).
constexpr int kDecodedVectors = 64;

// Q4_K: 16 weight rows against R activation rows; y[j * ys + t]. kDecoded:
// the code vectors come from dec (DecodeGroup: kDecodedVectors per block).
template <int R, bool kDecoded = false>
void GroupRowsQ4K(const PackedWeights& w, std::int64_t g, const ActQ8K* x, std::int64_t xs, float* y, std::int64_t ys,
                  const __m512i* dec) {
  __m512 acc[R], accm[R];
  for (int j = 0; j < R; ++j) acc[j] = accm[j] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < w.nb; ++b) {
    const BlockPlanes pl = PlanesAt(w, g, b);
    if constexpr (!kDecoded) PrefetchPackedAhead(pl.codes, w.bytes.codes);
    __m512i P[R];
    for (int j = 0; j < R; ++j) P[j] = _mm512_setzero_si512();
    for (int sb = 0; sb < 8; ++sb) {  // sub-block sb: codes of chunk sb / 2, low or high nibbles
      __m512i c[8];
      for (int k = 0; k < 8; ++k) {
        c[k] = kDecoded ? _mm512_load_si512(dec + kDecodedVectors * b + 8 * sb + k) : Q4Codes(pl.codes, sb, k);
      }
      const __m512i s = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(pl.subs + 16 * sb)));
      // Row by row, two chains of 4 each (code vector k against every row
      // before k + 1, as in Q6Quarter, is slower here; docs/kernels.md).
      for (int j = 0; j < R; ++j) {
        const std::int8_t* a = x[j * xs + b].qs + 32 * sb;
        __m512i p0 = _mm512_setzero_si512(), p1 = _mm512_setzero_si512();
        for (int k = 0; k < 8; k += 2) {
          p0 = _mm512_dpbusd_epi32(p0, c[k], Broadcast4Zmm(a + 4 * k));
          p1 = _mm512_dpbusd_epi32(p1, c[k + 1], Broadcast4Zmm(a + 4 * k + 4));
        }
        P[j] = _mm512_add_epi32(P[j], _mm512_mullo_epi32(_mm512_add_epi32(p0, p1), s));
      }
    }
    __m512i mins[4];
    for (int q = 0; q < 4; ++q)
      mins[q] = _mm512_cvtepu8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(pl.mins + 32 * q)));
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pl.d)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pl.dmin)));
    for (int j = 0; j < R; ++j) {
      const ActQ8K& a = x[j * xs + b];
      __m512i M = _mm512_setzero_si512();
      for (int q = 0; q < 4; ++q) M = _mm512_dpwssd_epi32(M, mins[q], _mm512_set1_epi32(SubBlockSumPair(a, q)));
      const __m512 dx = _mm512_set1_ps(a.d);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[j]), _mm512_mul_ps(dw, dx), acc[j]);
      accm[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dmin, dx), accm[j]);
    }
  }
  for (int j = 0; j < R; ++j) _mm512_storeu_ps(y + j * ys, _mm512_sub_ps(acc[j], accm[j]));
}

// Groups 4Q .. 4Q + 3 (quarter Q of the super-block) into P.
template <GgmlType T, int kQuarter, int R, bool kDecoded>
inline void GroupQuarter(const BlockPlanes& pl, const ActQ8K* x, std::int64_t xs, std::int64_t b, __m512i P[R],
                         const __m512i* dec) {
  using Type = GroupType<T>;
  for (int gq = 0; gq < 4; ++gq) {
    const int grp = 4 * kQuarter + gq;  // scale group: elements 16 grp .. +15, code vectors 4 grp .. +3
    __m512i c[4];
    for (int k = 0; k < 4; ++k) {
      c[k] = kDecoded ? _mm512_load_si512(dec + kDecodedVectors * b + 4 * grp + k)
                      : Type::template Codes<kQuarter>(pl, 4 * grp + k);
    }
    GroupDot<Type::kBias, R>(c, Type::Scales(pl.subs + 16 * grp), x, xs, b, grp, P);
  }
}

// Q6_K / Q3_K / Q2_K: 16 weight rows against R activation rows; y[j * ys +
// t]. kDecoded as for Q4_K. Q2_K's M_b = sum_g m_g bsum_g (8 vpdpwssd of
// int16 pairs) goes to a second accumulator with dmin, as Q4_K's.
template <GgmlType T, int R, bool kDecoded = false>
void GroupRowsScaled(const PackedWeights& w, std::int64_t g, const ActQ8K* x, std::int64_t xs, float* y,
                     std::int64_t ys, const __m512i* dec) {
  constexpr bool kMins = T == GgmlType::kQ2_K;
  __m512 acc[R], accm[R];
  for (int j = 0; j < R; ++j) acc[j] = accm[j] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < w.nb; ++b) {
    const BlockPlanes pl = PlanesAt(w, g, b);
    if constexpr (!kDecoded) {
      PrefetchPackedAhead(pl.codes, w.bytes.codes);
      if (pl.high != nullptr) PrefetchPackedAhead(pl.high, w.bytes.high);
    }
    __m512i P[R];
    for (int j = 0; j < R; ++j) P[j] = _mm512_setzero_si512();
    GroupQuarter<T, 0, R, kDecoded>(pl, x, xs, b, P, dec);
    GroupQuarter<T, 1, R, kDecoded>(pl, x, xs, b, P, dec);
    GroupQuarter<T, 2, R, kDecoded>(pl, x, xs, b, P, dec);
    GroupQuarter<T, 3, R, kDecoded>(pl, x, xs, b, P, dec);
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pl.d)));
    for (int j = 0; j < R; ++j) {
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[j]), _mm512_mul_ps(dw, _mm512_set1_ps(x[j * xs + b].d)), acc[j]);
    }
    if constexpr (kMins) {
      __m512i mins[8];
      for (int q = 0; q < 8; ++q) mins[q] = Q2MinPairs(pl.subs, q);
      const __m512 dmin = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(pl.dmin)));
      for (int j = 0; j < R; ++j) {
        const ActQ8K& a = x[j * xs + b];
        __m512i M = _mm512_setzero_si512();
        for (int q = 0; q < 8; ++q) {
          std::int32_t pair;  // bsums 2q, 2q + 1 as the low, high int16
          std::memcpy(&pair, a.bsums + 2 * q, 4);
          M = _mm512_dpwssd_epi32(M, mins[q], _mm512_set1_epi32(pair));
        }
        accm[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dmin, _mm512_set1_ps(a.d)), accm[j]);
      }
    }
  }
  for (int j = 0; j < R; ++j) _mm512_storeu_ps(y + j * ys, kMins ? _mm512_sub_ps(acc[j], accm[j]) : acc[j]);
}

template <int R, bool kDecoded>
void GroupRows(const PackedWeights& w, std::int64_t g, const ActQ8K* x, std::int64_t xs, float* y, std::int64_t ys,
               const __m512i* dec) {
  switch (w.type) {
    case GgmlType::kQ4_K: GroupRowsQ4K<R, kDecoded>(w, g, x, xs, y, ys, dec); return;
    case GgmlType::kQ2_K: GroupRowsScaled<GgmlType::kQ2_K, R, kDecoded>(w, g, x, xs, y, ys, dec); return;
    case GgmlType::kQ3_K: GroupRowsScaled<GgmlType::kQ3_K, R, kDecoded>(w, g, x, xs, y, ys, dec); return;
    default: GroupRowsScaled<GgmlType::kQ6_K, R, kDecoded>(w, g, x, xs, y, ys, dec); return;
  }
}

template <GgmlType T, int kQuarter>
void DecodeQuarter(const BlockPlanes& pl, __m512i* out) {
  for (int k = 16 * kQuarter; k < 16 * (kQuarter + 1); ++k) out[k] = GroupType<T>::template Codes<kQuarter>(pl, k);
}

template <GgmlType T>
void DecodeScaled(const BlockPlanes& pl, __m512i* out) {
  DecodeQuarter<T, 0>(pl, out);
  DecodeQuarter<T, 1>(pl, out);
  DecodeQuarter<T, 2>(pl, out);
  DecodeQuarter<T, 3>(pl, out);
}

// Group g's code vectors, decoded as the kernels form them, into out
// (kDecodedVectors per block: Q4_K's 8 per sub-block, the others' 4 per
// group).
void DecodeGroup(const PackedWeights& w, std::int64_t g, __m512i* out) {
  for (std::int64_t b = 0; b < w.nb; ++b, out += kDecodedVectors) {
    const BlockPlanes pl = PlanesAt(w, g, b);
    PrefetchPackedAhead(pl.codes, w.bytes.codes);
    if (pl.high != nullptr) PrefetchPackedAhead(pl.high, w.bytes.high);
    switch (w.type) {
      case GgmlType::kQ4_K:
        for (int sb = 0; sb < 8; ++sb) {
          for (int k = 0; k < 8; ++k) out[8 * sb + k] = Q4Codes(pl.codes, sb, k);
        }
        break;
      case GgmlType::kQ2_K: DecodeScaled<GgmlType::kQ2_K>(pl, out); break;
      case GgmlType::kQ3_K: DecodeScaled<GgmlType::kQ3_K>(pl, out); break;
      default: DecodeScaled<GgmlType::kQ6_K>(pl, out); break;
    }
  }
}

// Every pass of kPassRows activation rows over group g.
template <bool kDecoded>
void Passes(const PackedWeights& w, std::int64_t g, const ActQ8K* x, std::int64_t xs, int acts, float* y,
            std::int64_t ys, const __m512i* dec) {
  ForEachPass<kPassRows>(acts, [&](auto rows, int j0) {
    GroupRows<decltype(rows)::value, kDecoded>(w, g, x + j0 * xs, xs, y + j0 * ys, ys, dec);
  });
}

}  // namespace

void Avx512PackedKRows(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8K* x, std::int64_t xs,
                       int acts, float* y, std::int64_t ys, const AmxStagedActs* /*staged*/) {
  // With several passes (prefill, mixed steps) each group's codes are decoded
  // once into scratch (4 KiB per super-block) instead of once per pass: the
  // nibble split (and Q6_K's high-bit merge) costs every pass about a fifth
  // (Q4_K) to a half (Q6_K) as many vector operations as its vpdpbusd.
  // MatPacked, 1 thread, alternating runs, paired ratio medians: 640 x 2048,
  // m = 96: Q6_K 0.86 (faster in 5 of 5), Q4_K 0.97 (3 of 5); 2048 x 2048,
  // m = 64: Q6_K 0.96 (4 of 4), Q4_K 0.95 (4 of 4).
  const bool decoded = acts > kPassRows;
  auto* dec =
      decoded ? static_cast<__m512i*>(DecodedCodeScratch(static_cast<std::size_t>(kDecodedVectors * w.nb))) : nullptr;
  for (std::int64_t g = r0 / kPackRows; g < r1 / kPackRows; ++g) {
    float* yg = y + (g * kPackRows - r0);
    if (decoded) {
      DecodeGroup(w, g, dec);
      Passes<true>(w, g, x, xs, acts, yg, ys, dec);
    } else {
      Passes<false>(w, g, x, xs, acts, yg, ys, nullptr);
    }
  }
}

}  // namespace kvshare::detail
