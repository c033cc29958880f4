// AVX2 + FMA kernels for the K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K
// (kernels/dispatch.h; compiled with -mavx2 -mfma -mf16c, entered only when
// the CPU reports those features, quant_matmul.cc). Each takes R activation
// rows at once (Q2_K / Q3_K up to 8, the others 4): a weight block is
// unpacked once and dotted with every row; each row's arithmetic is exactly
// that of R = 1. The AVX-512 level runs the Q2_K / Q3_K kernels too.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/kernels/dispatch.h"
#include "quant/kernels/rows.h"
#include "quant/kernels/x86.h"

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
    GroupSums<R>(
        w[b].qs, _mm256_cvtepu8_epi16(_mm_and_si128(sc8, m4)), x, xs, b,
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
      sumi[r] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                 _mm256_slli_epi32(_mm256_madd_epi16(sc16, LoadBsums(x[r * xs + b])), 2));
    }
    GroupSums<R>(
        w[b].qs, sc16, x, xs, b,
        [&](int n, int j, __m256i bits) {
          // 16-bit shifts by at most 7: bit 0 of each byte comes from the same byte.
          const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * n + j), one);
          return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), m3), _mm256_slli_epi16(high, 2));
        },
        sumi);
    const float dw = H2F(w[b].d);
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[r]), _mm256_set1_ps(dw * x[r * xs + b].d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

// min term dmin dx sum_j m_j (sum of activation sub-block j), from the bsums
// in one madd_epi16.
template <int R, typename Block>
void DotQKMinR(const Block* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  const __m256i min_pairs = Q4KMinPairsControl();
  __m256 acc[R], accm[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), accm[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i sm = _mm256_broadcastsi128_si256(Q4KScalesMins(w[b].scales));
    __m256i lo[4], hi[4], sc[8];
    KCodes<Block>::Get(w[b], lo, hi);
    for (int j = 0; j < 8; ++j) sc[j] = _mm256_shuffle_epi8(sm, _mm256_set1_epi16(static_cast<short>(0xFF00 | j)));
    const __m256i mins = _mm256_shuffle_epi8(sm, min_pairs);
    std::uint32_t dd;  // d, dmin: the block's first 4 bytes
    std::memcpy(&dd, &w[b], 4);
    const __m128 dwm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd)));
    for (int r = 0; r < R; ++r) {
      const ActQ8K& a = x[r * xs + b];
      __m256i sumi = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i plo = _mm256_maddubs_epi16(lo[c], Load32(a.qs + 64 * c));
        const __m256i phi = _mm256_maddubs_epi16(hi[c], Load32(a.qs + 64 * c + 32));
        sumi = _mm256_add_epi32(
            sumi, _mm256_add_epi32(_mm256_madd_epi16(plo, sc[2 * c]), _mm256_madd_epi16(phi, sc[2 * c + 1])));
      }
      const __m256i summ = _mm256_madd_epi16(mins, LoadBsums(a));
      const __m128 d = _mm_mul_ps(dwm, _mm_set1_ps(a.d));  // dw dx, dmin dx
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_broadcastss_ps(d), acc[r]);
      accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_broadcastss_ps(_mm_movehdup_ps(d)), accm[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]) - HSum(accm[r]);
}

// Q6_K: codes stored + 32 (0..63) through maddubs and madd_epi16 against the
// sign-extended int16 group scales (one per 128-bit lane: 16 elements), then
// the offset 32 sum_g sc_g bsums_g subtracted in int32 (one madd_epi16).
template <int R>
void DotQ6_KR(const BlockQ6_K* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3), m30 = _mm256_set1_epi8(0x30);
  // pshufb controls: int16 scale 2k in the low 128-bit lane, 2k + 1 in the high one.
  __m256i sel[4];
  for (int k = 0; k < 4; ++k) {
    sel[k] = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(((4 * k + 3) << 8) | (4 * k + 2))),
                              _mm_set1_epi16(static_cast<short>(((4 * k + 1) << 8) | (4 * k))));
  }
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
    __m256i q[2][4], s[2][4];
    for (int n = 0; n < 2; ++n) {
      const __m256i ql0 = Load32(w[b].ql + 64 * n);
      const __m256i ql1 = Load32(w[b].ql + 64 * n + 32);
      const __m256i qh = Load32(w[b].qh + 32 * n);
      q[n][0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
      q[n][1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
      q[n][2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
      q[n][3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
      // Scales 8n .. 8n + 7 in both lanes; q[n][k] covers groups 8n + 2k (low lane) and 8n + 2k + 1.
      const __m256i half = n == 0 ? _mm256_permute4x64_epi64(sc16, 0x44) : _mm256_permute4x64_epi64(sc16, 0xEE);
      for (int k = 0; k < 4; ++k) s[n][k] = _mm256_shuffle_epi8(half, sel[k]);
    }
    const float dw = H2F(w[b].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8K& a8 = x[r * xs + b];
      __m256i sumi = _mm256_slli_epi32(_mm256_madd_epi16(sc16, LoadBsums(a8)), 5);
      sumi = _mm256_sub_epi32(_mm256_setzero_si256(), sumi);
      for (int n = 0; n < 2; ++n) {
        const std::int8_t* a = a8.qs + 128 * n;
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[n][0], Load32(a)), s[n][0]);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[n][1], Load32(a + 32)), s[n][1]);
        const __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[n][2], Load32(a + 64)), s[n][2]);
        const __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[n][3], Load32(a + 96)), s[n][3]);
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(dw * a8.d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

}  // namespace

KVSHARE_DEFINE_ROWS_N(Avx2Q2_KRows, BlockQ2_K, ActQ8K, DotQ2_KR, 8)
KVSHARE_DEFINE_ROWS_N(Avx2Q3_KRows, BlockQ3_K, ActQ8K, DotQ3_KR, 8)
KVSHARE_DEFINE_ROWS(Avx2Q4_KRows, BlockQ4_K, ActQ8K, DotQKMinR)
KVSHARE_DEFINE_ROWS(Avx2Q5_KRows, BlockQ5_K, ActQ8K, DotQKMinR)
KVSHARE_DEFINE_ROWS(Avx2Q6_KRows, BlockQ6_K, ActQ8K, DotQ6_KR)

}  // namespace kvshare::detail
