// AVX-512 VNNI integer dot kernels (_mm512_dpbusd_epi32: u8 x s8 -> int32),
// compiled with -mavx512{f,bw,vl,vnni}; entered only when the CPU reports
// those features (quant_matmul.cc). 32-element block types take two blocks per
// 512-bit step; K-quants take 64 elements per step. Each kernel takes R
// activation rows at once (weights unpacked once); each row's arithmetic is
// exactly that of R = 1.
#include <immintrin.h>

#include "model/quant_kernels.h"
#include "model/quant_x86.h"

namespace kvshare::detail {
namespace {

inline __m512 Scales2(float a, float b) { return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b)); }
inline __m512i Dpbusd(__m512i u, __m512i s) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s); }
inline __m256i Dpbusd256(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
inline float HSum512(__m512 v) { return _mm512_reduce_add_ps(v); }

// Q8_0 / Q4_0 / Q5_0: quant_avx512_q32.cc.

// Q4_1 / Q5_1: unsigned codes q (UnsignedCodes<Block>):
// dot = dw dx sum(q*x) - Offset (the code bias or the block minimum).
template <int R, typename Block>
void DotQ32UnsignedR(const Block* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  using Codes = UnsignedCodes<Block>;
  __m512 acc[R];
  float corr[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), corr[r] = 0.0f;
  std::int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i q = Join(Codes::Get(w[b]), Codes::Get(w[b + 1]));
    const float dw0 = H2F(w[b].d), dw1 = H2F(w[b + 1].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8* a = x + r * xs + b;
      const float d0 = dw0 * a[0].d, d1 = dw1 * a[1].d;
      const __m512i p = Dpbusd(q, Join(Load32(a[0].qs), Load32(a[1].qs)));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), Scales2(d0, d1), acc[r]);
      corr[r] += Codes::Offset(w[b], a[0], d0) + Codes::Offset(w[b + 1], a[1], d1);
    }
  }
  for (int r = 0; r < R; ++r) {
    float s = HSum512(acc[r]);
    if (b < nb) {
      const ActQ8& a = x[r * xs + b];
      const float d = H2F(w[b].d) * a.d;
      const __m256i p = Dpbusd256(Codes::Get(w[b]), Load32(a.qs));
      s += HSum(_mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d)));
      corr[r] += Codes::Offset(w[b], a, d);
    }
    out[r] = s - corr[r];
  }
}

// Codes of a Q4_K / Q5_K super-block in the order of the activations:
// codes[c] holds elements 64c .. 64c+63 (sub-blocks 2c and 2c+1), one code
// (0..15, resp. 0..31) per byte. The 32 qs bytes of chunk c are broadcast to
// both 256-bit halves and shifted by 0 (low nibbles: sub-block 2c) in the low
// half and by 4 (high nibbles: 2c+1) in the high half.
template <typename Block>
struct KCodes512;

template <>
struct KCodes512<BlockQ4_K> {
  static void Get(const BlockQ4_K& b, __m512i codes[4]) {
    const __m512i m4 = _mm512_set1_epi8(0xF), shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    for (int c = 0; c < 4; ++c) {
      codes[c] = _mm512_and_si512(_mm512_srlv_epi64(_mm512_broadcast_i64x4(Load32(b.qs + 32 * c)), shift), m4);
    }
  }
};

// Bit j of qh[l] is the 5th bit of sub-block j's element l: a 64-bit rotate
// by 4 - j (mod 64) puts bit j of every byte at bit 4 of the same byte.
template <>
struct KCodes512<BlockQ5_K> {
  static void Get(const BlockQ5_K& b, __m512i codes[4]) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m10 = _mm512_set1_epi8(0x10);
    const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i h = _mm512_broadcast_i64x4(Load32(b.qh));
    for (int c = 0; c < 4; ++c) {
      const long long lo = (4 - 2 * c) & 63, hi = (3 - 2 * c) & 63;
      const __m512i hb = _mm512_rolv_epi64(h, _mm512_setr_epi64(lo, lo, lo, lo, hi, hi, hi, hi));
      const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(_mm512_broadcast_i64x4(Load32(b.qs + 32 * c)), shift), m4);
      codes[c] = _mm512_or_si512(q, _mm512_and_si512(hb, m10));
    }
  }
};

