// AVX2 kernel over packed Q4_K / Q6_K / Q3_K / Q2_K weights (layout:
// packed.h), compiled with -mavx2 -mfma -mf16c; entered only when the CPU
// reports those features (quant_matmul.cc).
//
// The 16 rows of a packed group are taken as two halves of 8, one per ymm, as
// in avx2/packed_q32.cc: lane t of a half is weight row t, and each
// activation row's 4-byte group k is broadcast against code vector k. Without
// VNNI a 4-byte group is maddubs (u8 x s8 -> int16 pairs) and madd. Q4_K
// codes are at most 15, so a 32-element sub-block's 8 maddubs results summed
// in int16 stay below 8 * 2 * 15 * 128 = 30720; Q6_K codes are at most 63,
// so a 16-element group's 4 are summed as two int16 pairs (each below 2 * 2 *
// 63 * 128 = 32256) widened to int32; Q3_K / Q2_K codes are at most 7 / 3,
// so a group's 4 sum in int16 (below 4 * 2 * 7 * 128 = 7168) and one madd
// against the group scale widens and scales them (GroupType). Per weight row
// and activation row the arithmetic is that of avx512/packed_k.cc (each
// scale group's exact int32 sum times its integer scale into P_b, the codes'
// bias taken off exactly; Q4_K's and Q2_K's M_b from the mins; y =
// fma(float(P_b), d_b * dx_b, y), z = fma(float(M_b), dmin_b * dx_b, z) over
// the super-blocks in order, output y - z), so packed outputs on AVX2 equal
// the AVX-512 ones bit for bit.
#include <immintrin.h>

#include <cstring>

#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"
#include "quant/kernels/rows.h"
#include "quant/kernels/x86.h"

namespace kvshare::detail {
namespace {

// Activation rows per pass. 8 int32 sums and a sub-block's 8 code vectors
// already fill the 16 ymm registers (the float sums, touched once per
// super-block, live in memory), yet 8 is faster than 4 (kvshare_bench
// MatPacked at m = 8 / 64; docs/kernels.md): half the passes decode and read
// each super-block half as often.
constexpr int kPassRows = 8;

// Decoded code vectors (Q6_K, Q3_K, Q2_K) per super-block and half (64 x 32
// bytes: 256 elements of 8 rows, one byte each).
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
  return {at(w.codes, w.bytes.codes) + 32 * h, w.high != nullptr ? at(w.high, w.bytes.high) + 32 * h : nullptr,
          at(w.subs, w.bytes.subs) + 8 * h,    w.mins != nullptr ? at(w.mins, w.bytes.mins) + 16 * h : nullptr,
          w.d + gb * kPackRows + 8 * h,        w.dmin != nullptr ? w.dmin + gb * kPackRows + 8 * h : nullptr};
}

// The decoded code vector i of super-block b (DecodeHalf's layout).
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
      for (int q = 0; q < 4; ++q)
        M = _mm256_add_epi32(M, _mm256_madd_epi16(mins[q], _mm256_set1_epi32(SubBlockSumPair(a, q))));
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

// Q2_K / Q3_K low code bits of group k (k < 64, in quarter kQuarter = k /
// 16): bits 2 kQuarter .. +1 of codes vector k % 16, at bits 0-1 (the bits
// above are other groups' codes). The 16-bit shift by at most 6 brings no bit
// of the other byte below bit 2.
template <int kQuarter>
inline __m256i Q2Bits(const std::uint8_t* codes, int k) {
  const __m256i v = Load32(codes + 64 * (k % 16));
  return kQuarter == 0 ? v : _mm256_srli_epi16(v, 2 * kQuarter);
}

// Q3_K code (0..7: the low bits plus 4 times the high bit) of group k: the
// high bit is bit k / 8 of high vector k % 8, moved to bit 2.
template <int kQuarter>
inline __m256i Q3Codes(const std::uint8_t* codes, const std::uint8_t* high, int k) {
  const __m256i hv = Load32(high + 64 * (k % 8));
  const int hb = k / 8;  // 2 kQuarter or 2 kQuarter + 1
  const __m256i hi = hb >= 2 ? _mm256_srli_epi16(hv, hb - 2) : _mm256_slli_epi16(hv, 2 - hb);
  return _mm256_or_si256(_mm256_and_si256(Q2Bits<kQuarter>(codes, k), _mm256_set1_epi8(0x03)),
                         _mm256_and_si256(hi, _mm256_set1_epi8(0x04)));
}

// The half's bytes of subs rows 2q and 2q + 1 (groups 2q, 2q + 1) as int16
// pairs, row t in int32 lane t, for madd against an activation's (bsum 2q,
// bsum 2q + 1): Q3_K's signed scales, Q2_K's stored bytes (mins: >> 4).
template <bool kSigned>
inline __m256i SubPairs(const std::uint8_t* subs, int q) {
  const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(subs + 32 * q));
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(subs + 32 * q + 16));
  const __m128i ab = _mm_unpacklo_epi8(a, b);
  return kSigned ? _mm256_cvtepi8_epi16(ab) : _mm256_cvtepu8_epi16(ab);
}

