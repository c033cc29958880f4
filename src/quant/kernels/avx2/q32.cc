// AVX2 kernels for the 32-element block types Q8_0, Q4_0, Q4_1, Q5_0 and
// Q5_1 (kernels/dispatch.h), compiled with -mavx2 -mfma -mf16c (entered only
// when the CPU reports those features, quant_matmul.cc).
//
// Q4_0 / Q5_0: the layouts and the one arithmetic of avx512/q32.cc (y = 0; per block b in order:
// y = fma(float(p_b), dw_b * dx_b, y), p_b the exact int32 dot product), so a
// row's result is bitwise the same in any group of activation rows; without
// VNNI each 4-byte group is maddubs (u8 codes x s8 activations, int16 pairs)
// and madd_epi16 against ones. The codes are at most 31, so a maddubs pair is
// at most 2 * 31 * 127 = 7874 and four of them summed in int16 (31496) do not
// saturate. Q8_0 takes the sign trick instead (|w| as the unsigned operand,
// x with w's sign as the signed one): its codes up to 255 would saturate
// maddubs. Q8_0, Q4_1 and Q5_1 take 4 activation rows per pass, a weight
// block unpacked once for all of them.
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

// Get(b): one block's unsigned codes (32 bytes, element order); kBias: code - value.
template <>
struct Codes<BlockQ4_0> {
  static constexpr int kBias = 8;
  static __m256i Get(const BlockQ4_0& b) { return Nibbles(b.qs); }
};

template <>
struct Codes<BlockQ5_0> {
  static constexpr int kBias = 16;
  static __m256i Get(const BlockQ5_0& b) { return FiveBitCodes(b.qh, b.qs); }
};

inline __m256i LoadSlot(const std::uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }

inline __m256i Bcast(const std::uint8_t* c, int k) {
  std::int32_t word;
  std::memcpy(&word, c + 4 * k, 4);
  return _mm256_set1_epi32(word);
}

// init + the block's 8 rows' dot products with codes c (32 bytes).
inline __m256i LaneDot(const std::uint8_t* c, const __m256i xk[8], __m256i init) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i half[2];
  for (int h = 0; h < 2; ++h) {
    __m256i s = _mm256_maddubs_epi16(Bcast(c, 4 * h), xk[4 * h]);
    for (int k = 4 * h + 1; k < 4 * h + 4; ++k) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(Bcast(c, k), xk[k]));
    half[h] = _mm256_madd_epi16(s, ones);
  }
  return _mm256_add_epi32(init, _mm256_add_epi32(half[0], half[1]));
}

// T weight rows (codes in slot t ne + b of c, scales dw[t ne + b]) against
// group g of 8 activation rows; out[t] = the 8 rows' results for weight row t.
template <int T>
void LaneTile(const Slots& c, const float* dw, const LaneActs& a, std::int64_t g, std::int64_t nb, __m256 out[T]) {
  const std::int64_t ne = Even(nb);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::size_t gb = static_cast<std::size_t>(g * ne + b);
    __m256i xk[8];
    for (int k = 0; k < 8; ++k) xk[k] = LoadSlot(a.x[XSlot(g, ne, b, k)]);
    const __m256i init = LoadSlot(a.init[gb]);
    const __m256 dx = _mm256_load_ps(reinterpret_cast<const float*>(a.d[gb]));
    for (int t = 0; t < T; ++t) {
      const __m256i p = LaneDot(c[static_cast<std::size_t>(t * ne + b)], xk, init);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(_mm256_set1_ps(dw[t * ne + b]), dx), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = acc[t];
}

template <typename Block, int T>
void LaneRows(const Block* w, std::int64_t r0, const LaneActs& a, std::int64_t nb, int acts, float* y, std::int64_t ys,
              Slots& c, std::vector<float>& dw) {
  DecodeTile<Block, T>(w, r0, nb, c, dw);
  for (std::int64_t g = 0; g * kLanes < acts; ++g) {
    __m256 out[T];
    LaneTile<T>(c, dw.data(), a, g, nb, out);
    StoreLaneGroup<T>(out, g, acts, r0, y, ys);
  }
}

template <int R>
void DotQ8_0R(const BlockQ8_0* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i q = Load32(w[b].qs);
    const __m256i aq = _mm256_sign_epi8(q, q);
    const float dw = H2F(w[b].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8& a = x[r * xs + b];
      const __m256i p = DotU8S8(aq, _mm256_sign_epi8(Load32(a.qs), q));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * a.d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]);
}

// Q4_1 / Q5_1: unsigned codes q (UnsignedCodes<Block>):
// dot = dw dx sum(q*x) - Offset (the code bias or the block minimum).
template <int R, typename Block>
void DotQ32UnsignedR(const Block* w, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* out) {
  using Codes = UnsignedCodes<Block>;
  __m256 acc[R];
  float corr[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), corr[r] = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m256i q = Codes::Get(w[b]);
    const float dw = H2F(w[b].d);
    for (int r = 0; r < R; ++r) {
      const ActQ8& a = x[r * xs + b];
      const float d = dw * a.d;
      const __m256i p = DotU8S8(q, Load32(a.qs));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d), acc[r]);
      corr[r] += Codes::Offset(w[b], a, d);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = HSum(acc[r]) - corr[r];
}

// The rows layout (RowsTile, q32_lanes.h) takes this block dot product.
inline __m256i BlockDot(__m256i c, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(c, x), _mm256_set1_epi16(1));
}

}  // namespace

void Avx2Q4_0Rows(const BlockQ4_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys) {
  Q32Rows(w, nrows, x, xs, nb, acts, y, ys);
}
void Avx2Q5_0Rows(const BlockQ5_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys) {
  Q32Rows(w, nrows, x, xs, nb, acts, y, ys);
}

KVSHARE_DEFINE_ROWS(Avx2Q8_0Rows, BlockQ8_0, ActQ8, DotQ8_0R)
KVSHARE_DEFINE_ROWS(Avx2Q4_1Rows, BlockQ4_1, ActQ8, DotQ32UnsignedR)
KVSHARE_DEFINE_ROWS(Avx2Q5_1Rows, BlockQ5_1, ActQ8, DotQ32UnsignedR)

}  // namespace kvshare::detail
