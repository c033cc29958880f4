// AVX-512 VNNI kernels for the 32-element block types Q8_0, Q4_0, Q4_1, Q5_0
// and Q5_1 (kernels/dispatch.h), compiled with -mavx512{f,bw,vl,vnni} (entered only when the CPU reports
// those features, quant_matmul.cc).
//
// Every output is defined by one arithmetic, whichever kernel computes it:
//   y = 0; for each block b in order: y = fma(float(p_b), dw_b * dx_b, y)
// with p_b the exact int32 dot product of the block's weight values with the
// activation's int8 values, dw_b the weight block's fp16 scale and dx_b the
// activation block's scale (fp32 multiply, then fp32 fused multiply-add). So a
// row's result is bitwise the same in any group of activation rows.
//
// p_b comes from vpdpbusd (u8 x s8 -> int32) with the weight codes as the
// unsigned operand, c = value + bias (Q8_0: the int8 with its sign bit
// flipped, bias 128; Q5_0: the 5-bit code, bias 16; Q4_0: the nibble, bias 8)
// and the activations as the signed one: sum c x = p_b + bias * sum x, and
// sum x is the activation's own (ActQ8::sum), so the correction costs nothing
// per weight row.
//
// Two layouts:
//  - Lanes (4 activation rows or more): a zmm holds 8 activation rows (padded
//    with zero rows) for each of two consecutive blocks; each 4-byte group of
//    the two blocks' weight codes is spread over its half against the rows'
//    matching 4 bytes, so two blocks of one weight row against 8 activation
//    rows take 8 vpdpbusd and two scale steps, with no horizontal sums. With
//    several groups of 8 rows the codes of a tile of 4 weight rows are decoded
//    once for all of them; with one group they are decoded in place.
//  - Rows (1 to 3 activation rows): the lanes are 8 weight rows; each row's
//    block dot product is one vpdpbusd, and 8 of them are summed across lanes
//    into one register of 8 p_b.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "quant/kernels/dispatch.h"
#include "quant/kernels/q32_lanes.h"
#include "quant/kernels/rows.h"
#include "quant/kernels/x86.h"

namespace kvshare::detail {
namespace {

// Both blocks' 16 nibble bytes as [qs0, qs0 >> 4, qs1, qs1 >> 4] (128-bit
// lanes, each masked to its low nibble): low nibbles are elements 0..15.
inline __m512i NibblePair(const std::uint8_t* qs0, const std::uint8_t* qs1) {
  const __m256i q =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)), 1);
  const __m512i v = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(q));
  return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0xF));
}

