// AVX-512 VNNI kernels for the K-quants Q4_K / Q5_K / Q6_K, compiled with
// -mavx512{f,bw,vl,vnni} (entered only when the CPU reports those features,
// quant_matmul.cc).
//
// Every output is defined by one arithmetic, whichever kernel computes it:
// per 256-element super-block b, in order,
//   P_b = sum_g s_g * sum_{i in g} c_i x_i - sum_g u_g * bsum_g   (exact int32)
//   y = fma(float(P_b), d_b * dx_b, y)
// and for Q4_K / Q5_K also z = fma(float(M_b), dmin_b * dx_b, z) with
// M_b = sum_j m_j * (sum of the activation's sub-block j) (exact int32); the
// output is y - z (Q4_K / Q5_K) or y (Q6_K). g runs over the 16 groups of 16
// elements, c are the unsigned codes, s_g the group's integer scale (Q4_K /
// Q5_K: the 6-bit scale of its 32-element sub-block; Q6_K: its int8 scale),
// and u_g = 0 (Q4_K / Q5_K) or 32 s_g (Q6_K: the codes' bias 32 removed with
// the activation's group sums bsum_g). So a row's result is bitwise the same
// alone or in any group of activation rows. Bounds: |P_b| <= 16 * 128 * 16 *
// 63 * 127 + 16 * 4096 * 2032 < 2^31.
//
// Two layouts, as the 32-element kernels (avx512/q32.cc):
//  - Lanes (4 activation rows or more): a zmm holds 8 activation rows for
//    each half of a 64-element chunk; each 4-byte group of the chunk's weight
//    codes is spread over its half, 8 vpdpbusd per chunk in two chains (group
//    scales differ between the chains for Q6_K), multiplied by the group
//    scales in int32; the corrections are vpdpwssd of int16 pairs.
//  - Rows (1 to 3 activation rows): per weight row, the block's code chunks
//    against each activation row by maddubs / madd with the int16 group
//    scales; the partial sums of 8 weight rows are reduced across lanes at
//    once into one register of 8 P_b.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "quant/kernels/dispatch.h"
#include "quant/kernels/lanes.h"
#include "quant/kernels/x86.h"

namespace kvshare::detail {
namespace {

// ---- Per-type decoding ------------------------------------------------------
//
// KType<Block>:
//   Chunks(b, c[4])   unsigned codes, c[k] = elements 64k .. 64k+63 in order;
//   kMin              Q4_K / Q5_K (a dmin term); else u_g = 32 s_g;
//   LaneScales(b, u)  the 16 s_g as int32 lanes, and in u the correction's
//                     int16 weight pairs: Q4_K / Q5_K u[q] = (m_2q, m_2q+1)
//                     against the activation's 32-element sums (kCorrPairs =
//                     4); Q6_K u[p] = (32 s_2p, 32 s_2p+1) against bsums
//                     (kCorrPairs = 8);
//   D(b), Dmin(b)     the fp16 scales as floats;
//   RowsScales(b, sc, corr)  the rows layout's int16 scales per chunk and the
//                     correction's int16 weights against the 16 bsums;
//   ScaleWord(b), D8(words)  where the rows layout gathers 4 bytes holding d
//                     (and dmin), and the 8 gathered d as floats.

template <typename Block>
struct KType;

// Q4_K / Q5_K share scales and mins.
struct Q4KScales {
  static constexpr bool kMin = true;
  static constexpr int kCorrPairs = 4;
  // The 16 s_g as int32 lanes (s_g = sc of sub-block g / 2), and u[q] =
  // m_2q | m_2q+1 << 16 (the mins widened to int16; 8 ints written).
  template <typename Block>
  static __m512i LaneScales(const Block& b, std::int32_t u[8]) {
    const __m128i sm = Q4KScalesMins(b.scales);  // bytes sc0..7, m0..7
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(u),
                        _mm256_zextsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8))));
    const __m128i pick = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm512_cvtepu8_epi32(_mm_shuffle_epi8(sm, pick));
  }
  // The rows layout's int16 scales: sc[c] lane i (elements 64c + 2i, 2i+1)
  // = s of its group; corr: int16 [m0, m0, m1, m1, ..., m7, m7] against the
  // activation's 16 bsums (madd: lane j = m_j (bsum_2j + bsum_2j+1)).
  template <typename Block>
  static void RowsScales(const Block& b, __m512i sc[4], __m256i& corr) {
    const __m512i sm = _mm512_broadcast_i32x4(Q4KScalesMins(b.scales));
    for (int c = 0; c < 4; ++c) {
      const int lo = 0xFF00 | (2 * c), hi = 0xFF00 | (2 * c + 1);  // int16 lanes: byte k, then a zero byte
      sc[c] =
          _mm512_shuffle_epi8(sm, _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<short>(lo))),
                                                     _mm256_set1_epi16(static_cast<short>(hi)), 1));
    }
    corr = _mm256_shuffle_epi8(_mm512_castsi512_si256(sm), Q4KMinPairsControl());
  }
  // The rows layout gathers 4 bytes per block: d (low half), dmin (high half).
  template <typename Block>
  static const void* ScaleWord(const Block& b) {
    return &b.d;
  }
  static __m256 D8(__m256i words) { return LowHalvesToFloat(words); }
  template <typename Block>
  static float D(const Block& b) {
    return H2F(b.d);
  }
  template <typename Block>
  static float Dmin(const Block& b) {
    return H2F(b.dmin);
  }
};

