// AVX2 kernel over packed Q8_0 / Q4_0 / Q5_0 / IQ4_NL / IQ4_XS / MXFP4 weights (layout: packed.h),
// compiled with -mavx2 -mfma -mf16c; entered only when the CPU reports those
// features (quant_matmul.cc).
//
// The 16 rows of a packed group are taken as two halves of 8, one per ymm:
// lane t of a half is weight row t, and each activation row's 4-byte group k
// is broadcast from memory against code vector k. Without VNNI a 4-byte group
// is maddubs (u8 x s8 -> int16 pairs) and madd against ones: Q4_0 / Q5_0
// codes are at most 31, so four maddubs results summed in int16 stay below
// 4 * 2 * 31 * 127 = 31496; Q8_0 takes the sign trick (|w| as the unsigned
// operand, x with w's sign as the signed one: pairs at most 2 * 128 * 127),
// and so do IQ4_NL and MXFP4 once their nibbles are mapped to grid values
// (|v| <= 127).
// Per weight row and activation row the arithmetic is the AVX-512 kernels'
// (p_b exact in int32, y = fma(float(p_b), dw_b * dx_b, y) over the blocks in
// order), so packed outputs on AVX2 equal the AVX-512 ones bit for bit. (The
// unpacked AVX2 Q8_0 kernel, avx2/q32.cc, sums 8 lanes of partial products
// instead and differs in the last bits.)
#include <immintrin.h>

#include <cstring>

#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"
#include "quant/kernels/rows.h"
#include "quant/kernels/x86.h"

namespace kvshare::detail {
namespace {

constexpr int kPassRows = 8;

// The codes' bias: the signed types (kPackedSigned) go through the sign
// trick unbiased.
template <GgmlType kType>
constexpr int Bias() {
  return kPackedCodeOffset<kType>;
}

// Where a group's scales are (row order, 16 per block): the fp16 d plane, or
// the fp32 dsub; the 8 of half h of block b.
template <GgmlType kType>
inline const void* GroupScales(const PackedWeights& w, std::size_t gb) {
  if constexpr (kPackedFloatScales<kType>) return w.dsub + gb * kPackRows;
  return w.d + gb * kPackRows;
}
template <GgmlType kType>
inline __m256 HalfScales(const void* scales, std::int64_t b, int h) {
  if constexpr (kPackedFloatScales<kType>)
    return _mm256_loadu_ps(static_cast<const float*>(scales) + b * kPackRows + 8 * h);
  return _mm256_cvtph_ps(_mm_loadu_si128(
      reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(scales) + b * kPackRows + 8 * h)));
}

// One block of one half, decoded into 32-byte code vectors c[k] (Q8_0: |w|,
// with the signed w in s[k]): in registers (HalfRegs), or stored for several
// passes or rows (HalfCodes).
struct HalfRegs {
  __m256i c[8], s[8];
};

struct alignas(32) HalfCodes {
  std::uint8_t c[8][32];
  std::uint8_t s[8][32];
};

template <GgmlType kType>
inline HalfRegs DecodeHalfRegs(const std::uint8_t* codes, const std::uint8_t* high, int h) {
  HalfRegs r;
  if constexpr (kType == GgmlType::kQ8_0) {
    for (int k = 0; k < 8; ++k) {
      r.s[k] = _mm256_xor_si256(Load32(codes + 64 * k + 32 * h), _mm256_set1_epi8(static_cast<char>(0x80)));
      r.c[k] = _mm256_sign_epi8(r.s[k], r.s[k]);
    }
  } else {
    const __m256i low4 = _mm256_set1_epi8(0xF);
    for (int k = 0; k < 4; ++k) {
      const __m256i v = Load32(codes + 64 * k + 32 * h);
      __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      if constexpr (kType == GgmlType::kQ5_0) {
        std::uint64_t m0, m1;
        std::memcpy(&m0, high + 8 * k, 8);
        std::memcpy(&m1, high + 8 * (k + 4), 8);
        lo = _mm256_or_si256(lo, BitsToBytes(static_cast<std::uint32_t>(m0 >> (32 * h))));
        hi = _mm256_or_si256(hi, BitsToBytes(static_cast<std::uint32_t>(m1 >> (32 * h))));
      }
      r.c[k] = lo;
      r.c[k + 4] = hi;
    }
    if constexpr (kPackedGrid<kType>) {
      const __m256i grid =
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(PackedGridValues<kType>())));
      for (int k = 0; k < 8; ++k) {
        r.s[k] = _mm256_shuffle_epi8(grid, r.c[k]);
        r.c[k] = _mm256_sign_epi8(r.s[k], r.s[k]);
      }
    }
  }
  return r;
}

