// AVX2 kernel over packed Q4_K / Q6_K weights (layout: packed.h),
// compiled with -mavx2 -mfma -mf16c; entered only when the CPU reports those
// features (quant_matmul.cc).
//
// The 16 rows of a packed group are taken as two halves of 8, one per ymm, as
// in avx2/packed_q32.cc: lane t of a half is weight row t, and each
// activation row's 4-byte group k is broadcast against code vector k. Without
// VNNI a 4-byte group is maddubs (u8 x s8 -> int16 pairs) and madd against
// ones. Q4_K codes are at most 15, so a 32-element sub-block's 8 maddubs
// results summed in int16 stay below 8 * 2 * 15 * 128 = 30720; Q6_K codes are
// at most 63, so a 16-element group's 4 are summed as two int16 pairs (each
// below 2 * 2 * 63 * 128 = 32256) widened to int32. Per weight row and
// activation row the arithmetic is that of avx512/packed_k.cc (each
// scale group's exact int32 sum times its integer scale into P_b; Q4_K's M_b
// from the mins; y = fma(float(P_b), d_b * dx_b, y), z = fma(float(M_b),
// dmin_b * dx_b, z) over the super-blocks in order, output y - z), so packed
// outputs on AVX2 equal the AVX-512 ones bit for bit.
#include <immintrin.h>

#include "model/kernels/dispatch.h"
#include "model/kernels/rows.h"
#include "model/kernels/packed.h"
#include "model/kernels/x86.h"

namespace kvshare::detail {
namespace {

// Activation rows per pass. 8 int32 sums and a sub-block's 8 code vectors
// already fill the 16 ymm registers (the float sums, touched once per
// super-block, live in memory), yet 8 is faster than 4 (kvshare_bench
// MatPacked at m = 8 / 64; docs/kernels.md): half the passes decode and read
// each super-block half as often.
constexpr int kPassRows = 8;

// Decoded Q6_K code vectors per super-block and half (64 x 32 bytes: 256
// elements of 8 rows, one byte each).
constexpr int kDecodedVectors = 64;

// 8 bytes at p widened to 8 int32 lanes (unsigned or signed).
inline __m256i Load8U(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i Load8S(const std::uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// The 8 fp16 values at p as floats.
inline __m256 Load8H(const std::uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The planes of one super-block of one group of 16 rows, at half h (rows
// 8h .. 8h + 7): code and high vectors still start at the group's 64-byte
// vectors (the half is bytes 32h .. 32h + 31 of each).
struct HalfPlanes {
  const std::uint8_t* codes;
  const std::uint8_t* high;
  const std::uint8_t* subs;  // [groups][16 rows]: + 8h
  const std::uint8_t* mins;  // Q4_K [4][16 rows][2]: + 16h
  const std::uint16_t* d;    // + 8h
  const std::uint16_t* dmin;
};

HalfPlanes PlanesAt(const PackedWeights& w, std::int64_t g, std::int64_t b, int h) {
  const auto gb = static_cast<std::size_t>(g * w.nb + b);
  const auto at = [gb](const std::uint8_t* p, std::size_t bytes) { return p != nullptr ? p + gb * bytes : nullptr; };
  return {at(w.codes, w.bytes.codes) + 32 * h,
          w.high != nullptr ? at(w.high, w.bytes.high) + 32 * h : nullptr,
          at(w.subs, w.bytes.subs) + 8 * h,
          w.mins != nullptr ? at(w.mins, w.bytes.mins) + 16 * h : nullptr,
          w.d + gb * kPackRows + 8 * h,
          w.dmin != nullptr ? w.dmin + gb * kPackRows + 8 * h : nullptr};
}

// The decoded code vector i of super-block b (DecodeHalfQ6K's layout).
inline __m256i DecodedCodes(const std::uint8_t* dec, std::int64_t b, int i) {
  return Load32(dec + 32 * (kDecodedVectors * b + i));
}

// Q4_K: one half (8 weight rows) against R activation rows; y[j * ys + t].
template <int R>
void HalfRowsQ4K(const PackedWeights& w, std::int64_t g, int h, const ActQ8K* x, std::int64_t xs, float* y,
                 std::int64_t ys) {
  const __m256i low4 = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1);
  __m256 acc[R], accm[R];
  for (int j = 0; j < R; ++j) acc[j] = accm[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < w.nb; ++b) {
    const HalfPlanes pl = PlanesAt(w, g, b, h);
    if (h == 0) PrefetchPackedAhead(pl.codes, w.bytes.codes);
    __m256i P[R];
    for (int j = 0; j < R; ++j) P[j] = _mm256_setzero_si256();
    for (int sb = 0; sb < 8; ++sb) {  // sub-block sb: codes of chunk sb / 2, low or high nibbles
      __m256i c[8];
      for (int k = 0; k < 8; ++k) {
        const __m256i v = Load32(pl.codes + 64 * (8 * (sb / 2) + k));
        c[k] = _mm256_and_si256(sb % 2 == 0 ? v : _mm256_srli_epi16(v, 4), low4);
      }
      const __m256i s = Load8U(pl.subs + 16 * sb);
      for (int j = 0; j < R; ++j) {
        const std::int8_t* a = x[j * xs + b].qs + 32 * sb;
        __m256i p = _mm256_maddubs_epi16(c[0], Broadcast4Ymm(a));
        for (int k = 1; k < 8; ++k) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(c[k], Broadcast4Ymm(a + 4 * k)));
        P[j] = _mm256_add_epi32(P[j], _mm256_mullo_epi32(_mm256_madd_epi16(p, ones), s));
      }
    }
    __m256i mins[4];
    for (int q = 0; q < 4; ++q) {
      mins[q] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pl.mins + 32 * q)));
    }
    const __m256 dw = Load8H(pl.d), dmin = Load8H(pl.dmin);
    for (int j = 0; j < R; ++j) {
      const ActQ8K& a = x[j * xs + b];
      __m256i M = _mm256_setzero_si256();
      for (int q = 0; q < 4; ++q) M = _mm256_add_epi32(M, _mm256_madd_epi16(mins[q], _mm256_set1_epi32(SubBlockSumPair(a, q))));
      const __m256 dx = _mm256_set1_ps(a.d);
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P[j]), _mm256_mul_ps(dw, dx), acc[j]);
      accm[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(dmin, dx), accm[j]);
    }
  }
  for (int j = 0; j < R; ++j) _mm256_storeu_ps(y + j * ys, _mm256_sub_ps(acc[j], accm[j]));
}