template <>
struct KType<BlockQ4_K> : Q4KScales {
  static void Chunks(const BlockQ4_K& b, __m512i c[4]) {
    const __m512i m4 = _mm512_set1_epi8(0xF), shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    for (int k = 0; k < 4; ++k)
      c[k] = _mm512_and_si512(_mm512_srlv_epi64(_mm512_broadcast_i64x4(Load32(b.qs + 32 * k)), shift), m4);
  }
};

// Bit j of qh[l] is the 5th bit of sub-block j's element l: a 64-bit rotate
// by 4 - j (mod 64) puts bit j of every byte at bit 4 of the same byte.
template <>
struct KType<BlockQ5_K> : Q4KScales {
  static void Chunks(const BlockQ5_K& b, __m512i c[4]) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m10 = _mm512_set1_epi8(0x10);
    const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i h = _mm512_broadcast_i64x4(Load32(b.qh));
    for (int k = 0; k < 4; ++k) {
      const long long lo = (4 - 2 * k) & 63, hi = (3 - 2 * k) & 63;
      const __m512i hb = _mm512_rolv_epi64(h, _mm512_setr_epi64(lo, lo, lo, lo, hi, hi, hi, hi));
      const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(_mm512_broadcast_i64x4(Load32(b.qs + 32 * k)), shift), m4);
      c[k] = _mm512_or_si512(q, _mm512_and_si512(hb, m10));
    }
  }
};

