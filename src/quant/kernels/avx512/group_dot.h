// The inner step of the AVX-512 VNNI kernels whose 16 lanes are 16 weight
// rows and whose super-blocks are 16 groups of 16 elements with one integer
// scale per group and row (avx512/packed_k.cc: Q6_K, Q3_K, Q2_K;
// avx512/iq.cc: the IQ1-IQ3 types decoded into tiles). Compiled with the
// AVX-512 files' flags only; in an anonymous namespace as x86.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "quant/kernels/x86.h"
#include "quant/quant.h"

namespace kvshare::detail {
namespace {

// Group grp (elements 16 grp .. +15) of super-block b: its 4 code vectors c
// (unsigned codes = value + kBias; vector k holds elements 16 grp + 4k .. +3
// of the 16 rows) against activation rows j < R (row j at x + j * xs), each
// sum exact in int32: P[j] += s * (sum_k vpdpbusd(c[k], a_j) - kBias *
// bsum_j,grp).
template <int kBias, int R>
inline void GroupDot(const __m512i c[4], __m512i s, const ActQ8K* x, std::int64_t xs, std::int64_t b, int grp,
                     __m512i P[R]) {
  // Code vector k against every row before k + 1: the R chains are
  // independent, so each vpdpbusd waits on one issued R earlier, not on the
  // one before it (kvshare_bench MatPacked Q6_K at m = 8 / 64;
  // docs/kernels.md). With one to three rows, two chains each.
  constexpr int kChains = R >= 4 ? 1 : 2;
  __m512i p[R][kChains];
  for (int j = 0; j < R; ++j) {
    p[j][0] = kBias == 0 ? _mm512_setzero_si512() : _mm512_set1_epi32(-kBias * x[j * xs + b].bsums[grp]);
    if constexpr (kChains > 1) p[j][1] = _mm512_setzero_si512();
  }
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < R; ++j) {
      p[j][k % kChains] =
          _mm512_dpbusd_epi32(p[j][k % kChains], c[k], Broadcast4Zmm(x[j * xs + b].qs + 16 * grp + 4 * k));
    }
  }
  for (int j = 0; j < R; ++j) {
    const __m512i pj = kChains == 1 ? p[j][0] : _mm512_add_epi32(p[j][0], p[j][kChains - 1]);
    P[j] = _mm512_add_epi32(P[j], _mm512_mullo_epi32(pj, s));
  }
}

}  // namespace
}  // namespace kvshare::detail
