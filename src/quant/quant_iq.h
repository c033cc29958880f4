// The IQ1 / IQ2 / IQ3 weight types (the byte-exact block layouts of ggml's
// ggml-common.h) and the integer form every dot kernel computes them in.
// Each block holds 256 elements in 8 sub-blocks of 32; the grid tables are in
// quant/iq_grids.h. Formulas (per element, fp32 as gguf.quants.dequantize
// evaluates them; g a grid magnitude or value, sigma a sign bit's +-1):
//   IQ2_XXS / IQ2_XS / IQ2_S:  d * (0.5 + s) * 0.25 * g * sigma
//   IQ3_XXS:                   d * (0.5 + s) * 0.5 * g * sigma
//   IQ3_S:                     d * (1 + 2 s) * g * sigma
//   IQ1_S / IQ1_M:             d * (2 s + 1) * (g + delta), delta = +-1/8
#pragma once

#include <cstdint>
#include <cstring>

#include "common/float_convert.h"
#include "kvshare/gguf/gguf.h"
#include "quant/iq_grids.h"

namespace kvshare {

// IQ2_XXS: sub-block ib is qs[4ib .. 4ib + 3] read as two u32: aux0's byte l
// is the grid index of elements 8l .. 8l + 7, aux1 holds four 7-bit sign
// indices (bits 7l) and the 4-bit scale s (bits 28-31).
struct BlockIQ2_XXS {
  std::uint16_t d;
  std::uint16_t qs[32];
};
// IQ2_XS: qs[4ib + l] = 9-bit grid index | 7-bit sign index << 9 for elements
// 32ib + 8l ..; scales[ib]: low nibble for the first 16, high for the last 16.
struct BlockIQ2_XS {
  std::uint16_t d;
  std::uint16_t qs[32];
  std::uint8_t scales[8];
};
// IQ2_S: 10-bit grid index qs[4ib + l] | ((qh[ib] >> 2l) & 3) << 8, its 8 sign
// bits in qs[32 + 4ib + l]; scales as in IQ2_XS.
struct BlockIQ2_S {
  std::uint16_t d;
  std::uint8_t qs[64];
  std::uint8_t qh[8];
  std::uint8_t scales[8];
};
// IQ3_XXS: qs[8ib + l] is the grid index of elements 32ib + 4l .. + 3; the
// u32 at qs + 64 + 4ib holds four 7-bit sign indices (one per 8 elements) and
// the 4-bit scale (bits 28-31).
struct BlockIQ3_XXS {
  std::uint16_t d;
  std::uint8_t qs[96];
};
// IQ3_S: 9-bit grid index qs[8ib + l] | ((qh[ib] >> l) & 1) << 8 for elements
// 32ib + 4l .. + 3; signs[4ib + k]: the sign bits of elements 32ib + 8k ..;
// scales[ib / 2]: nibble ib % 2.
struct BlockIQ3_S {
  std::uint16_t d;
  std::uint8_t qs[64];
  std::uint8_t qh[8];
  std::uint8_t signs[32];
  std::uint8_t scales[4];
};
// IQ1_S: 11-bit grid index qs[4ib + l] | ((qh[ib] >> 3l) & 7) << 8 for
// elements 32ib + 8l ..; qh[ib] bits 12-14: the scale s, bit 15: delta < 0.
struct BlockIQ1_S {
  std::uint16_t d;
  std::uint8_t qs[32];
  std::uint16_t qh[8];
};
// IQ1_M: grid index qs[4ib + l] | (nibble & 7) << 8, nibble l % 2 of
// qh[2ib + l / 2], its bit 3: delta < 0 for those 8 elements; 3-bit scales per
// 16 elements (u16 word g / 4 of scales, bits 3 (g % 4)); d's fp16 bits are
// the top nibbles of the four u16 words (word w's at bits 4w).
struct BlockIQ1_M {
  std::uint8_t qs[32];
  std::uint8_t qh[16];
  std::uint8_t scales[8];
};
static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82 &&
              sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ1_S) == 50 &&
              sizeof(BlockIQ1_M) == 56);

