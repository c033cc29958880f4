// AVX2 integer dot kernels for the low-bit types Q2_K, Q3_K, IQ4_NL, IQ4_XS,
// the ternary TQ1_0 / TQ2_0, MXFP4, NVFP4, Q1_0 and Q2_0 (compiled with -mavx2 -mfma -mf16c;
// entered only after the run-time CPU check, quant_matmul.cc). The AVX-512
// level runs them too. Each takes R activation rows at once: a weight block
// is unpacked once and dotted with every row; each row's arithmetic is exactly
// that of R = 1, so a row's result does not depend on the rows beside it.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "model/quant_kernels.h"
#include "model/quant_x86.h"

namespace kvshare::detail {
namespace {

// pshufb controls over 8 int16 values in both 128-bit lanes: sel[k] puts value
// 2k in every int16 of the low lane and value 2k + 1 in the high lane (the
// scales of the two 16-element groups one 32-byte code vector covers).
struct GroupPairSelect {
  __m256i sel[4];
  GroupPairSelect() {
    for (int k = 0; k < 4; ++k) {
      sel[k] = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(((4 * k + 3) << 8) | (4 * k + 2))),
                                _mm_set1_epi16(static_cast<short>(((4 * k + 1) << 8) | (4 * k))));
    }
  }
};

// Q2_K / Q3_K: code chunk (n, j) (element 128n + 32j + l in byte l, groups
// 8n + 2j and 8n + 2j + 1 in the low and high 128-bit lane) against every
// activation row before the next chunk: the R int32 sums, one code vector and
// its scales stay in registers for R up to 8. `code(n, j, bits)` forms the
// chunk's unsigned codes; sumi[r] += sum_g scale_g (codes . a)_g.
template <int R, typename CodeFn>
inline void GroupSums(const std::uint8_t* qs, __m256i sc16, const ActQ8K* x, std::int64_t xs, std::int64_t b,
                      const CodeFn& code, __m256i sumi[R]) {
  static const GroupPairSelect kSel;
  for (int n = 0; n < 2; ++n) {
    const __m256i bits = Load32(qs + 32 * n);
    const __m256i half = n == 0 ? _mm256_permute4x64_epi64(sc16, 0x44) : _mm256_permute4x64_epi64(sc16, 0xEE);
    for (int j = 0; j < 4; ++j) {
      const __m256i q = code(n, j, bits);
      const __m256i sc = _mm256_shuffle_epi8(half, kSel.sel[j]);
      for (int r = 0; r < R; ++r) {
        const __m256i p = _mm256_maddubs_epi16(q, Load32(x[r * xs + b].qs + 128 * n + 32 * j));
        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, sc));
      }
    }
  }
}

// Q2_K: sum (d sc_g code - dmin m_g) x = d dx sum_g sc_g (codes . a)_g - dmin dx sum_g m_g bsums_g.
template <int R>
void DotQ2_KR(const BlockQ2_K* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m128i m4 = _mm_set1_epi8(0xF);
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales));
    __m256i sumi[R];
    for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
    GroupSums<R>(w[b].qs, _mm256_cvtepu8_epi16(_mm_and_si128(sc8, m4)), x, xs, b,
                 [&](int, int j, __m256i bits) { return _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3); }, sumi);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
    const float dw = H2F(w[b].d), dmin = H2F(w[b].dmin);
    for (int r = 0; r < R; ++r) {
      const ActQ8K& a = x[r * xs + b];
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[r]), _mm256_set1_ps(dw * a.d), acc[r]);
      acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mins, LoadBsums(a))), _mm256_set1_ps(dmin * a.d),
                                acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

// Q3_K's 16 scales minus 32 as int16, unpacked four bytes at a time.
inline __m256i Q3KScales16(const std::uint8_t* s) {
  std::uint32_t a[3], u[4];
  std::memcpy(a, s, 12);
  constexpr std::uint32_t k4 = 0x0F0F0F0F, k2 = 0x03030303;
  u[0] = (a[0] & k4) | ((a[2] & k2) << 4);
  u[1] = (a[1] & k4) | (((a[2] >> 2) & k2) << 4);
  u[2] = ((a[0] >> 4) & k4) | (((a[2] >> 4) & k2) << 4);
  u[3] = ((a[1] >> 4) & k4) | (((a[2] >> 6) & k2) << 4);
  const __m128i v = _mm_sub_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u)), _mm_set1_epi8(32));
  return _mm256_cvtepi8_epi16(v);
}