// Codes<Block>: Get(b): one block's unsigned codes (32 bytes, element order);
// Pair(b0, b1): two blocks' as [b0 | b1]; kBias: code - value.
template <>
struct Codes<BlockQ8_0> {
  static constexpr int kBias = 128;
  static __m256i Get(const BlockQ8_0& b) {
    return _mm256_xor_si256(Load32(b.qs), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  static __m512i Pair(const BlockQ8_0& b0, const BlockQ8_0& b1) {
    return _mm512_xor_si512(Join(Load32(b0.qs), Load32(b1.qs)), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};

template <>
struct Codes<BlockQ4_0> {
  static constexpr int kBias = 8;
  static __m256i Get(const BlockQ4_0& b) { return Nibbles(b.qs); }
  static __m512i Pair(const BlockQ4_0& b0, const BlockQ4_0& b1) { return NibblePair(b0.qs, b1.qs); }
};

// The fifth bit of element i is bit i of qh.
template <>
struct Codes<BlockQ5_0> {
  static constexpr int kBias = 16;
  static __m256i Get(const BlockQ5_0& b) { return FiveBitCodes(b.qh, b.qs); }
  static __m512i Pair(const BlockQ5_0& b0, const BlockQ5_0& b1) {
    std::uint32_t h0, h1;
    std::memcpy(&h0, b0.qh, 4);
    std::memcpy(&h1, b1.qh, 4);
    const __mmask64 high = _cvtu64_mask64(static_cast<std::uint64_t>(h1) << 32 | h0);
    const __m512i nib = NibblePair(b0.qs, b1.qs);
    return _mm512_mask_add_epi8(nib, high, nib, _mm512_set1_epi8(0x10));
  }
};

// [d0 x 8, d1 x 8] from two fp16 scales (each exactly H2F's value).
inline __m512 HalfScales2(std::uint16_t d0, std::uint16_t d1) {
  const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(static_cast<std::uint32_t>(d1) << 16 | d0)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                               _mm512_castps128_ps512(both));
}

// ---- Lanes layout -----------------------------------------------------------

inline __m512i Load64(const std::uint8_t* p) { return _mm512_load_si512(p); }
inline __m256 High(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// Where LaneTile reads weight row t's block b: codes (Pair: blocks b and
// b + 1 as one zmm; One: block b into 32 bytes) and scales (Scales: [dw_b x 8,
// dw_b+1 x 8]; Scale: dw_b). Buffered: decoded once per tile into slots
// (several activation groups); Direct: from the blocks (one group).
struct Buffered {
  const Slots& c;
  const float* dw;
  std::int64_t ne;
  __m512i Pair(int t, std::int64_t b) const { return Load64(c[static_cast<std::size_t>(t * ne + b)]); }
  __m512 Scales(int t, std::int64_t b) const {
    const __m512i halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(
        halves,
        _mm512_castpd_ps(_mm512_castpd128_pd512(_mm_load_sd(reinterpret_cast<const double*>(dw + t * ne + b)))));
  }
  void One(int t, std::int64_t b, std::uint8_t out[32]) const {
    std::memcpy(out, c[static_cast<std::size_t>(t * ne + b)], 32);
  }
  float Scale(int t, std::int64_t b) const { return dw[t * ne + b]; }
};

template <typename Block>
struct Direct {
  const Block* w;  // the tile's first row
  std::int64_t nb;
  __m512i Pair(int t, std::int64_t b) const { return Codes<Block>::Pair(w[t * nb + b], w[t * nb + b + 1]); }
  __m512 Scales(int t, std::int64_t b) const { return HalfScales2(w[t * nb + b].d, w[t * nb + b + 1].d); }
  void One(int t, std::int64_t b, std::uint8_t out[32]) const {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), Codes<Block>::Get(w[t * nb + b]));
  }
  float Scale(int t, std::int64_t b) const { return H2F(w[t * nb + b].d); }
};

// T weight rows (from W) against one group of 8 activation rows; out[t] = the
// 8 rows' results for weight row t. Two blocks per step: the zmm lanes are
// [8 rows, block 2q | 8 rows, block 2q + 1]; code group k of each block is
// spread over its half by one permute. The two blocks' products are then
// added to the accumulator one after the other, so the arithmetic per row is
// the sequential one of the file comment.
template <int T, class W>
void LaneTile(const W& wsrc, const LaneActs& a, std::int64_t g, std::int64_t nb, __m256 out[T]) {
  const std::int64_t ne = Even(nb);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  std::int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const std::size_t gb = static_cast<std::size_t>(g * ne + b);
    __m512i xk[8];
    for (int k = 0; k < 8; ++k) xk[k] = Load64(a.x[XSlot(g, ne, b, k)]);
    const __m512i init = Load64(a.init[gb]);
    const __m512 dx = _mm512_castsi512_ps(Load64(a.d[gb]));
    for (int t = 0; t < T; ++t) {
      __m512i lo = init, hi = _mm512_setzero_si512();
      DotGroups(wsrc.Pair(t, b), xk, lo, hi);
      const __m512i p = _mm512_add_epi32(lo, hi);
      const __m512 pf = _mm512_cvtepi32_ps(p), s = _mm512_mul_ps(wsrc.Scales(t, b), dx);
      acc[t] = _mm256_fmadd_ps(_mm512_castps512_ps256(pf), _mm512_castps512_ps256(s), acc[t]);
      acc[t] = _mm256_fmadd_ps(High(pf), High(s), acc[t]);
    }
  }
  if (b < nb) {  // the last block of an odd count: one 256-bit step
    const std::size_t gb = static_cast<std::size_t>(g * ne + b);
    __m256i xk[8];
    for (int k = 0; k < 8; ++k) xk[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(a.x[XSlot(g, ne, b, k)]));
    const __m256i init = _mm256_load_si256(reinterpret_cast<const __m256i*>(a.init[gb]));
    const __m256 dx = _mm256_load_ps(reinterpret_cast<const float*>(a.d[gb]));
    for (int t = 0; t < T; ++t) {
      alignas(32) std::uint8_t ct[32];
      wsrc.One(t, b, ct);
      __m256i p = init;
      for (int k = 0; k < 8; ++k) {
        std::int32_t word;
        std::memcpy(&word, ct + 4 * k, 4);
        p = _mm256_dpbusd_epi32(p, _mm256_set1_epi32(word), xk[k]);
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(_mm256_set1_ps(wsrc.Scale(t, b)), dx), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = acc[t];
}

template <typename Block, int T>
void LaneRows(const Block* w, std::int64_t r0, const LaneActs& a, std::int64_t nb, int acts, float* y, std::int64_t ys,
              Slots& c, std::vector<float>& dw) {
  const std::int64_t groups = (acts + kLanes - 1) / kLanes;
  __m256 out[T];
  if (groups == 1) {
    LaneTile<T>(Direct<Block>{w + r0 * nb, nb}, a, 0, nb, out);
    StoreLaneGroup<T>(out, 0, acts, r0, y, ys);
    return;
  }
  DecodeTile<Block, T>(w, r0, nb, c, dw);
  const Buffered buf{c, dw.data(), Even(nb)};
  for (std::int64_t g = 0; g < groups; ++g) {
    LaneTile<T>(buf, a, g, nb, out);
    StoreLaneGroup<T>(out, g, acts, r0, y, ys);
  }
}

// Q4_1 / Q5_1 (their own arithmetic: a float offset per block, not the int32
// bias of Q4_0 / Q5_0): two blocks per 512-bit step, R activation rows at
// once (weights unpacked once; each row's arithmetic exactly that of R = 1).
inline __m512 Scales2(float a, float b) { return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b)); }
inline __m512i Dpbusd(__m512i u, __m512i s) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s); }
inline __m256i Dpbusd256(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
inline float HSum512(__m512 v) { return _mm512_reduce_add_ps(v); }

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

// The rows layout (RowsTile, q32_lanes.h) takes this block dot product.
inline __m256i BlockDot(__m256i c, __m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), c, x); }

}  // namespace

void Avx512Q8_0Rows(const BlockQ8_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys) {
  Q32Rows(w, nrows, x, xs, nb, acts, y, ys);
}
void Avx512Q4_0Rows(const BlockQ4_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys) {
  Q32Rows(w, nrows, x, xs, nb, acts, y, ys);
}
void Avx512Q5_0Rows(const BlockQ5_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys) {
  Q32Rows(w, nrows, x, xs, nb, acts, y, ys);
}

KVSHARE_DEFINE_ROWS(Avx512Q4_1Rows, BlockQ4_1, ActQ8, DotQ32UnsignedR)
KVSHARE_DEFINE_ROWS(Avx512Q5_1Rows, BlockQ5_1, ActQ8, DotQ32UnsignedR)

}  // namespace kvshare::detail
