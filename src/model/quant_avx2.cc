// AVX2 + FMA integer dot kernels (compiled with -mavx2 -mfma -mf16c; entered
// only when the CPU reports those features, see quant_matmul.cc).
#include <immintrin.h>

#include <cstring>

#include "model/quant_kernels.h"
#include "model/quant_x86.h"

namespace kvshare::detail {
namespace {

float DotQ8_0(const BlockQ8_0* w, const ActQ8* x, std::int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i p = DotS8S8(Load32(w[b].qs), Load32(x[b].qs));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(H2F(w[b].d) * x[b].d), acc);
  }
  return HSum(acc);
}

// q in [0, 15] with offset 8: dot = sum(q*x) - 8*sum(x).
float DotQ4_0(const BlockQ4_0* w, const ActQ8* x, std::int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  float corr = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const float d = H2F(w[b].d) * x[b].d;
    const __m256i p = DotU8S8(Nibbles(w[b].qs), Load32(x[b].qs));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d), acc);
    corr += d * static_cast<float>(8 * x[b].sum);
  }
  return HSum(acc) - corr;
}

float DotQ5_0(const BlockQ5_0* w, const ActQ8* x, std::int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  float corr = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    std::uint32_t h;
    std::memcpy(&h, w[b].qh, 4);
    const float d = H2F(w[b].d) * x[b].d;
    const __m256i q = _mm256_or_si256(Nibbles(w[b].qs), BitsToBytes(h));
    const __m256i p = DotU8S8(q, Load32(x[b].qs));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d), acc);
    corr += d * static_cast<float>(16 * x[b].sum);
  }
  return HSum(acc) - corr;
}

float DotQ4_K(const BlockQ4_K* w, const ActQ8K* x, std::int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  for (std::int64_t b = 0; b < nb; ++b) {
    std::uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) Q4KScaleMin(j, w[b].scales, &sc[j], &mn[j]);
    int summ = 0;
    for (int j = 0; j < 8; ++j) summ += mn[j] * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = Load32(w[b].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(q, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      const __m256i plo = _mm256_maddubs_epi16(lo, Load32(x[b].qs + 64 * c));
      const __m256i phi = _mm256_maddubs_epi16(hi, Load32(x[b].qs + 64 * c + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * c])));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * c + 1])));
    }
    const float dx = x[b].d;
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(H2F(w[b].d) * dx), acc);
    mins += H2F(w[b].dmin) * dx * static_cast<float>(summ);
  }
  return HSum(acc) - mins;
}

// int16 lanes 0..7 = a, 8..15 = b.
inline __m256i Scale2(int a, int b) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(b)), _mm_set1_epi16(static_cast<short>(a)));
}

float DotQ6_K(const BlockQ6_K* w, const ActQ8K* x, std::int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  float corr = 0.0f;
  const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3), m30 = _mm256_set1_epi8(0x30);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int8_t* sc = w[b].scales;
    int off = 0;
    for (int g = 0; g < 16; ++g) off += sc[g] * x[b].bsums[g];
    __m256i sumi = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i ql0 = Load32(w[b].ql + 64 * n);
      const __m256i ql1 = Load32(w[b].ql + 64 * n + 32);
      const __m256i qh = Load32(w[b].qh + 32 * n);
      const __m256i q0 = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                         _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
      const std::int8_t* a = x[b].qs + 128 * n;
      const std::int8_t* s = sc + 8 * n;
      const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q0, Load32(a)), Scale2(s[0], s[1]));
      const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q1, Load32(a + 32)), Scale2(s[2], s[3]));
      const __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(q2, Load32(a + 64)), Scale2(s[4], s[5]));
      const __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(q3, Load32(a + 96)), Scale2(s[6], s[7]));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
    }
    const float d = H2F(w[b].d) * x[b].d;
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d), acc);
    corr += d * static_cast<float>(32 * off);
  }
  return HSum(acc) - corr;
}

}  // namespace

const QuantKernels kAvx2Kernels = {DotQ8_0, DotQ4_0, DotQ5_0, DotQ4_K, DotQ6_K};

}  // namespace kvshare::detail
