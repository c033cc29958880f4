// Reference dequantization and the scalar dot kernels (the plain twin of
// quant_avx2_iq.cc) of the IQ1 / IQ2 / IQ3 types.
#include "model/quant_iq.h"

#include <cmath>

#include "model/quant_kernels.h"

namespace kvshare::detail {
namespace {

// y[k] = db * g_k * sigma_k for the 8 elements of one grid point.
void DequantPoint(std::uint64_t point, std::uint8_t signs, float db, float* y) {
  for (int k = 0; k < 8; ++k) {
    y[k] = db * static_cast<float>((point >> (8 * k)) & 0xFF) * ((signs >> k) & 1 ? -1.0f : 1.0f);
  }
}
// y[k] = dl * (g_k + delta) for the 8 elements of an IQ1 grid point.
void DequantIq1Point(std::uint64_t point, float dl, float delta, float* y) {
  for (int k = 0; k < 8; ++k) y[k] = dl * (static_cast<float>(static_cast<std::int8_t>(point >> (8 * k))) + delta);
}
// (0.5 + s) * scale for the IQ2 / IQ3_XXS sub-block scales.
float HalfScale(float d, unsigned s, float scale) { return d * (0.5f + static_cast<float>(s)) * scale; }

void Dequant(const BlockIQ2_XXS& b, float* y) {
  const float d = F16ToF32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    std::uint32_t aux[2];
    std::memcpy(aux, b.qs + 4 * ib, 8);
    const float db = HalfScale(d, aux[1] >> 28, 0.25f);
    for (int l = 0; l < 4; ++l) {
      DequantPoint(kIq2xxsGrid[(aux[0] >> (8 * l)) & 0xFF], Iq2Signs(aux[1] >> (7 * l)), db, y + 32 * ib + 8 * l);
    }
  }
}
void Dequant(const BlockIQ2_XS& b, float* y) {
  const float d = F16ToF32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const unsigned q = b.qs[4 * ib + l];
      const float db = HalfScale(d, (b.scales[ib] >> (4 * (l / 2))) & 0xF, 0.25f);
      DequantPoint(kIq2xsGrid[q & 511], Iq2Signs(q >> 9), db, y + 32 * ib + 8 * l);
    }
  }
}
void Dequant(const BlockIQ2_S& b, float* y) {
  const float d = F16ToF32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const unsigned idx = b.qs[4 * ib + l] | (((b.qh[ib] >> (2 * l)) & 3u) << 8);
      const float db = HalfScale(d, (b.scales[ib] >> (4 * (l / 2))) & 0xF, 0.25f);
      DequantPoint(kIq2sGrid[idx], b.qs[32 + 4 * ib + l], db, y + 32 * ib + 8 * l);
    }
  }
}
void Dequant(const BlockIQ3_XXS& b, float* y) {
  const float d = F16ToF32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    std::uint32_t aux;
    std::memcpy(&aux, b.qs + 64 + 4 * ib, 4);
    const float db = HalfScale(d, aux >> 28, 0.5f);
    for (int l = 0; l < 4; ++l) {
      const std::uint64_t point = kIq3xxsGrid[b.qs[8 * ib + 2 * l]] |
                                  static_cast<std::uint64_t>(kIq3xxsGrid[b.qs[8 * ib + 2 * l + 1]]) << 32;
      DequantPoint(point, Iq2Signs(aux >> (7 * l)), db, y + 32 * ib + 8 * l);
    }
  }
}
void Dequant(const BlockIQ3_S& b, float* y) {
  const float d = F16ToF32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const float db = d * static_cast<float>(1 + 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF));
    for (int l = 0; l < 4; ++l) {
      const unsigned i0 = b.qs[8 * ib + 2 * l] | (((b.qh[ib] >> (2 * l)) & 1u) << 8);
      const unsigned i1 = b.qs[8 * ib + 2 * l + 1] | (((b.qh[ib] >> (2 * l + 1)) & 1u) << 8);
      DequantPoint(kIq3sGrid[i0] | static_cast<std::uint64_t>(kIq3sGrid[i1]) << 32, b.signs[4 * ib + l], db,
                   y + 32 * ib + 8 * l);
    }
  }
}
constexpr float kIq1Delta = 0.125f;
void Dequant(const BlockIQ1_S& b, float* y) {
  const float d = F16ToF32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const unsigned qh = b.qh[ib];
    const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
    const float delta = (qh & 0x8000) ? -kIq1Delta : kIq1Delta;
    for (int l = 0; l < 4; ++l) {
      DequantIq1Point(kIq1sGrid[b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8)], dl, delta, y + 32 * ib + 8 * l);
    }
  }
}
void Dequant(const BlockIQ1_M& b, float* y) {
  const float d = F16ToF32(IQ1MScaleBits(b));
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const unsigned nib = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 0xF;
      const float dl = d * static_cast<float>(2 * IQ1MScale(b, 2 * ib + l / 2) + 1);
      DequantIq1Point(kIq1sGrid[b.qs[4 * ib + l] | ((nib & 7u) << 8)], dl, (nib & 8) ? -kIq1Delta : kIq1Delta,
                      y + 32 * ib + 8 * l);
    }
  }
}