// An activation's bsums 2q and 2q + 1 as the low and high int16 of every
// int32 lane.
inline __m256i BsumPair(const ActQ8K& a, int q) {
  std::int32_t pair;
  std::memcpy(&pair, a.bsums + 2 * q, 4);
  return _mm256_set1_epi32(pair);
}

// sum_g v_g bsum_g over the 16 groups, v_g,t in pairs[q] (SubPairs), exact
// in int32 (|v| <= 32, |bsum| <= 16 * 128).
inline __m256i PairSum(const __m256i pairs[8], const ActQ8K& a) {
  __m256i s = _mm256_madd_epi16(pairs[0], BsumPair(a, 0));
  for (int q = 1; q < 8; ++q) s = _mm256_add_epi32(s, _mm256_madd_epi16(pairs[q], BsumPair(a, q)));
  return s;
}

// The types whose super-block is 16 groups of 16 elements with one integer
// scale each: Q6_K, Q3_K, Q2_K. Codes: group k's code vector (unsigned codes
// = value + kBias). Q3_K / Q2_K: codes of at most 7 / 3, so the 4 maddubs of
// a group sum in int16 (each int16 <= 4 * 2 * 7 * 128 = 7168) and one madd
// against Scales (the 8 rows' scales, each in both int16 of its lane)
// multiplies and adds the pair; Q3_K's bias comes off per super-block as 4
// sum_g s_g bsum_g (PairSum). Q6_K's codes reach 63: two int16 pairs (each
// <= 2 * 2 * 63 * 128 = 32256) widened to int32, the bias added per group,
// times the scales in int32 lanes. Either way P_b = sum_g s_g (sum_g c x -
// kBias bsum_g), the same integer.
template <GgmlType T>
struct GroupType;
template <>
struct GroupType<GgmlType::kQ6_K> {
  static constexpr int kBias = 32;
  template <int kQuarter>
  static __m256i Codes(const HalfPlanes& pl, int k) {
    return Q6Codes<kQuarter>(pl.codes, pl.high, k);
  }
  static __m256i Scales(const std::uint8_t* s) { return Load8S(s); }
};
template <>
struct GroupType<GgmlType::kQ3_K> {
  static constexpr int kBias = 4;
  template <int kQuarter>
  static __m256i Codes(const HalfPlanes& pl, int k) {
    return Q3Codes<kQuarter>(pl.codes, pl.high, k);
  }
  static __m256i Scales(const std::uint8_t* s) {  // int8 sc_g - 32
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
    return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(v, v));
  }
};
template <>
struct GroupType<GgmlType::kQ2_K> {
  static constexpr int kBias = 0;
  template <int kQuarter>
  static __m256i Codes(const HalfPlanes& pl, int k) {
    return _mm256_and_si256(Q2Bits<kQuarter>(pl.codes, k), _mm256_set1_epi8(0x03));
  }
  static __m256i Scales(const std::uint8_t* s) {  // the low nibble of scale | min << 4
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
    return _mm256_and_si256(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v)), _mm256_set1_epi16(0xF));
  }
};