// IQ1_M's fp16 d bits.
inline std::uint16_t IQ1MScaleBits(const BlockIQ1_M& b) {
  std::uint16_t s[4];
  std::memcpy(s, b.scales, 8);
  return static_cast<std::uint16_t>((s[0] >> 12) | ((s[1] >> 8) & 0xF0) | ((s[2] >> 4) & 0xF00) | (s[3] & 0xF000));
}
// IQ1_M's 3-bit scale of 16-element group g (0..15).
inline int IQ1MScale(const BlockIQ1_M& b, int g) {
  std::uint16_t s[4];
  std::memcpy(s, b.scales, 8);
  return (s[g / 4] >> (3 * (g % 4))) & 7;
}

// X(block) for each of the seven blocks (explicit kernel instantiations).
#define KVSHARE_FOR_EACH_IQ_BLOCK(X) \
  X(BlockIQ2_XXS) X(BlockIQ2_XS) X(BlockIQ2_S) X(BlockIQ3_XXS) X(BlockIQ3_S) X(BlockIQ1_S) X(BlockIQ1_M)

namespace detail {

// The integer form: element 32 ib + k of a block equals
//   IqFactor(block) * ls[k / 16] * v[k]
// exactly (in real arithmetic), with IqFactor a power-of-two multiple of d
// (IQ2: d / 8, IQ3_XXS: d / 4, IQ3_S: d, IQ1: d / 8), ls the odd scale 2s + 1
// (1 + 2s) and v an int8 (IQ2: +-g <= 43, IQ3: +-g <= 62, IQ1: 8g +- 1).
// Kernels sum ls * (v . a) per sub-block in int32 and scale once per block.
struct IqSub {
  std::int8_t v[32];
  int ls[2];
};

inline void IqPoint(std::uint64_t point, std::uint8_t signs, std::int8_t* v) {
  for (int k = 0; k < 8; ++k) {
    const int g = static_cast<int>((point >> (8 * k)) & 0xFF);
    v[k] = static_cast<std::int8_t>((signs >> k) & 1 ? -g : g);
  }
}

inline void IqDecode(const BlockIQ2_XXS& b, int ib, IqSub* o) {
  std::uint32_t aux[2];
  std::memcpy(aux, b.qs + 4 * ib, 8);
  for (int l = 0; l < 4; ++l)
    IqPoint(kIq2xxsGrid[(aux[0] >> (8 * l)) & 0xFF], Iq2Signs(aux[1] >> (7 * l)), o->v + 8 * l);
  o->ls[0] = o->ls[1] = 2 * static_cast<int>(aux[1] >> 28) + 1;
}
inline void IqDecode(const BlockIQ2_XS& b, int ib, IqSub* o) {
  for (int l = 0; l < 4; ++l) {
    const unsigned q = b.qs[4 * ib + l];
    IqPoint(kIq2xsGrid[q & 511], Iq2Signs(q >> 9), o->v + 8 * l);
  }
  o->ls[0] = 2 * (b.scales[ib] & 0xF) + 1;
  o->ls[1] = 2 * (b.scales[ib] >> 4) + 1;
}
inline void IqDecode(const BlockIQ2_S& b, int ib, IqSub* o) {
  for (int l = 0; l < 4; ++l) {
    const unsigned idx = b.qs[4 * ib + l] | (((b.qh[ib] >> (2 * l)) & 3u) << 8);
    IqPoint(kIq2sGrid[idx], b.qs[32 + 4 * ib + l], o->v + 8 * l);
  }
  o->ls[0] = 2 * (b.scales[ib] & 0xF) + 1;
  o->ls[1] = 2 * (b.scales[ib] >> 4) + 1;
}
inline void IqDecode(const BlockIQ3_XXS& b, int ib, IqSub* o) {
  std::uint32_t aux;
  std::memcpy(&aux, b.qs + 64 + 4 * ib, 4);
  for (int l = 0; l < 4; ++l) {
    const std::uint64_t point =
        kIq3xxsGrid[b.qs[8 * ib + 2 * l]] | static_cast<std::uint64_t>(kIq3xxsGrid[b.qs[8 * ib + 2 * l + 1]]) << 32;
    IqPoint(point, Iq2Signs(aux >> (7 * l)), o->v + 8 * l);
  }
  o->ls[0] = o->ls[1] = 2 * static_cast<int>(aux >> 28) + 1;
}
inline void IqDecode(const BlockIQ3_S& b, int ib, IqSub* o) {
  for (int l = 0; l < 4; ++l) {
    const unsigned i0 = b.qs[8 * ib + 2 * l] | (((b.qh[ib] >> (2 * l)) & 1u) << 8);
    const unsigned i1 = b.qs[8 * ib + 2 * l + 1] | (((b.qh[ib] >> (2 * l + 1)) & 1u) << 8);
    IqPoint(kIq3sGrid[i0] | static_cast<std::uint64_t>(kIq3sGrid[i1]) << 32, b.signs[4 * ib + l], o->v + 8 * l);
  }
  o->ls[0] = o->ls[1] = 1 + 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF);
}
// IQ1: 8 values 8g + delta_sign from an int8 grid point.
inline void Iq1Point(std::uint64_t point, int delta_sign, std::int8_t* v) {
  for (int k = 0; k < 8; ++k)
    v[k] = static_cast<std::int8_t>(8 * static_cast<std::int8_t>(point >> (8 * k)) + delta_sign);
}
inline void IqDecode(const BlockIQ1_S& b, int ib, IqSub* o) {
  const unsigned qh = b.qh[ib];
  for (int l = 0; l < 4; ++l) {
    Iq1Point(kIq1sGrid[b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8)], (qh & 0x8000) ? -1 : 1, o->v + 8 * l);
  }
  o->ls[0] = o->ls[1] = 2 * static_cast<int>((qh >> 12) & 7) + 1;
}
inline void IqDecode(const BlockIQ1_M& b, int ib, IqSub* o) {
  for (int l = 0; l < 4; ++l) {
    const unsigned nib = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 0xF;
    Iq1Point(kIq1sGrid[b.qs[4 * ib + l] | ((nib & 7u) << 8)], (nib & 8) ? -1 : 1, o->v + 8 * l);
  }
  o->ls[0] = 2 * IQ1MScale(b, 2 * ib) + 1;
  o->ls[1] = 2 * IQ1MScale(b, 2 * ib + 1) + 1;
}

// The block factor of the integer form, exact in fp32 (a power of two times d).
inline float IqFactor(const BlockIQ2_XXS& b) { return F16ToF32(b.d) * 0.125f; }
inline float IqFactor(const BlockIQ2_XS& b) { return F16ToF32(b.d) * 0.125f; }
inline float IqFactor(const BlockIQ2_S& b) { return F16ToF32(b.d) * 0.125f; }
inline float IqFactor(const BlockIQ3_XXS& b) { return F16ToF32(b.d) * 0.25f; }
inline float IqFactor(const BlockIQ3_S& b) { return F16ToF32(b.d); }
inline float IqFactor(const BlockIQ1_S& b) { return F16ToF32(b.d) * 0.125f; }
inline float IqFactor(const BlockIQ1_M& b) { return F16ToF32(IQ1MScaleBits(b)) * 0.125f; }

// Reference dequantization of nb blocks of an IQ grid type, element by
// element in the fp32 operation order of gguf.quants.dequantize (quant_iq.cc,
// defined for the seven blocks above; the dot kernels: kernels/scalar/iq.cc,
// kernels/avx2/iq.cc).
template <typename Block>
void DequantIq(const Block* b, float* y, std::int64_t nb);

}  // namespace detail
}  // namespace kvshare
