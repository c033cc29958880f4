// Repacking into 16-row interleaved groups (layout: packed.h). Plain
// C++: the layout, not the packing, is target-specific.
#include "quant/kernels/packed.h"

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "kvshare/common/error.h"
#include "quant/quant.h"
#include "quant/weight_types.h"

namespace kvshare::detail {
namespace {

std::size_t RoundUp64(std::size_t n) { return (n + 63) / 64 * 64; }

// Memory for the planes: 2 MiB aligned with transparent huge pages requested
// when large (a matrix streamed from DRAM on 4 KiB pages measured 20-40%
// slower: one page walk every 4 KiB), else 64-byte aligned.
void* AllocatePacked(std::size_t bytes) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  if (bytes < kHuge) return std::aligned_alloc(64, RoundUp64(bytes));
  const std::size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
#if defined(__linux__)
  if (p != nullptr) madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}

// Where block (group g, block b) of each plane starts.
struct Dest {
  std::uint8_t *codes, *high, *subs, *mins, *d, *dmin, *dsub;
};

// Row t of the group's block blk into the planes at dst.
void PackRow(const BlockQ8_0& blk, int t, const Dest& dst) {
  for (int k = 0; k < 8; ++k) {
    std::uint32_t word;
    std::memcpy(&word, blk.qs + 4 * k, 4);
    word ^= 0x80808080u;  // int8 value -> unsigned code (value + 128), byte by byte
    std::memcpy(dst.codes + 64 * k + 4 * t, &word, 4);
  }
  std::memcpy(dst.d + 2 * t, &blk.d, 2);
}

// Q4_0, and IQ4_NL in Q4_0's layout (the kernels map its nibbles through the
// IQ4 grid).
template <typename Block>
requires std::is_same_v<Block, BlockQ4_0> || std::is_same_v<Block, BlockIQ4_NL>
void PackRow(const Block& blk, int t, const Dest& dst) {
  for (int k = 0; k < 4; ++k) std::memcpy(dst.codes + 64 * k + 4 * t, blk.qs + 4 * k, 4);
  std::memcpy(dst.d + 2 * t, &blk.d, 2);
}

// MXFP4: Q4_0's code layout (nibbles index its E2M1 grid), the E8M0 scale
// as fp32 in dsub (exact: a power of two).
void PackRow(const BlockMXFP4& blk, int t, const Dest& dst) {
  for (int k = 0; k < 4; ++k) std::memcpy(dst.codes + 64 * k + 4 * t, blk.qs + 4 * k, 4);
  const float s = Mxfp4Scale(blk.e);
  std::memcpy(dst.dsub + 4 * t, &s, 4);
}

void PackRow(const BlockQ5_0& blk, int t, const Dest& dst) {
  for (int k = 0; k < 4; ++k) std::memcpy(dst.codes + 64 * k + 4 * t, blk.qs + 4 * k, 4);
  std::uint32_t qh;
  std::memcpy(&qh, blk.qh, 4);
  for (int k = 0; k < 8; ++k) {
    std::uint64_t mask;
    std::memcpy(&mask, dst.high + 8 * k, 8);
    mask |= static_cast<std::uint64_t>((qh >> (4 * k)) & 0xFu) << (4 * t);
    std::memcpy(dst.high + 8 * k, &mask, 8);
  }
  std::memcpy(dst.d + 2 * t, &blk.d, 2);
}

void PackRow(const BlockQ4_K& blk, int t, const Dest& dst) {
  for (int k = 0; k < 32; ++k) std::memcpy(dst.codes + 64 * k + 4 * t, blk.qs + 4 * k, 4);
  for (int j = 0; j < 8; ++j) {
    std::uint8_t sc, m;
    Q4KScaleMin(j, blk.scales, &sc, &m);
    dst.subs[16 * j + t] = sc;
    dst.mins[32 * (j / 2) + 2 * t + j % 2] = m;
  }
  std::memcpy(dst.d + 2 * t, &blk.d, 2);
  std::memcpy(dst.dmin + 2 * t, &blk.dmin, 2);
}

void PackRow(const BlockQ6_K& blk, int t, const Dest& dst) {
  std::uint8_t code[256];  // value + 32, element order
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      code[128 * n + l] = static_cast<std::uint8_t>(Q6KCode(blk, n, 0, l));
      code[128 * n + 32 + l] = static_cast<std::uint8_t>(Q6KCode(blk, n, 1, l));
      code[128 * n + 64 + l] = static_cast<std::uint8_t>(Q6KCode(blk, n, 2, l));
      code[128 * n + 96 + l] = static_cast<std::uint8_t>(Q6KCode(blk, n, 3, l));
    }
  }
  for (int k = 0; k < 32; ++k) {
    for (int i = 0; i < 4; ++i) {
      dst.codes[64 * k + 4 * t + i] =
          static_cast<std::uint8_t>((code[4 * k + i] & 0xF) | (code[4 * (k + 32) + i] & 0xF) << 4);
    }
  }
  for (int k = 0; k < 16; ++k) {
    for (int i = 0; i < 4; ++i) {
      int bits = 0;
      for (int q = 0; q < 4; ++q) bits |= (code[4 * (k + 16 * q) + i] >> 4) << (2 * q);
      dst.high[64 * k + 4 * t + i] = static_cast<std::uint8_t>(bits);
    }
  }
  for (int g = 0; g < 16; ++g) dst.subs[16 * g + t] = static_cast<std::uint8_t>(blk.scales[g]);
  std::memcpy(dst.d + 2 * t, &blk.d, 2);
}