// Q3_K: code + 4 (0..7: the 2 low bits plus 4 times the high bit) through
// maddubs, the sums starting from -4 sum_g sc_g bsums_g.
template <int R>
void DotQ3_KR(const BlockQ3_K* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i sc16 = Q3KScales16(w[b].scales);
    const __m256i hm = Load32(w[b].hmask);
    __m256i sumi[R];
    for (int r = 0; r < R; ++r) {
      sumi[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, LoadBsums(x[r * xs + b])), 2));
    }
    GroupSums<R>(w[b].qs, sc16, x, xs, b, [&](int n, int j, __m256i bits) {
      // 16-bit shifts by at most 7: bit 0 of each byte comes from the same byte.
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * n + j), one);
      return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3), _mm256_slli_epi16(high, 2));
    }, sumi);
    const float dw = H2F(w[b].d);
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[r]), _mm256_set1_ps(dw * x[r * xs + b].d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

// Grid values of 16 nibble bytes (low nibbles first) as 32 int8, kept as
// |value| and its sign for maddubs (|value| <= 127, so pairs stay in int16).
struct IQ4Values {
  __m256i abs, sign;
  IQ4Values(const std::uint8_t* qs, __m256i table) {
    sign = _mm256_shuffle_epi8(table, Nibbles(qs));
    abs = _mm256_sign_epi8(sign, sign);
  }
  __m256i Pairs(const std::int8_t* a) const { return _mm256_maddubs_epi16(abs, _mm256_sign_epi8(Load32(a), sign)); }
};

inline __m256i GridTable(const std::int8_t* values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}
inline __m256i IQ4Table() { return GridTable(kIq4Values); }

inline int HSumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// The 32-element types with a 16-value grid: IQ4_NL (fp16 d) and MXFP4 (E8M0 e).
template <typename Block>
struct Grid4;
template <>
struct Grid4<BlockIQ4_NL> {
  static const std::int8_t* Values() { return kIq4Values; }
  static float Scale(const BlockIQ4_NL& b) { return H2F(b.d); }
};
template <>
struct Grid4<BlockMXFP4> {
  static const std::int8_t* Values() { return kMxfp4Values; }
  static float Scale(const BlockMXFP4& b) { return Mxfp4Scale(b.e); }
};

// IQ4_NL / MXFP4: the packed kernels' arithmetic (y = fma(float(p_b), dw_b *
// dx_b, y) over the blocks in order, p_b exact), so an IQ4_NL matrix gives
// bitwise the same outputs packed (quant_avx2_packed.cc,
// quant_avx512_packed.cc) or not.
template <int R, typename Block>
void DotGrid4R(const Block* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  const __m256i table = GridTable(Grid4<Block>::Values()), ones = _mm256_set1_epi16(1);
  float acc[R];
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const IQ4Values v(w[b].qs, table);
    const float dw = Grid4<Block>::Scale(w[b]);
    for (int r = 0; r < R; ++r) {
      const ActQ8& a = x[r * xs + b];
      const int p = HSumI32(_mm256_madd_epi16(v.Pairs(a.qs), ones));
      acc[r] = std::fma(static_cast<float>(p), dw * a.d, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r];
}

// IQ4_XS against per-32 activations (x[8b + ib]: sub-block ib of block b):
// per sub-block y = fma(float(p), (d (ls - 32)) dx, y) in order, the packed
// kernels' arithmetic, so packed and unpacked outputs are bitwise equal.
template <int R>
void DotIQ4_XSR(const BlockIQ4_XS* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  const __m256i table = IQ4Table(), ones = _mm256_set1_epi16(1);
  float acc[R];
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const float d = H2F(w[b].d);
    for (int ib = 0; ib < 8; ++ib) {
      const IQ4Values v(w[b].qs + 16 * ib, table);
      const float dsub = d * static_cast<float>(IQ4XSScale(ib, w[b]) - 32);  // = IQ4XSSubScale
      for (int r = 0; r < R; ++r) {
        const ActQ8& a = x[r * xs + 8 * b + ib];
        const int p = HSumI32(_mm256_madd_epi16(v.Pairs(a.qs), ones));
        acc[r] = std::fma(static_cast<float>(p), dsub * a.d, acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r];
}

// Ternary codes (0..2: the value + 1) of a TQ2_0 / TQ1_0 super-block in
// element order, 8 vectors of 32: sum (code - 1) x = sum code x - sum x.
struct TernaryCodes {
  __m256i c[8];
  __m256i Dot(const ActQ8K& a) const {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s = _mm256_madd_epi16(LoadBsums(a), ones);
    s = _mm256_sub_epi32(_mm256_setzero_si256(), s);
    for (int k = 0; k < 8; ++k) s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(c[k], Load32(a.qs + 32 * k)), ones));
    return s;
  }
};

template <int R, typename Block, typename Decode>
void DotTernaryR(const Block* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out, const Decode& decode) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    TernaryCodes t;
    decode(w[b], t);
    const float dw = H2F(w[b].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8K& a = x[r * xs + b];
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t.Dot(a)), _mm256_set1_ps(dw * a.d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

template <int R>
void DotTQ2_0R(const BlockTQ2_0* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  DotTernaryR<R>(w, x, xs, nb, out, [](const BlockTQ2_0& b, TernaryCodes& t) {
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int n = 0; n < 2; ++n) {
      const __m256i qs = Load32(b.qs + 32 * n);
      for (int j = 0; j < 4; ++j) t.c[4 * n + j] = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m3);
    }
  });
}

// Digit m of 32 TQ1_0 bytes: ((uint8(b * 3^m)) * 3) >> 8, in 16-bit halves.
inline __m256i Tq1Digits(__m256i v, int pow3) {
  const __m256i lo8 = _mm256_set1_epi16(0xFF), k = _mm256_set1_epi16(static_cast<short>(pow3)),
                three = _mm256_set1_epi16(3);
  __m256i lo = _mm256_and_si256(_mm256_mullo_epi16(_mm256_and_si256(v, lo8), k), lo8);
  __m256i hi = _mm256_and_si256(_mm256_mullo_epi16(_mm256_srli_epi16(v, 8), k), lo8);
  lo = _mm256_srli_epi16(_mm256_mullo_epi16(lo, three), 8);
  hi = _mm256_srli_epi16(_mm256_mullo_epi16(hi, three), 8);
  return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 8));
}