// Q6_K codes 0..63 (value + 32): elements 128n + [0, 32) low nibbles of
// ql[64n .. 64n+31] with qh bits 0-1, [32, 64) low nibbles of ql[64n+32 ..]
// with bits 2-3, [64, 96) and [96, 128) the high nibbles with bits 4-5, 6-7.
template <>
struct KType<BlockQ6_K> {
  static constexpr bool kMin = false;
  static constexpr int kCorrPairs = 8;
  static void Chunks(const BlockQ6_K& b, __m512i q[4]) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3), m30 = _mm512_set1_epi8(0x30);
    const __m512i qh_shift = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
    for (int n = 0; n < 2; ++n) {
      const __m512i ql = _mm512_loadu_si512(b.ql + 64 * n);
      const __m512i qh2 = _mm512_srlv_epi64(_mm512_broadcast_i64x4(Load32(b.qh + 32 * n)), qh_shift);  // [qh | qh >> 2]
      q[2 * n] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qh2, m3), 4));
      q[2 * n + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh2, m30));
    }
  }
  static __m256i Scales16(const BlockQ6_K& b) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
  }
  // The 16 s_g as int32 lanes, and u[p] = 32 s_2p | 32 s_2p+1 << 16
  // (|32 s| <= 4096; 8 ints written).
  static __m512i LaneScales(const BlockQ6_K& b, std::int32_t u[8]) {
    const __m256i s16 = Scales16(b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(u), _mm256_slli_epi16(s16, 5));
    return _mm512_cvtepi16_epi32(s16);
  }
  // The rows layout's int16 scales (lane i of chunk c: group 4c + i / 8) and
  // corr = 32 s_g per int16 lane g against the 16 bsums.
  static void RowsScales(const BlockQ6_K& b, __m512i sc[4], __m256i& corr) {
    // int16 lane i -> i / 8 (+ 4c below)
    const __m512i base = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0,
                                          0, 0, 0, 0, 0, 0);
    const __m256i s16 = Scales16(b);
    for (int c = 0; c < 4; ++c) {
      sc[c] = _mm512_permutexvar_epi16(_mm512_add_epi16(base, _mm512_set1_epi16(static_cast<short>(4 * c))),
                                       _mm512_castsi256_si512(s16));
    }
    corr = _mm256_slli_epi16(s16, 5);
  }
  // The rows layout gathers the block's last 4 bytes (scales[14..15], d): d
  // is the high half (d ends the block, so the word stays inside it).
  static const void* ScaleWord(const BlockQ6_K& b) { return b.scales + 14; }
  static __m256 D8(__m256i words) { return LowHalvesToFloat(_mm256_srli_epi32(words, 16)); }
  static float D(const BlockQ6_K& b) { return H2F(b.d); }
  static float Dmin(const BlockQ6_K&) { return 0.0f; }
};

// The int16 pairs of the activation side of the correction: Q4_K / Q5_K
// (kCorrPairs = 4) pair q = (sum of sub-block 2q, of 2q+1), each the sum of
// two bsums (|.| <= 32 * 127); Q6_K pair p = (bsums[2p], bsums[2p+1]).
template <int kCorrPairs>
std::int32_t ActPair(const ActQ8K& a, int p) {
  if constexpr (kCorrPairs == 4) {
    const auto lo = static_cast<std::uint16_t>(a.bsums[4 * p] + a.bsums[4 * p + 1]);
    const auto hi = static_cast<std::uint16_t>(a.bsums[4 * p + 2] + a.bsums[4 * p + 3]);
    return static_cast<std::int32_t>(lo | (static_cast<std::uint32_t>(hi) << 16));
  } else {
    const auto lo = static_cast<std::uint16_t>(a.bsums[2 * p]), hi = static_cast<std::uint16_t>(a.bsums[2 * p + 1]);
    return static_cast<std::int32_t>(lo | (static_cast<std::uint32_t>(hi) << 16));
  }
}

// A block's exact sums for 8 lanes from the folded code dot p and the
// correction's partial sums corr: Q4_K / Q5_K keep M_b apart (it has its own
// scale dmin), Q6_K subtracts it from P_b.
template <typename Block>
void SplitCorrection(__m256i p, __m256i corr, __m256i& p_out, __m256i& m_out) {
  if constexpr (KType<Block>::kMin) {
    p_out = p;
    m_out = corr;
  } else {
    p_out = _mm256_sub_epi32(p, corr);
  }
}

// ---- Lanes layout -----------------------------------------------------------

// The activation rows in groups of kLanes: x as LaneActs::x for nb * 8
// blocks of 32 (block 8b + h = elements 32h .. 32h+31 of super-block b, so a
// chunk's two halves load as one zmm per 4-byte group k); corr slot
// (g nb + b) 8 + p holds each lane's int16 pair p; d slot g nb + b each
// lane's dx. Rows past `acts` are zero.
struct KLaneActs {
  Slots x, corr, d;
};