// Q2_K / Q3_K: the 2-bit codes of element e sit at bits 2j of qs[32n + l]
// (e = 128n + 32j + l). Codes plane vector k (k < 16): bits 2Q .. 2Q + 1 of
// byte 4t + i hold the code of element 4 (k + 16Q) + i of row t (Q < 4).
void PackQ2Codes(const std::uint8_t* qs, int t, const Dest& dst) {
  for (int e = 0; e < 256; ++e) {
    const int code = (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    const int k4 = e / 4;  // 4-element group, 0..63
    dst.codes[64 * (k4 % 16) + 4 * t + e % 4] |= static_cast<std::uint8_t>(code << (2 * (k4 / 16)));
  }
}

void PackRow(const BlockQ2_K& blk, int t, const Dest& dst) {
  PackQ2Codes(blk.qs, t, dst);
  for (int g = 0; g < 16; ++g) dst.subs[16 * g + t] = blk.scales[g];  // scale | min << 4, as stored
  std::memcpy(dst.d + 2 * t, &blk.d, 2);
  std::memcpy(dst.dmin + 2 * t, &blk.dmin, 2);
}

// Q3_K: the codes plane as Q2_K's; high plane vector k (k < 8): bit Q of
// byte 4t + i = the high bit of element 4 (k + 8Q) + i (Q < 8); subs: the
// signed scales sc_g - 32.
void PackRow(const BlockQ3_K& blk, int t, const Dest& dst) {
  PackQ2Codes(blk.qs, t, dst);
  for (int e = 0; e < 256; ++e) {
    const int hbit = (blk.hmask[e % 32] >> (e / 32)) & 1;  // bit 4n + j of hmask[l]
    const int k4 = e / 4;
    dst.high[64 * (k4 % 8) + 4 * t + e % 4] |= static_cast<std::uint8_t>(hbit << (k4 / 8));
  }
  for (int g = 0; g < 16; ++g) dst.subs[16 * g + t] = static_cast<std::uint8_t>(Q3KScale(g, blk.scales) - 32);
  std::memcpy(dst.d + 2 * t, &blk.d, 2);
}

// Block gb's place in each plane.
Dest At(std::uint8_t* const plane[kPackPlanes], const PlaneBytes& pb, std::size_t gb) {
  const std::size_t bytes[kPackPlanes] = {pb.codes, pb.high, pb.subs, pb.mins, pb.d, pb.dmin, pb.dsub};
  std::uint8_t* at[kPackPlanes];
  for (int i = 0; i < kPackPlanes; ++i) at[i] = plane[i] != nullptr ? plane[i] + gb * bytes[i] : nullptr;
  return {at[0], at[1], at[2], at[3], at[4], at[5], at[6]};
}

}  // namespace

// Every group of rows into the planes (codes, high, subs, mins, d, dmin,
// dsub; null where the type has none), through the block's PackRow above.
template <typename Block>
void PackRows(const Block* w, std::int64_t rows, std::int64_t nb, std::int64_t sub, const PlaneBytes& pb,
              std::uint8_t* const plane[kPackPlanes]) {
  for (std::int64_t g = 0; g < rows / kPackRows; ++g) {
    for (std::int64_t b = 0; b < nb; ++b) {
      const Dest dst = At(plane, pb, static_cast<std::size_t>((g * nb + b) * sub));
      for (int t = 0; t < kPackRows; ++t) PackRow(w[(g * kPackRows + t) * nb + b], t, dst);
    }
  }
}
// IQ4_XS: sub-block ib of super-block b as packed block 8b + ib (IQ4_NL's
// codes, the fp32 sub-block scale); sub is 8.
template <>
void PackRows(const BlockIQ4_XS* w, std::int64_t rows, std::int64_t nb, std::int64_t sub, const PlaneBytes& pb,
              std::uint8_t* const plane[kPackPlanes]) {
  for (std::int64_t g = 0; g < rows / kPackRows; ++g) {
    for (std::int64_t b = 0; b < nb; ++b) {
      for (int ib = 0; ib < sub; ++ib) {
        const Dest dst = At(plane, pb, static_cast<std::size_t>((g * nb + b) * sub + ib));
        for (int t = 0; t < kPackRows; ++t) {
          const BlockIQ4_XS& blk = w[(g * kPackRows + t) * nb + b];
          for (int k = 0; k < 4; ++k) std::memcpy(dst.codes + 64 * k + 4 * t, blk.qs + 16 * ib + 4 * k, 4);
          const float s = IQ4XSSubScale(ib, blk);
          std::memcpy(dst.dsub + 4 * t, &s, 4);
        }
      }
    }
  }
}