template <int R>
void DotTQ1_0R(const BlockTQ1_0* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  DotTernaryR<R>(w, x, xs, nb, out, [](const BlockTQ1_0& b, TernaryCodes& t) {
    static constexpr int kPow3[5] = {1, 3, 9, 27, 81};
    const __m256i q0 = Load32(b.qs);
    for (int m = 0; m < 5; ++m) t.c[m] = Tq1Digits(q0, kPow3[m]);  // elements 32m .. 32m + 31
    // Elements 160 + 16m + l: digit m of qs[32 + l] (l < 16), the 16 bytes in
    // both lanes, so digits m and m + 1 make one vector; then elements 240 ..
    // 255 from the 4 qh bytes.
    const __m256i q1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 32)));
    __m256i d[5];
    for (int m = 0; m < 5; ++m) d[m] = Tq1Digits(q1, kPow3[m]);
    t.c[5] = _mm256_blend_epi32(d[0], d[1], 0xF0);
    t.c[6] = _mm256_blend_epi32(d[2], d[3], 0xF0);
    alignas(16) std::uint8_t tail[16];
    for (int e = 240; e < 256; ++e) tail[e - 240] = static_cast<std::uint8_t>(Tq1Trit(b, e));
    t.c[7] = _mm256_inserti128_si256(d[4], _mm_load_si128(reinterpret_cast<const __m128i*>(tail)), 1);
  });
}

template <int R>
void DotIQ4_NLR(const BlockIQ4_NL* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  DotGrid4R<R>(w, x, xs, nb, out);
}
template <int R>
void DotMXFP4R(const BlockMXFP4* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  DotGrid4R<R>(w, x, xs, nb, out);
}

// NVFP4 against per-32 activations: the 16 code bytes of sub-blocks 2h and
// 2h + 1 become their 32 values in element order (low nibbles of 8 bytes,
// then their high nibbles, per sub-block), one sub-block per 128-bit lane,
// and each lane's int32 sums are scaled by its sub-block's d * dx in a float
// vector (one horizontal sum per row at the end).
template <int R>
void DotNVFP4R(const BlockNVFP4* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  const __m256i table = GridTable(kMxfp4Values), ones = _mm256_set1_epi16(1);
  const __m128i m4 = _mm_set1_epi8(0xF);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    for (int h = 0; h < 2; ++h) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs + 16 * h));
      const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
      const __m256i codes = _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
      const __m256i v = _mm256_shuffle_epi8(table, codes), abs = _mm256_sign_epi8(v, v);
      const __m256 d = _mm256_set_m128(_mm_set1_ps(Ue4m3Scale(w[b].d[2 * h + 1])), _mm_set1_ps(Ue4m3Scale(w[b].d[2 * h])));
      for (int r = 0; r < R; ++r) {
        const ActQ8& a = x[r * xs + 2 * b + h];
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(abs, _mm256_sign_epi8(Load32(a.qs), v)), ones);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(d, _mm256_set1_ps(a.d)), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

// Q1_0: sum (bit ? a : -a) = -sum sign(a, s), s = -1 where the bit is set;
// int32 lane sums scaled in a float vector per row.
template <int R>
void DotQ1_0R(const BlockQ1_0* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i ones8 = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const float d = H2F(w[b].d);
    for (int k = 0; k < 4; ++k) {
      std::uint32_t bits;
      std::memcpy(&bits, w[b].qs + 4 * k, 4);
      const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
      const __m256i s = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel), ones8);
      for (int r = 0; r < R; ++r) {
        const ActQ8& a = x[r * xs + 4 * b + k];
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, _mm256_sign_epi8(Load32(a.qs), s)), ones);
        acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * a.d), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