// Q6_K code vector of group k (k < 64) for the half: the low nibble from codes
// vector k % 32 (shifted down for k >= 32), bits 4-5 from high vector k % 16
// (its bits 2 (k / 16) .. +1).
template <int kQuarter>
inline __m256i Q6Codes(const std::uint8_t* codes, const std::uint8_t* high, int k) {
  const __m256i nib = Load32(codes + 64 * (k % 32));
  const __m256i hv = Load32(high + 64 * (k % 16));
  const __m256i lo = k < 32 ? nib : _mm256_srli_epi16(nib, 4);
  __m256i hi;
  if constexpr (kQuarter == 0) {
    hi = _mm256_slli_epi16(hv, 4);
  } else if constexpr (kQuarter == 1) {
    hi = _mm256_slli_epi16(hv, 2);
  } else if constexpr (kQuarter == 2) {
    hi = hv;
  } else {
    hi = _mm256_srli_epi16(hv, 2);
  }
  return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi8(0x0F)), _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
}

// Q6_K groups 4Q .. 4Q + 3 (quarter Q of the super-block) into P.
template <int kQuarter, int R, bool kDecoded>
inline void Q6Quarter(const HalfPlanes& pl, const ActQ8K* x, std::int64_t xs, std::int64_t b, __m256i P[R],
                      const std::uint8_t* dec) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int gq = 0; gq < 4; ++gq) {
    const int grp = 4 * kQuarter + gq;  // scale group: elements 16 grp .. +15, code vectors 4 grp .. +3
    __m256i c[4];
    for (int k = 0; k < 4; ++k) {
      c[k] = kDecoded ? DecodedCodes(dec, b, 4 * grp + k) : Q6Codes<kQuarter>(pl.codes, pl.high, 4 * grp + k);
    }
    const __m256i s = Load8S(pl.subs + 16 * grp);
    for (int j = 0; j < R; ++j) {
      const ActQ8K& a = x[j * xs + b];
      const std::int8_t* q = a.qs + 16 * grp;
      const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(c[0], Broadcast4Ymm(q)), _mm256_maddubs_epi16(c[1], Broadcast4Ymm(q + 4)));
      const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(c[2], Broadcast4Ymm(q + 8)), _mm256_maddubs_epi16(c[3], Broadcast4Ymm(q + 12)));
      const __m256i p = _mm256_add_epi32(_mm256_set1_epi32(-32 * a.bsums[grp]),
                                         _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones)));
      P[j] = _mm256_add_epi32(P[j], _mm256_mullo_epi32(p, s));
    }
  }
}