template <GgmlType kType>
void DecodeHalf(const std::uint8_t* codes, const std::uint8_t* high, int h, HalfCodes& out) {
  const HalfRegs r = DecodeHalfRegs<kType>(codes, high, h);
  for (int k = 0; k < 8; ++k) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(out.c[k]), r.c[k]);
    if constexpr (kPackedSigned<kType>) _mm256_store_si256(reinterpret_cast<__m256i*>(out.s[k]), r.s[k]);
  }
}

// The exact int32 block dot products of the half's 8 weight rows with
// activation block a.
template <GgmlType kType>
inline __m256i HalfDotRegs(const HalfRegs& r, const ActQ8& a) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (kPackedSigned<kType>) {
    __m256i p = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m256i sx = _mm256_sign_epi8(Broadcast4Ymm(a.qs + 4 * k), r.s[k]);
      p = _mm256_add_epi32(p, _mm256_madd_epi16(_mm256_maddubs_epi16(r.c[k], sx), ones));
    }
    return p;
  } else {
    __m256i s[2];
    for (int q = 0; q < 2; ++q) {
      s[q] = _mm256_maddubs_epi16(r.c[4 * q], Broadcast4Ymm(a.qs + 16 * q));
      for (int k = 4 * q + 1; k < 4 * q + 4; ++k)
        s[q] = _mm256_add_epi16(s[q], _mm256_maddubs_epi16(r.c[k], Broadcast4Ymm(a.qs + 4 * k)));
    }
    const __m256i init = _mm256_set1_epi32(-Bias<kType>() * a.sum);
    return _mm256_add_epi32(init, _mm256_add_epi32(_mm256_madd_epi16(s[0], ones), _mm256_madd_epi16(s[1], ones)));
  }
}

template <GgmlType kType>
inline __m256i HalfDot(const HalfCodes& hc, const ActQ8& a) {
  HalfRegs r;
  for (int k = 0; k < 8; ++k) {
    r.c[k] = Load32(hc.c[k]);
    if constexpr (kPackedSigned<kType>) r.s[k] = Load32(hc.s[k]);
  }
  return HalfDotRegs<kType>(r, a);
}

// Where a half's decoded blocks come from: decoded as they are read
// (Inline; one pass of activation rows), or decoded once into scratch for
// several passes (Buffered: Q5_0 with more than kPassRows rows, whose fifth
// bits cost more to expand than the scratch costs to read back; Q8_0 and
// Q4_0 measured faster decoding again per pass).
template <GgmlType kType>
struct Inline {
  const PackedWeights& w;
  std::int64_t g;
  int h;
  HalfCodes hc;
  const HalfCodes& operator()(std::int64_t b) {
    const auto gb = static_cast<std::size_t>(g * w.nb + b);
    const std::uint8_t* codes = w.codes + gb * w.bytes.codes;
    if (h == 0) {
      PrefetchPackedAhead(codes, w.bytes.codes);
    }
    DecodeHalf<kType>(codes, w.high != nullptr ? w.high + gb * w.bytes.high : nullptr, h, hc);
    return hc;
  }
};

struct Buffered {
  const HalfCodes* hc;
  const HalfCodes& operator()(std::int64_t b) const { return hc[b]; }
};

// One half (rows 8h .. 8h+7 of a group; the group's scales at `scales`)
// against R activation rows; y[j * ys + t].
template <GgmlType kType, int R, class Src>
void HalfRows(Src&& src, const void* scales, int h, std::int64_t nb, const ActQ8* x, std::int64_t xs, float* y,
              std::int64_t ys) {
  __m256 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const HalfCodes& hc = src(b);
    const __m256 dw = HalfScales<kType>(scales, b, h);
    for (int j = 0; j < R; ++j) {
      const ActQ8& a = x[j * xs + b];
      acc[j] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(HalfDot<kType>(hc, a)), _mm256_mul_ps(dw, _mm256_set1_ps(a.d)), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) _mm256_storeu_ps(y + j * ys, acc[j]);
}

template <GgmlType kType, class MakeSrc>
void Passes(MakeSrc&& make_src, const void* scales, int h, std::int64_t nb, const ActQ8* x, std::int64_t xs, int acts,
            float* y, std::int64_t ys) {
  ForEachPass<kPassRows>(acts, [&](auto rows, int j0) {
    HalfRows<kType, decltype(rows)::value>(make_src(), scales, h, nb, x + j0 * xs, xs, y + j0 * ys, ys);
  });
}