// Q2_0's four 2-bit codes of each byte value, one per byte.
struct Q2_0Codes {
  std::uint32_t of[256];
  Q2_0Codes() {
    for (unsigned v = 0; v < 256; ++v) of[v] = (v & 3) | ((v >> 2) & 3) << 8 | ((v >> 4) & 3) << 16 | (v >> 6) << 24;
  }
};

// Q2_0: sum (code - 1) a = sum code a - sum a, the activation sum taken off
// in int32 lane 0.
template <int R>
void DotQ2_0R(const BlockQ2_0* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  static const Q2_0Codes kCodes;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const float d = H2F(w[b].d);
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t* q = w[b].qs + 8 * h;
      const __m256i c = _mm256_setr_epi32(
          static_cast<int>(kCodes.of[q[0]]), static_cast<int>(kCodes.of[q[1]]), static_cast<int>(kCodes.of[q[2]]),
          static_cast<int>(kCodes.of[q[3]]), static_cast<int>(kCodes.of[q[4]]), static_cast<int>(kCodes.of[q[5]]),
          static_cast<int>(kCodes.of[q[6]]), static_cast<int>(kCodes.of[q[7]]));
      for (int r = 0; r < R; ++r) {
        const ActQ8& a = x[r * xs + 2 * b + h];
        const __m256i p = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(c, Load32(a.qs)), ones),
                                           _mm256_setr_epi32(a.sum, 0, 0, 0, 0, 0, 0, 0));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * a.d), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

}  // namespace

void Avx2NVFP4Rows(const BlockNVFP4* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                   float* y, std::int64_t ys) {
  const auto rows = KVSHARE_ROWS_KERNEL_N(DotNVFP4R, BlockNVFP4, ActQ8, 8);
  rows(w, nrows, x, xs, nb, acts, y, ys);
}

void Avx2Q1_0Rows(const BlockQ1_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys) {
  const auto rows = KVSHARE_ROWS_KERNEL_N(DotQ1_0R, BlockQ1_0, ActQ8, 8);
  rows(w, nrows, x, xs, nb, acts, y, ys);
}

void Avx2Q2_0Rows(const BlockQ2_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys) {
  const auto rows = KVSHARE_ROWS_KERNEL_N(DotQ2_0R, BlockQ2_0, ActQ8, 8);
  rows(w, nrows, x, xs, nb, acts, y, ys);
}

void Avx2Q2_KRows(const BlockQ2_K* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys) {
  const auto rows = KVSHARE_ROWS_KERNEL_N(DotQ2_KR, BlockQ2_K, ActQ8K, 8);
  rows(w, nrows, x, xs, nb, acts, y, ys);
}

void Avx2Q3_KRows(const BlockQ3_K* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys) {
  const auto rows = KVSHARE_ROWS_KERNEL_N(DotQ3_KR, BlockQ3_K, ActQ8K, 8);
  rows(w, nrows, x, xs, nb, acts, y, ys);
}

void Avx2IQ4_NLRows(const BlockIQ4_NL* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb,
                    int acts, float* y, std::int64_t ys) {
  const auto rows = KVSHARE_ROWS_KERNEL(DotIQ4_NLR, BlockIQ4_NL, ActQ8);
  rows(w, nrows, x, xs, nb, acts, y, ys);
}

void Avx2MXFP4Rows(const BlockMXFP4* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                   float* y, std::int64_t ys) {
  const auto rows = KVSHARE_ROWS_KERNEL(DotMXFP4R, BlockMXFP4, ActQ8);
  rows(w, nrows, x, xs, nb, acts, y, ys);
}

void Avx2TQ1_0Rows(const BlockTQ1_0* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                   float* y, std::int64_t ys) {
  const auto rows = KVSHARE_ROWS_KERNEL(DotTQ1_0R, BlockTQ1_0, ActQ8K);
  rows(w, nrows, x, xs, nb, acts, y, ys);
}

void Avx2TQ2_0Rows(const BlockTQ2_0* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                   float* y, std::int64_t ys) {
  const auto rows = KVSHARE_ROWS_KERNEL(DotTQ2_0R, BlockTQ2_0, ActQ8K);
  rows(w, nrows, x, xs, nb, acts, y, ys);
}

void Avx2IQ4_XSRows(const BlockIQ4_XS* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb,
                    int acts, float* y, std::int64_t ys) {
  const auto rows = KVSHARE_ROWS_KERNEL(DotIQ4_XSR, BlockIQ4_XS, ActQ8);
  rows(w, nrows, x, xs, nb, acts, y, ys);
}

}  // namespace kvshare::detail