template <typename Block>
void DequantBlocks(const void* src, float* y, std::int64_t nb) {
  const Block* b = static_cast<const Block*>(src);
  for (std::int64_t i = 0; i < nb; ++i) Dequant(b[i], y + 256 * i);
}

// The scalar twin: per block, sum_ib sum_h ls_h (v . a)_h in int32, then
// acc = fma(sum, factor * dx, acc): the SIMD kernels' arithmetic exactly.
template <typename Block>
float DotIq(const Block* w, const ActQ8K* x, std::int64_t nb) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    int s = 0;
    for (int ib = 0; ib < 8; ++ib) {
      IqSub sub;
      IqDecode(w[b], ib, &sub);
      for (int h = 0; h < 2; ++h) {
        int p = 0;
        for (int k = 0; k < 16; ++k) p += sub.v[16 * h + k] * x[b].qs[32 * ib + 16 * h + k];
        s += sub.ls[h] * p;
      }
    }
    acc = std::fma(static_cast<float>(s), IqFactor(w[b]) * x[b].d, acc);
  }
  return acc;
}

}  // namespace

bool IsIqGridType(GgmlType type) {
  switch (type) {
    case GgmlType::kIQ2_XXS: case GgmlType::kIQ2_XS: case GgmlType::kIQ2_S: case GgmlType::kIQ3_XXS:
    case GgmlType::kIQ3_S: case GgmlType::kIQ1_S: case GgmlType::kIQ1_M:
      return true;
    default:
      return false;
  }
}

void DequantizeIqBlocks(GgmlType type, const void* src, float* dst, std::int64_t nb) {
  switch (type) {
    case GgmlType::kIQ2_XXS: DequantBlocks<BlockIQ2_XXS>(src, dst, nb); return;
    case GgmlType::kIQ2_XS: DequantBlocks<BlockIQ2_XS>(src, dst, nb); return;
    case GgmlType::kIQ2_S: DequantBlocks<BlockIQ2_S>(src, dst, nb); return;
    case GgmlType::kIQ3_XXS: DequantBlocks<BlockIQ3_XXS>(src, dst, nb); return;
    case GgmlType::kIQ3_S: DequantBlocks<BlockIQ3_S>(src, dst, nb); return;
    case GgmlType::kIQ1_S: DequantBlocks<BlockIQ1_S>(src, dst, nb); return;
    case GgmlType::kIQ1_M: DequantBlocks<BlockIQ1_M>(src, dst, nb); return;
    default: return;
  }
}

template <typename Block>
void ScalarIqRows(const Block* w, std::int64_t nrows, const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts,
                  float* y, std::int64_t ys) {
  for (std::int64_t r = 0; r < nrows; ++r) {
    for (int j = 0; j < acts; ++j) y[j * ys + r] = DotIq(w + r * nb, x + j * xs, nb);
  }
}
#define KVSHARE_IQ_INSTANTIATE(Block)                                                                              \
  template void ScalarIqRows<Block>(const Block*, std::int64_t, const ActQ8K*, std::int64_t, std::int64_t, int,   \
                                    float*, std::int64_t);
KVSHARE_FOR_EACH_IQ_BLOCK(KVSHARE_IQ_INSTANTIATE)
#undef KVSHARE_IQ_INSTANTIATE

}  // namespace kvshare::detail