template <int kCorrPairs>
void MakeKLaneActs(const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts, KLaneActs& out) {
  const std::int64_t groups = (acts + kLanes - 1) / kLanes, ne = nb * 8;
  out.x.Assign(static_cast<std::size_t>(groups * ne * 8));
  out.corr.Assign(static_cast<std::size_t>(groups * nb * 8));
  out.d.Assign(static_cast<std::size_t>(groups * nb));
  for (int j = 0; j < acts; ++j) {
    const std::int64_t g = j / kLanes, lane = j % kLanes;
    for (std::int64_t b = 0; b < nb; ++b) {
      const ActQ8K& a = x[j * xs + b];
      for (int h = 0; h < 8; ++h) {
        for (int k = 0; k < 8; ++k) std::memcpy(out.x[XSlot(g, ne, 8 * b + h, k)] + 4 * lane, a.qs + 32 * h + 4 * k, 4);
      }
      const std::size_t gb = static_cast<std::size_t>(g * nb + b);
      for (int p = 0; p < kCorrPairs; ++p) {
        const std::int32_t v = ActPair<kCorrPairs>(a, p);
        std::memcpy(out.corr[gb * 8 + static_cast<std::size_t>(p)] + 4 * lane, &v, 4);
      }
      std::memcpy(out.d[gb] + 4 * lane, &a.d, 4);
    }
  }
}

// One weight block of a tile's row, decoded for every activation group.
struct KDecoded {
  __m512i chunk[4];
  __m512i slo[4], shi[4];  // group scales per chunk: [s_4c x 8 | s_4c+2 x 8], [s_4c+1 x 8 | s_4c+3 x 8]
  alignas(32) std::int32_t u[8];
  float d, dmin;
};

template <typename Block>
void Decode(const Block& w, KDecoded& o) {
  using K = KType<Block>;
  K::Chunks(w, o.chunk);
  const __m512i s = K::LaneScales(w, o.u);
  for (int c = 0; c < 4; ++c) {
    const int a = 4 * c, b = 4 * c + 2;
    o.slo[c] = _mm512_permutexvar_epi32(_mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b), s);
    if constexpr (K::kMin) continue;  // shi = slo
    o.shi[c] = _mm512_permutexvar_epi32(_mm512_setr_epi32(a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, b + 1,
                                                          b + 1, b + 1, b + 1, b + 1, b + 1, b + 1, b + 1),
                                        s);
  }
  o.d = K::D(w);
  o.dmin = K::Dmin(w);
}

// T weight rows (decoded block b) against activation group g: the exact P_b
// per lane (Q6_K: minus the correction) and, for Q4_K / Q5_K, M_b.
template <typename Block, int T>
void LaneBlock(const KDecoded dec[T], const KLaneActs& a, std::int64_t g, std::int64_t nb, std::int64_t b,
               __m256i p8[T], __m256i m8[T]) {
  using K = KType<Block>;
  const std::int64_t ne = nb * 8;
  __m512i P[T];
  for (int t = 0; t < T; ++t) P[t] = _mm512_setzero_si512();
  for (int c = 0; c < 4; ++c) {
    __m512i xk[8];
    for (int k = 0; k < 8; ++k) xk[k] = _mm512_load_si512(a.x[XSlot(g, ne, 8 * b + 2 * c, k)]);
    for (int t = 0; t < T; ++t) {
      __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
      DotGroups(dec[t].chunk[c], xk, lo, hi);  // lo: groups 4c, 4c+2 of the halves; hi: 4c+1, 4c+3
      if constexpr (K::kMin) {                 // Q4_K / Q5_K: both 16-groups of a half share the sub-block's scale
        P[t] = _mm512_add_epi32(P[t], _mm512_mullo_epi32(_mm512_add_epi32(lo, hi), dec[t].slo[c]));
      } else {
        P[t] = _mm512_add_epi32(
            P[t], _mm512_add_epi32(_mm512_mullo_epi32(lo, dec[t].slo[c]), _mm512_mullo_epi32(hi, dec[t].shi[c])));
      }
    }
  }
  const std::size_t gb = static_cast<std::size_t>(g * nb + b);
  for (int t = 0; t < T; ++t) {
    __m256i corr = _mm256_setzero_si256();
    for (int p = 0; p < K::kCorrPairs; ++p) {
      corr = _mm256_dpwssd_epi32(
          corr, _mm256_set1_epi32(dec[t].u[p]),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(a.corr[gb * 8 + static_cast<std::size_t>(p)])));
    }
    SplitCorrection<Block>(_mm256_add_epi32(_mm512_castsi512_si256(P[t]), _mm512_extracti64x4_epi64(P[t], 1)), corr,
                           p8[t], m8[t]);
  }
}