// Groups 4Q .. 4Q + 3 (quarter Q of the super-block) into P.
template <GgmlType T, int kQuarter, int R, bool kDecoded>
inline void GroupQuarter(const HalfPlanes& pl, const ActQ8K* x, std::int64_t xs, std::int64_t b, __m256i P[R],
                         const std::uint8_t* dec) {
  using Type = GroupType<T>;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int gq = 0; gq < 4; ++gq) {
    const int grp = 4 * kQuarter + gq;  // scale group: elements 16 grp .. +15, code vectors 4 grp .. +3
    __m256i c[4];
    for (int k = 0; k < 4; ++k) {
      c[k] = kDecoded ? DecodedCodes(dec, b, 4 * grp + k) : Type::template Codes<kQuarter>(pl, 4 * grp + k);
    }
    const __m256i s = Type::Scales(pl.subs + 16 * grp);
    for (int j = 0; j < R; ++j) {
      const ActQ8K& a = x[j * xs + b];
      const std::int8_t* q = a.qs + 16 * grp;
      const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(c[0], Broadcast4Ymm(q)),
                                          _mm256_maddubs_epi16(c[1], Broadcast4Ymm(q + 4)));
      const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(c[2], Broadcast4Ymm(q + 8)),
                                          _mm256_maddubs_epi16(c[3], Broadcast4Ymm(q + 12)));
      if constexpr (T == GgmlType::kQ6_K) {
        const __m256i p = _mm256_add_epi32(_mm256_set1_epi32(-Type::kBias * a.bsums[grp]),
                                           _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones)));
        P[j] = _mm256_add_epi32(P[j], _mm256_mullo_epi32(p, s));
      } else {
        P[j] = _mm256_add_epi32(P[j], _mm256_madd_epi16(_mm256_add_epi16(p0, p1), s));
      }
    }
  }
}

// Q6_K / Q3_K / Q2_K: one half (8 weight rows) against R activation rows;
// y[j * ys + t]. kDecoded: the code vectors come from dec (DecodeHalf). Q2_K's
// M_b = sum_g m_g bsum_g (PairSum of its mins) goes to a second accumulator
// with dmin, as Q4_K's.
template <GgmlType T, int R, bool kDecoded>
void HalfRowsScaled(const PackedWeights& w, std::int64_t g, int h, const ActQ8K* x, std::int64_t xs, float* y,
                    std::int64_t ys, const std::uint8_t* dec) {
  constexpr bool kMins = T == GgmlType::kQ2_K;
  __m256 acc[R], accm[R];
  for (int j = 0; j < R; ++j) acc[j] = accm[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < w.nb; ++b) {
    const HalfPlanes pl = PlanesAt(w, g, b, h);
    if (!kDecoded && h == 0) {
      PrefetchPackedAhead(pl.codes, w.bytes.codes);
      if (pl.high != nullptr) PrefetchPackedAhead(pl.high, w.bytes.high);
    }
    __m256i P[R];
    for (int j = 0; j < R; ++j) P[j] = _mm256_setzero_si256();
    GroupQuarter<T, 0, R, kDecoded>(pl, x, xs, b, P, dec);
    GroupQuarter<T, 1, R, kDecoded>(pl, x, xs, b, P, dec);
    GroupQuarter<T, 2, R, kDecoded>(pl, x, xs, b, P, dec);
    GroupQuarter<T, 3, R, kDecoded>(pl, x, xs, b, P, dec);
    if constexpr (T == GgmlType::kQ3_K) {  // P_b -= 4 sum_g s_g bsum_g
      __m256i sp[8];
      for (int q = 0; q < 8; ++q) sp[q] = SubPairs<true>(pl.subs, q);
      for (int j = 0; j < R; ++j) P[j] = _mm256_sub_epi32(P[j], _mm256_slli_epi32(PairSum(sp, x[j * xs + b]), 2));
    }
    const __m256 dw = Load8H(pl.d);
    for (int j = 0; j < R; ++j) {
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P[j]), _mm256_mul_ps(dw, _mm256_set1_ps(x[j * xs + b].d)), acc[j]);
    }
    if constexpr (kMins) {
      __m256i mp[8];
      for (int q = 0; q < 8; ++q) mp[q] = _mm256_srli_epi16(SubPairs<false>(pl.subs, q), 4);
      const __m256 dmin = Load8H(pl.dmin);
      for (int j = 0; j < R; ++j) {
        const ActQ8K& a = x[j * xs + b];
        accm[j] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(PairSum(mp, a)), _mm256_mul_ps(dmin, _mm256_set1_ps(a.d)), accm[j]);
      }
    }
  }
  for (int j = 0; j < R; ++j) _mm256_storeu_ps(y + j * ys, kMins ? _mm256_sub_ps(acc[j], accm[j]) : acc[j]);
}