// Q4_K / Q5_K: sum_j sc_j * (codes . x over sub-block j) with maddubs (u8 x s8
// pairs -> int16; at most 2 * 31 * 127) and vpdpwssd against the int16 scales
// (one per 256-bit half), times dw dx; minus the min term dmin dx sum_j m_j
// (sum of activation sub-block j), from the bsums in one madd_epi16.
template <int R, typename Block>
void DotQKMinR(const Block* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  // pshufb controls on the scales/mins broadcast to every 128-bit lane: int16
  // sc_{2c} in the low 256-bit half, sc_{2c+1} in the high half.
  __m512i sel[4];
  for (int c = 0; c < 4; ++c) {
    const int lo = 0xFF00 | (2 * c), hi = 0xFF00 | (2 * c + 1);  // int16 lanes: byte k, then a zero byte
    sel[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<short>(lo))),
                                _mm256_set1_epi16(static_cast<short>(hi)), 1);
  }
  const __m256i min_pairs = Q4KMinPairsControl();
  __m512 acc[R];
  __m256 accm[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m512i sm = _mm512_broadcast_i32x4(Q4KScalesMins(w[b].scales));
    __m512i codes[4], sc[4];
    KCodes512<Block>::Get(w[b], codes);
    for (int c = 0; c < 4; ++c) sc[c] = _mm512_shuffle_epi8(sm, sel[c]);
    const __m256i mins = _mm256_shuffle_epi8(_mm512_castsi512_si256(sm), min_pairs);
    std::uint32_t dd;  // d, dmin: the block's first 4 bytes
    std::memcpy(&dd, &w[b], 4);
    const __m128 dwm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd)));
    for (int r = 0; r < R; ++r) {
      const ActQ8K& a = x[r * xs + b];
      __m512i sumi = _mm512_madd_epi16(_mm512_maddubs_epi16(codes[0], _mm512_loadu_si512(a.qs)), sc[0]);
      for (int c = 1; c < 4; ++c) {
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(codes[c], _mm512_loadu_si512(a.qs + 64 * c)), sc[c]);
      }
      const __m256i summ = _mm256_madd_epi16(mins, LoadBsums(a));
      const __m128 d = _mm_mul_ps(dwm, _mm_set1_ps(a.d));  // dw dx, dmin dx
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_broadcastss_ps(d), acc[r]);
      accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_broadcastss_ps(_mm_movehdup_ps(d)), accm[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum512(acc[r]) - HSum(accm[r]);
}

// Q6_K: codes stored + 32 (0..63) through maddubs and vpdpwssd against the
// sign-extended int16 group scales (one per 128-bit lane: 16 elements), then
// the offset 32 sum_g sc_g bsums_g subtracted in int32 (one madd_epi16).
template <int R>
void DotQ6_KR(const BlockQ6_K* w, const ActQ8K* x, std::int64_t xs, std::int64_t nb, float* out) {
  const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3), m30 = _mm512_set1_epi8(0x30);
  const __m512i qh_shift = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
  // vpermw indices: int16 lane i of 64-element step k takes group scale 4k + i / 8.
  __m512i idx[4];
  for (int k = 0; k < 4; ++k) {
    alignas(64) std::int16_t v[32];
    for (int i = 0; i < 32; ++i) v[i] = static_cast<std::int16_t>(4 * k + i / 8);
    idx[k] = _mm512_load_si512(v);
  }
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
    __m512i q[4], s[4];
    for (int k = 0; k < 4; ++k) s[k] = _mm512_permutexvar_epi16(idx[k], _mm512_castsi256_si512(sc16));
    for (int n = 0; n < 2; ++n) {
      const __m512i ql = _mm512_loadu_si512(w[b].ql + 64 * n);  // elements 128n + [0, 64) low nibbles, + [64, 128) high
      const __m512i qh2 = _mm512_srlv_epi64(_mm512_broadcast_i64x4(Load32(w[b].qh + 32 * n)), qh_shift);  // [qh | qh >> 2]
      q[2 * n] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qh2, m3), 4));
      q[2 * n + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh2, m30));
    }
    const float dw = H2F(w[b].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8K& a = x[r * xs + b];
      __m512i sumi = _mm512_madd_epi16(_mm512_maddubs_epi16(q[0], _mm512_loadu_si512(a.qs)), s[0]);
      for (int k = 1; k < 4; ++k) {
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q[k], _mm512_loadu_si512(a.qs + 64 * k)), s[k]);
      }
      const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc16, LoadBsums(a)), 5);
      sumi = _mm512_sub_epi32(sumi, _mm512_zextsi256_si512(off));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(dw * a.d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum512(acc[r]);
}

}  // namespace

const QuantKernels kAvx512VnniKernels = {.q8_0 = Avx512Q8_0Rows,
                                         .q4_0 = Avx512Q4_0Rows,
                                         .q4_1 = KVSHARE_ROWS_KERNEL(DotQ32UnsignedR, BlockQ4_1, ActQ8),
                                         .q5_0 = Avx512Q5_0Rows,
                                         .q5_1 = KVSHARE_ROWS_KERNEL(DotQ32UnsignedR, BlockQ5_1, ActQ8),
                                         .q4_k = KVSHARE_ROWS_KERNEL_N(DotQKMinR, BlockQ4_K, ActQ8K, 8),
                                         .q5_k = KVSHARE_ROWS_KERNEL_N(DotQKMinR, BlockQ5_K, ActQ8K, 8),
                                         .q6_k = KVSHARE_ROWS_KERNEL_N(DotQ6_KR, BlockQ6_K, ActQ8K, 8)};

}  // namespace kvshare::detail