// Q6_K: one half (8 weight rows) against R activation rows; y[j * ys + t].
// kDecoded: the code vectors come from dec (DecodeHalfQ6K).
template <int R, bool kDecoded>
void HalfRowsQ6K(const PackedWeights& w, std::int64_t g, int h, const ActQ8K* x, std::int64_t xs, float* y,
                 std::int64_t ys, const std::uint8_t* dec) {
  __m256 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < w.nb; ++b) {
    const HalfPlanes pl = PlanesAt(w, g, b, h);
    if (!kDecoded && h == 0) {
      PrefetchPackedAhead(pl.codes, w.bytes.codes);
      PrefetchPackedAhead(pl.high, w.bytes.high);
    }
    __m256i P[R];
    for (int j = 0; j < R; ++j) P[j] = _mm256_setzero_si256();
    Q6Quarter<0, R, kDecoded>(pl, x, xs, b, P, dec);
    Q6Quarter<1, R, kDecoded>(pl, x, xs, b, P, dec);
    Q6Quarter<2, R, kDecoded>(pl, x, xs, b, P, dec);
    Q6Quarter<3, R, kDecoded>(pl, x, xs, b, P, dec);
    const __m256 dw = Load8H(pl.d);
    for (int j = 0; j < R; ++j) {
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P[j]), _mm256_mul_ps(dw, _mm256_set1_ps(x[j * xs + b].d)), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) _mm256_storeu_ps(y + j * ys, acc[j]);
}

template <int R, bool kDecoded>
void HalfRows(const PackedWeights& w, std::int64_t g, int h, const ActQ8K* x, std::int64_t xs, float* y,
              std::int64_t ys, const std::uint8_t* dec) {
  if (w.type == GgmlType::kQ4_K) {
    HalfRowsQ4K<R>(w, g, h, x, xs, y, ys);  // never decoded (Avx2PackedKRows)
  } else {
    HalfRowsQ6K<R, kDecoded>(w, g, h, x, xs, y, ys, dec);
  }
}

template <int kQuarter>
void DecodeQ6Quarter(const HalfPlanes& pl, std::uint8_t* out) {
  for (int k = 16 * kQuarter; k < 16 * (kQuarter + 1); ++k) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32 * k), Q6Codes<kQuarter>(pl.codes, pl.high, k));
  }
}

// Half h of Q6_K group g's code vectors, decoded as the kernel forms them,
// into out (kDecodedVectors of 32 bytes per super-block, 4 per group).
void DecodeHalfQ6K(const PackedWeights& w, std::int64_t g, int h, std::uint8_t* out) {
  for (std::int64_t b = 0; b < w.nb; ++b, out += 32 * kDecodedVectors) {
    const HalfPlanes pl = PlanesAt(w, g, b, h);
    if (h == 0) {
      PrefetchPackedAhead(pl.codes, w.bytes.codes);
      PrefetchPackedAhead(pl.high, w.bytes.high);
    }
    DecodeQ6Quarter<0>(pl, out);
    DecodeQ6Quarter<1>(pl, out);
    DecodeQ6Quarter<2>(pl, out);
    DecodeQ6Quarter<3>(pl, out);
  }
}

// Every pass of kPassRows activation rows over half h of group g.
template <bool kDecoded>
void Passes(const PackedWeights& w, std::int64_t g, int h, const ActQ8K* x, std::int64_t xs, int acts, float* y,
            std::int64_t ys, const std::uint8_t* dec) {
  ForEachPass<kPassRows>(acts, [&](auto rows, int j0) {
    HalfRows<decltype(rows)::value, kDecoded>(w, g, h, x + j0 * xs, xs, y + j0 * ys, ys, dec);
  });
}

}  // namespace

void Avx2PackedKRows(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8K* x, std::int64_t xs,
                     int acts, float* y, std::int64_t ys) {
  // Q6_K with several passes (prefill, mixed steps): each half's codes are
  // decoded once into scratch (2 KiB per super-block) instead of once per
  // pass, as the AVX-512 kernel does (avx512/packed_k.cc). Q4_K, whose
  // nibble split is two cheap operations, is slower decoded and decodes every
  // pass (MatPacked at m = 64; docs/kernels.md).
  const bool decoded = w.type == GgmlType::kQ6_K && acts > kPassRows;
  auto* dec = decoded ? static_cast<std::uint8_t*>(DecodedCodeScratch(static_cast<std::size_t>(kDecodedVectors / 2 * w.nb)))
                      : nullptr;
  for (std::int64_t g = r0 / kPackRows; g < r1 / kPackRows; ++g) {
    for (int h = 0; h < 2; ++h) {
      float* yh = y + (g * kPackRows - r0) + 8 * h;
      if (decoded) {
        DecodeHalfQ6K(w, g, h, dec);
        Passes<true>(w, g, h, x, xs, acts, yh, ys, dec);
      } else {
        Passes<false>(w, g, h, x, xs, acts, yh, ys, nullptr);
      }
    }
  }
}

}  // namespace kvshare::detail