// Weight rows r0 .. r0+T-1 against every activation group.
template <typename Block, int T>
void KLaneRows(const Block* w, std::int64_t r0, const KLaneActs& a, std::int64_t nb, int acts, float* y,
               std::int64_t ys) {
  using K = KType<Block>;
  const std::int64_t groups = (acts + kLanes - 1) / kLanes;
  __m256 acc[kMaxActRows / kLanes][T], accm[kMaxActRows / kLanes][T];
  for (std::int64_t g = 0; g < groups; ++g) {
    for (int t = 0; t < T; ++t) acc[g][t] = accm[g][t] = _mm256_setzero_ps();
  }
  KDecoded dec[T];
  for (std::int64_t b = 0; b < nb; ++b) {
    for (int t = 0; t < T; ++t) Decode(w[(r0 + t) * nb + b], dec[t]);
    for (std::int64_t g = 0; g < groups; ++g) {
      __m256i p8[T], m8[T];
      LaneBlock<Block, T>(dec, a, g, nb, b, p8, m8);
      const __m256 dx = _mm256_load_ps(reinterpret_cast<const float*>(a.d[static_cast<std::size_t>(g * nb + b)]));
      for (int t = 0; t < T; ++t) {
        acc[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p8[t]), _mm256_mul_ps(_mm256_set1_ps(dec[t].d), dx), acc[g][t]);
        if constexpr (K::kMin) {
          accm[g][t] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(m8[t]), _mm256_mul_ps(_mm256_set1_ps(dec[t].dmin), dx), accm[g][t]);
        }
      }
    }
  }
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256 out[T];
    for (int t = 0; t < T; ++t) out[t] = K::kMin ? _mm256_sub_ps(acc[g][t], accm[g][t]) : acc[g][t];
    StoreLaneGroup<T>(out, g, acts, r0, y, ys);
  }
}

// ---- Rows layout ------------------------------------------------------------

// Weight block w against R activation rows: per row, 8 int32 partial sums of
// P_b (Q6_K: minus the correction) in p[r] and of M_b in m[r] (Q4_K / Q5_K).
// The codes against the activations by maddubs (codes <= 63, so a pair is at
// most 2 * 63 * 127) and madd / vpdpwssd with the int16 group scales; the
// correction by one madd of its int16 weights with the 16 bsums.
template <typename Block, int R>
void RowsBlock(const Block& w, const ActQ8K* const xb[R], __m256i p[R], __m256i m[R]) {
  using K = KType<Block>;
  __m512i chunk[4], sc[4];
  __m256i cw;
  K::Chunks(w, chunk);
  K::RowsScales(w, sc, cw);
  for (int r = 0; r < R; ++r) {
    const ActQ8K& a = *xb[r];
    __m512i s0 = _mm512_madd_epi16(_mm512_maddubs_epi16(chunk[0], _mm512_loadu_si512(a.qs)), sc[0]);
    __m512i s1 = _mm512_madd_epi16(_mm512_maddubs_epi16(chunk[1], _mm512_loadu_si512(a.qs + 64)), sc[1]);
    s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(chunk[2], _mm512_loadu_si512(a.qs + 128)), sc[2]);
    s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(chunk[3], _mm512_loadu_si512(a.qs + 192)), sc[3]);
    const __m512i s = _mm512_add_epi32(s0, s1);
    const __m256i folded = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    SplitCorrection<Block>(folded, _mm256_madd_epi16(cw, LoadBsums(a)), p[r], m[r]);
  }
}

