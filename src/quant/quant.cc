// Reference dequantization and activation quantization.
#include "quant/quant.h"

#include <cmath>
#include <cstring>
#include <string>

#include "common/float_convert.h"
#include "kvshare/common/error.h"
#include "quant/weight_types.h"

namespace kvshare {

bool IsSupportedWeightType(GgmlType type) { return detail::FindWeightType(type) != nullptr; }

const char* SupportedWeightTypesString() {
  static const std::string names = [] {
    std::string s;
    for (const detail::WeightTypeTraits& t : detail::WeightTypes()) s += (s.empty() ? "" : ", ") + std::string(t.name);
    return s;
  }();
  return names.c_str();
}

void CheckWeightType(const GgufTensor& t) {
  if (IsSupportedWeightType(t.type)) return;
  throw Error("tensor '" + t.name + "' has type " + GgmlTypeName(t.type) +
              ", which kvshare does not support (supported: " + SupportedWeightTypesString() +
              "); use a GGUF quantized to one of these (any llama.cpp llama-quantize preset)");
}

bool UsesSuperBlockActivations(GgmlType type) {
  const detail::WeightTypeTraits* t = detail::FindWeightType(type);
  return t != nullptr && t->act == detail::ActFormat::kQ8K;
}

namespace detail {

void DequantF32(const float* b, float* y, std::int64_t nb) { std::memcpy(y, b, static_cast<std::size_t>(nb) * 4); }
void DequantF16(const std::uint16_t* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) y[i] = F16ToF32(b[i]);
}
void DequantBF16(const std::uint16_t* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) y[i] = BF16ToF32(b[i]);
}

void DequantQ4_0(const BlockQ4_0* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((b[i].qs[j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantQ5_0(const BlockQ5_0* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d);
    std::uint32_t h;
    std::memcpy(&h, b[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      const int x0 = static_cast<int>((b[i].qs[j] & 0xF) | (((h >> j) & 1u) << 4)) - 16;
      const int x1 = static_cast<int>((b[i].qs[j] >> 4) | (((h >> (j + 16)) & 1u) << 4)) - 16;
      y[j] = static_cast<float>(x0) * d;
      y[j + 16] = static_cast<float>(x1) * d;
    }
  }
}

// Q4_1 / Q5_1: d * code + m, in that order (ggml and gguf-py round d * code first).
void DequantQ4_1(const BlockQ4_1* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d), m = F16ToF32(b[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(b[i].qs[j] & 0xF) * d + m;
      y[j + 16] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

void DequantQ5_1(const BlockQ5_1* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d), m = F16ToF32(b[i].m);
    std::uint32_t h;
    std::memcpy(&h, b[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      const unsigned x0 = (b[i].qs[j] & 0xFu) | (((h >> j) & 1u) << 4);
      const unsigned x1 = (b[i].qs[j] >> 4) | (((h >> (j + 16)) & 1u) << 4);
      y[j] = static_cast<float>(x0) * d + m;
      y[j + 16] = static_cast<float>(x1) * d + m;
    }
  }
}

void DequantQ8_0(const BlockQ8_0* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void DequantQ4_K(const BlockQ4_K* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    const float dmin = F16ToF32(b[i].dmin);
    const std::uint8_t* q = b[i].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      std::uint8_t sc, m;
      Q4KScaleMin(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      Q4KScaleMin(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// As Q4_K; sub-block j's 5th bits are bit j of qh[0..31].
void DequantQ5_K(const BlockQ5_K* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    const float dmin = F16ToF32(b[i].dmin);
    const std::uint8_t* q = b[i].qs;
    const std::uint8_t* qh = b[i].qh;
    for (int c = 0; c < 4; ++c, q += 32) {
      std::uint8_t sc, m;
      Q4KScaleMin(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      Q4KScaleMin(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const int lo_bit = 2 * c, hi_bit = 2 * c + 1;
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((q[l] & 0xF) | (((qh[l] >> lo_bit) & 1) << 4)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((q[l] >> 4) | (((qh[l] >> hi_bit) & 1) << 4)) - m2;
      }
    }
  }
}

void DequantQ6_K(const BlockQ6_K* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    const std::int8_t* sc = b[i].scales;
    for (int n = 0; n < 2; ++n, y += 128, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(Q6KCode(b[i], n, 0, l) - 32);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(Q6KCode(b[i], n, 1, l) - 32);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(Q6KCode(b[i], n, 2, l) - 32);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(Q6KCode(b[i], n, 3, l) - 32);
      }
    }
  }
}

// Q2_K / Q3_K: element 128n + 32j + l is bits 2j of qs[32n + l], so group g
// (16 elements, one scale) starts at element 16g: n = g / 8, j = (g / 2) % 4,
// l from 16 (g % 2).
void DequantQ2_K(const BlockQ2_K* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d), dmin = F16ToF32(b[i].dmin);
    for (int g = 0; g < 16; ++g, y += 16) {
      const int n = g / 8, j = (g / 2) % 4, l0 = 16 * (g % 2);
      const float dl = d * static_cast<float>(b[i].scales[g] & 0xF);
      const float ml = dmin * static_cast<float>(b[i].scales[g] >> 4);
      for (int l = 0; l < 16; ++l) {
        y[l] = dl * static_cast<float>((b[i].qs[32 * n + l0 + l] >> (2 * j)) & 3) - ml;
      }
    }
  }
}

void DequantQ3_K(const BlockQ3_K* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int g = 0; g < 16; ++g, y += 16) {
      const int n = g / 8, j = (g / 2) % 4, l0 = 16 * (g % 2);
      const float dl = d * static_cast<float>(Q3KScale(g, b[i].scales) - 32);
      for (int l = l0; l < l0 + 16; ++l) {
        const int high = (b[i].hmask[l] >> (4 * n + j)) & 1;
        const int code = ((b[i].qs[32 * n + l] >> (2 * j)) & 3) - (high != 0 ? 0 : 4);
        y[l - l0] = dl * static_cast<float>(code);
      }
    }
  }
}

namespace {
void DequantIQ4Nibbles(const std::uint8_t* qs, float d, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Values[qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4Values[qs[j] >> 4]);
  }
}

}  // namespace

void DequantIQ4_NL(const BlockIQ4_NL* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += 32) DequantIQ4Nibbles(b[i].qs, F16ToF32(b[i].d), y);
}

void DequantIQ4_XS(const BlockIQ4_XS* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int ib = 0; ib < 8; ++ib, y += 32) {
      DequantIQ4Nibbles(b[i].qs + 16 * ib, d * static_cast<float>(IQ4XSScale(ib, b[i]) - 32), y);
    }
  }
}