// One activation row (decode), both halves of a group per block: each code
// vector is loaded once and decoded in registers, where the half-by-half path
// stores and reloads a block's decoded codes (HalfCodes) and walks the
// group's blocks twice. The same integer sums and float steps as
// HalfRows<kType, 1>. Faster than the half-by-half path on kvshare_bench
// MatPacked (m = 1, level 1) and MatPackedDram (the LM head); figures in
// docs/kernels.md.
template <GgmlType kType>
void GroupOneRow(const PackedWeights& w, std::int64_t g, const ActQ8* x, float* y) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const auto gb = static_cast<std::size_t>(g * w.nb);
  const std::uint8_t* codes = w.codes + gb * w.bytes.codes;
  const std::uint8_t* high = w.high != nullptr ? w.high + gb * w.bytes.high : nullptr;
  const void* scales = GroupScales<kType>(w, gb);
  for (std::int64_t b = 0; b < w.nb; ++b, codes += w.bytes.codes) {
    PrefetchPackedAhead(codes, w.bytes.codes);
    const ActQ8& a = x[b];
    __m256i p[2];
    if constexpr (kType == GgmlType::kQ8_0) {
      // Code group k of both halves against one broadcast: one broadcast per
      // group instead of two (faster on MatPacked, docs/kernels.md).
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
      p[0] = p[1] = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        const __m256i xk = Broadcast4Ymm(a.qs + 4 * k);
        for (int h = 0; h < 2; ++h) {
          const __m256i wv = _mm256_xor_si256(Load32(codes + 64 * k + 32 * h), flip);
          const __m256i sx = _mm256_sign_epi8(xk, wv);
          p[h] = _mm256_add_epi32(p[h], _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), sx), ones));
        }
      }
    } else {
      for (int h = 0; h < 2; ++h) p[h] = HalfDotRegs<kType>(DecodeHalfRegs<kType>(codes, high, h), a);
    }
    const __m256 dx = _mm256_set1_ps(a.d);
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = HalfScales<kType>(scales, b, h);
      acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p[h]), _mm256_mul_ps(dw, dx), acc[h]);
    }
    if (high != nullptr) high += w.bytes.high;
  }
  _mm256_storeu_ps(y, acc[0]);
  _mm256_storeu_ps(y + 8, acc[1]);
}

template <GgmlType kType>
void PackedRowsT(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8* x, std::int64_t xs, int acts,
                 float* y, std::int64_t ys) {
  if (acts == 1) {
    for (std::int64_t g = r0 / kPackRows; g < r1 / kPackRows; ++g)
      GroupOneRow<kType>(w, g, x, y + (g * kPackRows - r0));
    return;
  }
  const bool buffered = kType == GgmlType::kQ5_0 && acts > kPassRows;
  static_assert(sizeof(HalfCodes) % 64 == 0 && alignof(HalfCodes) <= 64, "HalfCodes in 64-byte code vectors");
  auto* scratch =
      buffered ? static_cast<HalfCodes*>(DecodedCodeScratch(static_cast<std::size_t>(w.nb) * sizeof(HalfCodes) / 64))
               : nullptr;
  for (std::int64_t g = r0 / kPackRows; g < r1 / kPackRows; ++g) {
    for (int h = 0; h < 2; ++h) {
      const void* scales = GroupScales<kType>(w, static_cast<std::size_t>(g * w.nb));
      float* yh = y + (g * kPackRows - r0) + 8 * h;
      if (buffered) {
        Inline<kType> dec{w, g, h, {}};
        for (std::int64_t b = 0; b < w.nb; ++b) scratch[b] = dec(b);
        Passes<kType>([&] { return Buffered{scratch}; }, scales, h, w.nb, x, xs, acts, yh, ys);
      } else {
        Passes<kType>([&] { return Inline<kType>{w, g, h, {}}; }, scales, h, w.nb, x, xs, acts, yh, ys);
      }
    }
  }
}

}  // namespace

void Avx2PackedRows(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8* x, std::int64_t xs, int acts,
                    float* y, std::int64_t ys, const AmxStagedActs* /*staged*/) {
  switch (w.type) {
    case GgmlType::kQ8_0: PackedRowsT<GgmlType::kQ8_0>(w, r0, r1, x, xs, acts, y, ys); return;
    case GgmlType::kQ4_0: PackedRowsT<GgmlType::kQ4_0>(w, r0, r1, x, xs, acts, y, ys); return;
    case GgmlType::kIQ4_NL: PackedRowsT<GgmlType::kIQ4_NL>(w, r0, r1, x, xs, acts, y, ys); return;
    case GgmlType::kIQ4_XS: PackedRowsT<GgmlType::kIQ4_XS>(w, r0, r1, x, xs, acts, y, ys); return;
    case GgmlType::kMXFP4: PackedRowsT<GgmlType::kMXFP4>(w, r0, r1, x, xs, acts, y, ys); return;
    default: PackedRowsT<GgmlType::kQ5_0>(w, r0, r1, x, xs, acts, y, ys); return;
  }
}

}  // namespace kvshare::detail