// Weight rows in the lanes: rows[t] (rows past the matrix repeat the last
// one; lanes t >= valid are not stored) against R <= 3 activation rows.
template <int R, typename Block>
void KRowsTile(const Block* const rows[8], int valid, std::int64_t r0, const ActQ8K* x, std::int64_t xs,
               std::int64_t nb, float* y, std::int64_t ys) {
  using K = KType<Block>;
  // Byte offsets of the rows from rows[0] (for the scale gather).
  alignas(32) std::int32_t off[8];
  for (int t = 0; t < 8; ++t) {
    off[t] = static_cast<std::int32_t>(reinterpret_cast<const char*>(rows[t]) - reinterpret_cast<const char*>(rows[0]));
  }
  const __m256i offsets = _mm256_load_si256(reinterpret_cast<const __m256i*>(off));
  __m256 acc[R], accm[R];
  for (int r = 0; r < R; ++r) acc[r] = accm[r] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const ActQ8K* xb[R];
    for (int r = 0; r < R; ++r) xb[r] = x + r * xs + b;
    __m256i vp[R][8], vm[R][8];
    __m256i p[R], m[R];
    for (int t = 0; t < 8; ++t) {
      RowsBlock<Block, R>(rows[t][b], xb, p, m);
      for (int r = 0; r < R; ++r) {
        vp[r][t] = p[r];
        if constexpr (K::kMin) vm[r][t] = m[r];
      }
    }
    // The 8 rows' fp16 d and dmin in one gather of 4 bytes inside each block.
    const __m256i dd = _mm256_i32gather_epi32(reinterpret_cast<const int*>(K::ScaleWord(rows[0][b])), offsets, 1);
    const __m256 dw8 = K::D8(dd);
    const __m256 dm8 = K::kMin ? LowHalvesToFloat(_mm256_srli_epi32(dd, 16)) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const __m256 dx = _mm256_set1_ps(xb[r]->d);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(SumLanes8(vp[r])), _mm256_mul_ps(dw8, dx), acc[r]);
      if constexpr (K::kMin)
        accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(SumLanes8(vm[r])), _mm256_mul_ps(dm8, dx), accm[r]);
    }
  }
  if constexpr (K::kMin) {
    for (int r = 0; r < R; ++r) acc[r] = _mm256_sub_ps(acc[r], accm[r]);
  }
  StoreRowsLanes<R>(acc, valid, r0, y, ys);
}

// The DotRowsFn: lanes from 4 activation rows on, rows below.
template <typename Block>
void KRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts, float* y,
           std::int64_t ys) {
  ByActs(
      acts,
      [&] {
        thread_local KLaneActs a;
        MakeKLaneActs<KType<Block>::kCorrPairs>(x, xs, nb, acts, a);
        ForLaneTiles(w, nrows, nb, [&](auto T, std::int64_t r0) { KLaneRows<Block, T()>(w, r0, a, nb, acts, y, ys); });
      },
      [&](auto R) {
        ForRowTiles(w, nrows, nb, [&](const Block* const* rows, int valid, std::int64_t r0) {
          KRowsTile<R(), Block>(rows, valid, r0, x, xs, nb, y, ys);
        });
      });
}

}  // namespace

void Avx512Q4_KRows(const BlockQ4_K* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys) {
  KRows(w, nrows, x, xs, nb, acts, y, ys);
}
void Avx512Q5_KRows(const BlockQ5_K* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys) {
  KRows(w, nrows, x, xs, nb, acts, y, ys);
}
void Avx512Q6_KRows(const BlockQ6_K* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys) {
  KRows(w, nrows, x, xs, nb, acts, y, ys);
}

}  // namespace kvshare::detail