void DequantTQ2_0(const BlockTQ2_0* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int e = 0; e < 256; ++e) {
      const int n = e / 128, j = (e / 32) % 4, l = e % 32;
      *y++ = d * static_cast<float>(((b[i].qs[32 * n + l] >> (2 * j)) & 3) - 1);
    }
  }
}

void DequantTQ1_0(const BlockTQ1_0* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int e = 0; e < 256; ++e) *y++ = d * static_cast<float>(Tq1Trit(b[i], e) - 1);
  }
}

void DequantNVFP4(const BlockNVFP4* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i) {
    for (int s = 0; s < 4; ++s, y += 16) {
      const float d = Ue4m3Scale(b[i].d[s]);
      for (int j = 0; j < 8; ++j) {
        y[j] = static_cast<float>(kMxfp4Values[b[i].qs[8 * s + j] & 0xF]) * d;
        y[j + 8] = static_cast<float>(kMxfp4Values[b[i].qs[8 * s + j] >> 4]) * d;
      }
    }
  }
}

void DequantQ1_0(const BlockQ1_0* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += 128) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < 128; ++j) y[j] = (b[i].qs[j / 8] >> (j % 8)) & 1 ? d : -d;
  }
}

void DequantQ2_0(const BlockQ2_0* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += 64) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < 64; ++j) y[j] = static_cast<float>(((b[i].qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
  }
}

void DequantMXFP4(const BlockMXFP4* b, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = Mxfp4Scale(b[i].e);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kMxfp4Values[b[i].qs[j] & 0xF]);
      y[j + 16] = d * static_cast<float>(kMxfp4Values[b[i].qs[j] >> 4]);
    }
  }
}

}  // namespace detail

float IQ4XSSubScale(int ib, const BlockIQ4_XS& b) {
  return detail::F16ToF32(b.d) * static_cast<float>(IQ4XSScale(ib, b) - 32);
}

void DequantizeRow(GgmlType type, const void* src, float* dst, std::int64_t n) {
  const detail::WeightTypeTraits* t = detail::FindWeightType(type);
  if (t == nullptr) throw Error("DequantizeRow: unsupported ggml type " + GgmlTypeName(type));
  if (n < 0 || n % t->block != 0) {
    throw Error("DequantizeRow: n = " + std::to_string(n) + " is not a multiple of the " + GgmlTypeName(type) +
                " block size " + std::to_string(t->block));
  }
  t->dequantize(src, dst, n / t->block);
}

namespace {
// d = amax/127; q = round(x/d) in [-127, 127], ties to even. Returns d.
// Written without libm calls (the compiler inlines and vectorizes it); same
// results as fmax / nearbyint / fmin, NaN included (ignored by amax, 127).
float QuantizeBlock(const float* x, std::int8_t* q, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float a = std::fabs(x[j]);
    amax = a > amax ? a : amax;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  // |x * id| <= 127 (+ rounding) < 2^22: adding and subtracting 1.5 * 2^23
  // rounds to the nearest integer, ties to even, like nearbyint.
  constexpr float kRound = 12582912.0f;
  for (int j = 0; j < n; ++j) {
    const float v = (x[j] * id + kRound) - kRound;
    const float c = v < 127.0f ? v : 127.0f;
    q[j] = static_cast<std::int8_t>(c > -127.0f ? c : -127.0f);
  }
  return d;
}
}  // namespace

void QuantizeRowQ8Reference(const float* x, ActQ8* y, std::int64_t n) {
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32) {
    y[b].d = QuantizeBlock(x, y[b].qs, 32);
    int s = 0;
    for (int j = 0; j < 32; ++j) s += y[b].qs[j];
    y[b].sum = s;
  }
}

void QuantizeRowQ8KReference(const float* x, ActQ8K* y, std::int64_t n) {
  for (std::int64_t b = 0; b < n / 256; ++b, x += 256) {
    y[b].d = QuantizeBlock(x, y[b].qs, 256);
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += y[b].qs[16 * g + j];
      y[b].bsums[g] = static_cast<std::int16_t>(s);
    }
  }
}

}  // namespace kvshare
