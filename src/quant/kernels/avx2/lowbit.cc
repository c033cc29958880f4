// AVX2 kernels for the ternary, binary and 2-bit types TQ1_0, TQ2_0, Q1_0
// and Q2_0 (kernels/dispatch.h; compiled with -mavx2 -mfma -mf16c, entered
// only after the run-time CPU check, quant_matmul.cc). The AVX-512 level runs
// them too. Each takes R activation rows at once (Q1_0 / Q2_0 up to 8, TQ 4):
// a weight block is unpacked once and dotted with every row; each row's
// arithmetic is exactly that of R = 1, so a row's result does not depend on
// the rows beside it.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/kernels/dispatch.h"
#include "quant/kernels/rows.h"
#include "quant/kernels/x86.h"

namespace kvshare::detail {
namespace {

// Ternary codes (0..2: the value + 1) of a TQ2_0 / TQ1_0 super-block in
// element order, 8 vectors of 32: sum (code - 1) x = sum code x - sum x.
struct TernaryCodes {
  __m256i c[8];
  __m256i Dot(const ActQ8K& a) const {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s = _mm256_madd_epi16(LoadBsums(a), ones);
    s = _mm256_sub_epi32(_mm256_setzero_si256(), s);
    for (int k = 0; k < 8; ++k)
      s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(c[k], Load32(a.qs + 32 * k)), ones));
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
      const __m256i c = _mm256_setr_epi32(static_cast<int>(kCodes.of[q[0]]), static_cast<int>(kCodes.of[q[1]]),
                                          static_cast<int>(kCodes.of[q[2]]), static_cast<int>(kCodes.of[q[3]]),
                                          static_cast<int>(kCodes.of[q[4]]), static_cast<int>(kCodes.of[q[5]]),
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

KVSHARE_DEFINE_ROWS(Avx2TQ1_0Rows, BlockTQ1_0, ActQ8K, DotTQ1_0R)
KVSHARE_DEFINE_ROWS(Avx2TQ2_0Rows, BlockTQ2_0, ActQ8K, DotTQ2_0R)
KVSHARE_DEFINE_ROWS_N(Avx2Q1_0Rows, BlockQ1_0, ActQ8, DotQ1_0R, 8)
KVSHARE_DEFINE_ROWS_N(Avx2Q2_0Rows, BlockQ2_0, ActQ8, DotQ2_0R, 8)

}  // namespace kvshare::detail