template <int R, bool kDecoded>
void HalfRows(const PackedWeights& w, std::int64_t g, int h, const ActQ8K* x, std::int64_t xs, float* y,
              std::int64_t ys, const std::uint8_t* dec) {
  switch (w.type) {
    case GgmlType::kQ4_K: HalfRowsQ4K<R>(w, g, h, x, xs, y, ys); return;  // never decoded (Avx2PackedKRows)
    case GgmlType::kQ2_K: HalfRowsScaled<GgmlType::kQ2_K, R, kDecoded>(w, g, h, x, xs, y, ys, dec); return;
    case GgmlType::kQ3_K: HalfRowsScaled<GgmlType::kQ3_K, R, kDecoded>(w, g, h, x, xs, y, ys, dec); return;
    default: HalfRowsScaled<GgmlType::kQ6_K, R, kDecoded>(w, g, h, x, xs, y, ys, dec); return;
  }
}

template <GgmlType T, int kQuarter>
void DecodeQuarter(const HalfPlanes& pl, std::uint8_t* out) {
  for (int k = 16 * kQuarter; k < 16 * (kQuarter + 1); ++k) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32 * k), GroupType<T>::template Codes<kQuarter>(pl, k));
  }
}

template <GgmlType T>
void DecodeBlock(const HalfPlanes& pl, std::uint8_t* out) {
  DecodeQuarter<T, 0>(pl, out);
  DecodeQuarter<T, 1>(pl, out);
  DecodeQuarter<T, 2>(pl, out);
  DecodeQuarter<T, 3>(pl, out);
}

// Half h of group g's code vectors (Q6_K, Q3_K or Q2_K), decoded as the
// kernel forms them, into out (kDecodedVectors of 32 bytes per super-block,
// 4 per group).
void DecodeHalf(const PackedWeights& w, std::int64_t g, int h, std::uint8_t* out) {
  for (std::int64_t b = 0; b < w.nb; ++b, out += 32 * kDecodedVectors) {
    const HalfPlanes pl = PlanesAt(w, g, b, h);
    if (h == 0) {
      PrefetchPackedAhead(pl.codes, w.bytes.codes);
      if (pl.high != nullptr) PrefetchPackedAhead(pl.high, w.bytes.high);
    }
    switch (w.type) {
      case GgmlType::kQ2_K: DecodeBlock<GgmlType::kQ2_K>(pl, out); break;
      case GgmlType::kQ3_K: DecodeBlock<GgmlType::kQ3_K>(pl, out); break;
      default: DecodeBlock<GgmlType::kQ6_K>(pl, out); break;
    }
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
                     int acts, float* y, std::int64_t ys, const AmxStagedActs* /*staged*/) {
  // Q6_K / Q3_K / Q2_K with several passes (prefill, mixed steps): each
  // half's codes are decoded once into scratch (2 KiB per super-block)
  // instead of once per pass, as the AVX-512 kernel does
  // (avx512/packed_k.cc). Q4_K, whose nibble split is two cheap operations,
  // is slower decoded and decodes every pass (MatPacked at m = 64;
  // docs/kernels.md).
  const bool decoded = w.type != GgmlType::kQ4_K && acts > kPassRows;
  auto* dec = decoded
                  ? static_cast<std::uint8_t*>(DecodedCodeScratch(static_cast<std::size_t>(kDecodedVectors / 2 * w.nb)))
                  : nullptr;
  for (std::int64_t g = r0 / kPackRows; g < r1 / kPackRows; ++g) {
    for (int h = 0; h < 2; ++h) {
      float* yh = y + (g * kPackRows - r0) + 8 * h;
      if (decoded) {
        DecodeHalf(w, g, h, dec);
        Passes<true>(w, g, h, x, xs, acts, yh, ys, dec);
      } else {
        Passes<false>(w, g, h, x, xs, acts, yh, ys, nullptr);
      }
    }
  }
}

}  // namespace kvshare::detail