#define KVSHARE_PACK_ROWS(Block)                                                                    \
  template void PackRows(const Block*, std::int64_t, std::int64_t, std::int64_t, const PlaneBytes&, \
                         std::uint8_t* const[kPackPlanes]);
KVSHARE_PACK_ROWS(BlockQ8_0)
KVSHARE_PACK_ROWS(BlockQ4_0)
KVSHARE_PACK_ROWS(BlockQ5_0)
KVSHARE_PACK_ROWS(BlockIQ4_NL)
KVSHARE_PACK_ROWS(BlockMXFP4)
KVSHARE_PACK_ROWS(BlockQ2_K)
KVSHARE_PACK_ROWS(BlockQ3_K)
KVSHARE_PACK_ROWS(BlockQ4_K)
KVSHARE_PACK_ROWS(BlockQ6_K)
#undef KVSHARE_PACK_ROWS

void* DecodedCodeScratch(std::size_t vectors) {
  struct alignas(64) CodeVector {
    std::uint8_t bytes[64];
  };
  thread_local std::vector<CodeVector> scratch;
  if (scratch.size() < vectors) scratch.resize(vectors);
  return scratch.data();
}

bool CanPack(GgmlType type, std::int64_t rows) {
  const WeightTypeTraits* tr = FindWeightType(type);
  return tr != nullptr && tr->Packable() && rows > 0 && rows % kPackRows == 0;
}

std::shared_ptr<const PackedWeights> Pack(const void* data, GgmlType type, std::int64_t rows, std::int64_t nb) {
  if (!CanPack(type, rows) || nb <= 0 || data == nullptr) {
    throw Error("Pack: cannot repack " + GgmlTypeName(type) + " weights of " + std::to_string(rows) + " rows and " +
                std::to_string(nb) + " blocks (expected " + PackableWeightTypesString() +
                " data with a positive multiple of " + std::to_string(kPackRows) + " rows)");
  }
  const WeightTypeTraits& tr = *FindWeightType(type);
  auto p = std::make_shared<PackedWeights>();
  p->type = type;
  p->rows = rows;
  p->nb = nb * tr.act_blocks;  // the packed kernels take one activation block per packed block
  p->bytes = tr.packing.planes;
  const auto blocks = static_cast<std::size_t>(rows / kPackRows * p->nb);
  const PlaneBytes& pb = p->bytes;
  const std::size_t sizes[kPackPlanes] = {RoundUp64(blocks * pb.codes), RoundUp64(blocks * pb.high),
                                          RoundUp64(blocks * pb.subs),  RoundUp64(blocks * pb.mins),
                                          RoundUp64(blocks * pb.d),     RoundUp64(blocks * pb.dmin),
                                          RoundUp64(blocks * pb.dsub)};
  std::size_t total = 0;
  for (std::size_t s : sizes) total += s;
  void* mem = AllocatePacked(total);
  if (mem == nullptr) throw Error("Pack: out of memory for " + std::to_string(total) + " bytes of packed weights");
  p->storage.reset(mem);
  auto* at = static_cast<std::uint8_t*>(mem);
  std::memset(at, 0, total);  // the Q5_0 masks and the Q2_K / Q3_K bits are or-ed in
  std::uint8_t* plane[kPackPlanes];
  for (int i = 0; i < kPackPlanes; ++i) {
    plane[i] = sizes[i] > 0 ? at : nullptr;
    at += sizes[i];
  }
  p->codes = plane[0];
  p->high = plane[1];
  p->subs = plane[2];
  p->mins = plane[3];
  p->d = reinterpret_cast<const std::uint16_t*>(plane[4]);
  p->dmin = reinterpret_cast<const std::uint16_t*>(plane[5]);
  p->dsub = reinterpret_cast<const float*>(plane[6]);
  tr.packing.pack(data, rows, nb, tr.act_blocks, pb, plane);
  return p;
}

}  // namespace kvshare::detail
