// AVX-512 VNNI kernel over packed Q8_0 / Q4_0 / Q5_0 / IQ4_NL / IQ4_XS / MXFP4 weights (layout:
// packed.h; Q4_K / Q6_K: avx512/packed_k.cc), compiled with -mavx512{f,bw,vl,vnni}; entered only when the
// CPU reports those features (quant_matmul.cc).
//
// The 16 lanes are 16 weight rows. For block b, each activation row's 4-byte
// group k is broadcast from memory into a vpdpbusd against code vector k, so
// a block of 16 weight rows against R activation rows is 8R vpdpbusd, R
// conversions and R scale steps, with the codes decoded once for all R rows.
// Per weight row and activation row the arithmetic is that of every other
// kernel (avx512/q32.cc): p_b exact in int32 (the codes' bias taken off
// by starting from -bias * sum x), then y = fma(float(p_b), dw_b * dx_b, y)
// over the blocks in order: bitwise the same outputs.
#include <immintrin.h>

#include "quant/kernels/avx512/packed_q32_codes.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"
#include "quant/kernels/rows.h"
#include "quant/kernels/x86.h"

namespace kvshare::detail {
namespace {

// Activation rows per pass: R accumulators and R int32 sums next to the 8
// code vectors stay in the 32 zmm registers.
constexpr int kPassRows = 8;

// One group of 16 weight rows against R activation rows (x, x_stride xs):
// y[j * ys + t] = row t's dot product with activation row j. kDecoded: codes
// holds the group's unsigned code vectors already decoded (DecodeGroup: 8
// vectors of 64 bytes per block, as Q8_0's plane; the bias stays kType's).
template <GgmlType kType, int R, bool kDecoded = false>
void GroupRows(const std::uint8_t* codes, const std::uint64_t* high, const void* scales, std::int64_t nb,
               const ActQ8* x, std::int64_t xs, float* y, std::int64_t ys) {
  constexpr GgmlType kLayout = kDecoded ? GgmlType::kQ8_0 : kType;
  constexpr std::size_t kCodeBytes = kLayout == GgmlType::kQ8_0 ? 512 : 256;
  // Independent vpdpbusd chains per activation row: with few rows one chain
  // of 8 would wait on its own latency.
  constexpr int kChains = R >= 4 ? 1 : R >= 2 ? 2 : 4;
  __m512 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    if constexpr (!kDecoded) PrefetchPackedAhead(codes + static_cast<std::size_t>(b) * kCodeBytes, kCodeBytes);
    __m512i c[8];
    LoadCodes<kLayout>(codes + static_cast<std::size_t>(b) * kCodeBytes, high != nullptr ? high + b * 8 : nullptr, c);
    const __m512 dw = BlockScales<kType>(scales, b);
    const ActQ8* xb = x + b;
    // Code vector k against every row before k + 1: the R chains are
    // independent, so each vpdpbusd waits on one issued R (or R * kChains)
    // instructions earlier, not on the one before it (kvshare_bench
    // MatPacked; docs/kernels.md).
    __m512i p[R][kChains];
    for (int j = 0; j < R; ++j) {
      p[j][0] = _mm512_set1_epi32(-Bias<kType>() * xb[j * xs].sum);
      for (int i = 1; i < kChains; ++i) p[j][i] = _mm512_setzero_si512();
    }
    for (int k = 0; k < 8; ++k) {
      for (int j = 0; j < R; ++j) {
        p[j][k % kChains] = _mm512_dpbusd_epi32(p[j][k % kChains], c[k], Broadcast4Zmm(xb[j * xs].qs + 4 * k));
      }
    }
    for (int j = 0; j < R; ++j) {
      for (int i = 1; i < kChains; ++i) p[j][0] = _mm512_add_epi32(p[j][0], p[j][i]);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[j][0]), _mm512_mul_ps(dw, _mm512_set1_ps(xb[j * xs].d)), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) _mm512_storeu_ps(y + j * ys, acc[j]);
}

// The group's nb blocks of code vectors decoded into out (8 x 64 bytes per
// block, unsigned codes as LoadCodes forms them).
template <GgmlType kType>
void DecodeGroup(const std::uint8_t* codes, const std::uint64_t* high, std::int64_t nb, __m512i* out) {
  for (std::int64_t b = 0; b < nb; ++b) {
    PrefetchPackedAhead(codes + static_cast<std::size_t>(b) * 256, 256);
    LoadCodes<kType>(codes + static_cast<std::size_t>(b) * 256, high + b * 8, out + 8 * b);
  }
}

// Every pass of kPassRows activation rows over one group.
template <GgmlType kType, bool kDecoded>
void Passes(const std::uint8_t* codes, const std::uint64_t* high, const void* scales, std::int64_t nb, const ActQ8* x,
            std::int64_t xs, int acts, float* y, std::int64_t ys) {
  ForEachPass<kPassRows>(acts, [&](auto rows, int j0) {
    GroupRows<kType, decltype(rows)::value, kDecoded>(codes, high, scales, nb, x + j0 * xs, xs, y + j0 * ys, ys);
  });
}

template <GgmlType kType>
void PackedRowsT(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8* x, std::int64_t xs, int acts,
                 float* y, std::int64_t ys) {
  const std::int64_t nb = w.nb;
  // Q5_0 with several passes (prefill, mixed steps): the fifth-bit merge
  // (a masked byte add per code vector) is done once per group into scratch
  // instead of once per pass, and the passes read plain code bytes as Q8_0's
  // do (MatPacked Q5_0 at m = 96; docs/kernels.md). The AVX2 kernel buffers
  // the same way (avx2/packed_q32.cc).
  const bool decoded = kType == GgmlType::kQ5_0 && acts > kPassRows;
  auto* scratch = decoded ? static_cast<__m512i*>(DecodedCodeScratch(static_cast<std::size_t>(8 * nb))) : nullptr;
  for (std::int64_t g = r0 / kPackRows; g < r1 / kPackRows; ++g) {
    const std::uint8_t* codes = w.codes + static_cast<std::size_t>(g * nb) * w.bytes.codes;
    const auto* high = w.high != nullptr ? reinterpret_cast<const std::uint64_t*>(w.high) + g * nb * 8 : nullptr;
    const void* d = kPackedFloatScales<kType> ? static_cast<const void*>(w.dsub + g * nb * kPackRows)
                                              : static_cast<const void*>(w.d + g * nb * kPackRows);
    float* yg = y + (g * kPackRows - r0);
    if constexpr (kType == GgmlType::kQ5_0) {
      if (decoded) {
        DecodeGroup<kType>(codes, high, nb, scratch);
        Passes<kType, true>(reinterpret_cast<const std::uint8_t*>(scratch), nullptr, d, nb, x, xs, acts, yg, ys);
        continue;
      }
    }
    Passes<kType, false>(codes, high, d, nb, x, xs, acts, yg, ys);
  }
}

}  // namespace

void Avx512PackedRows(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8* x, std::int64_t xs,
                      int acts, float* y, std::int64_t ys, const AmxStagedActs* /*staged*/) {
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
