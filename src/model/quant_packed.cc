// Repacking of Q8_0 / Q4_0 / Q5_0 weights into 16-row interleaved groups
// (layout: quant_packed.h). Plain C++: the layout, not the packing, is
// target-specific.
#include "model/quant_packed.h"

#include <cstring>
#include <type_traits>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "kvshare/error.h"
#include "model/quant.h"

namespace kvshare::detail {
namespace {

std::size_t RoundUp64(std::size_t n) { return (n + 63) / 64 * 64; }

// bytes of memory for the packed arrays: 2 MiB aligned with transparent huge
// pages requested when large (a matrix streamed from DRAM on 4 KiB pages
// measured 20-40% slower: one page walk every 4 KiB), else 64-byte aligned.
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

// Writes group g's codes, high bits and scales for block type Block.
template <typename Block>
void PackGroup(const Block* w, std::int64_t g, std::int64_t nb, std::uint8_t* codes, std::uint64_t* high,
               std::uint16_t* scales) {
  constexpr bool kQ8 = std::is_same_v<Block, BlockQ8_0>;
  constexpr std::size_t kCodeBytes = PackedWeights::CodeBytes(kQ8 ? GgmlType::kQ8_0 : GgmlType::kQ4_0);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::size_t gb = static_cast<std::size_t>(g * nb + b);
    std::uint8_t* c = codes + gb * kCodeBytes;
    for (int t = 0; t < kPackRows; ++t) {
      const Block& blk = w[(g * kPackRows + t) * nb + b];
      scales[gb * kPackRows + static_cast<std::size_t>(t)] = blk.d;
      if constexpr (kQ8) {
        for (int k = 0; k < 8; ++k) {
          std::uint32_t word;
          std::memcpy(&word, blk.qs + 4 * k, 4);
          word ^= 0x80808080u;  // int8 value -> unsigned code (value + 128), byte by byte
          std::memcpy(c + 64 * k + 4 * t, &word, 4);
        }
      } else {
        for (int k = 0; k < 4; ++k) std::memcpy(c + 64 * k + 4 * t, blk.qs + 4 * k, 4);
      }
      if constexpr (std::is_same_v<Block, BlockQ5_0>) {
        std::uint32_t qh;
        std::memcpy(&qh, blk.qh, 4);
        for (int k = 0; k < 8; ++k) high[gb * 8 + static_cast<std::size_t>(k)] |= static_cast<std::uint64_t>((qh >> (4 * k)) & 0xFu) << (4 * t);
      }
    }
  }
}

}  // namespace

bool CanPack(GgmlType type, std::int64_t rows) {
  return (type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 || type == GgmlType::kQ5_0) && rows > 0 &&
         rows % kPackRows == 0;
}

std::shared_ptr<const PackedWeights> Pack(const void* data, GgmlType type, std::int64_t rows, std::int64_t nb) {
  if (!CanPack(type, rows) || nb <= 0 || data == nullptr) {
    throw Error("Pack: cannot repack " + GgmlTypeName(type) + " weights of " + std::to_string(rows) +
                " rows (expected Q8_0, Q4_0 or Q5_0 with a positive multiple of 16 rows)");
  }
  auto p = std::make_shared<PackedWeights>();
  p->type = type;
  p->rows = rows;
  p->nb = nb;
  const std::size_t blocks = static_cast<std::size_t>(rows / kPackRows * nb);
  const std::size_t code_bytes = RoundUp64(blocks * PackedWeights::CodeBytes(type));
  const std::size_t high_bytes = type == GgmlType::kQ5_0 ? RoundUp64(blocks * 8 * sizeof(std::uint64_t)) : 0;
  const std::size_t scale_bytes = RoundUp64(blocks * kPackRows * sizeof(std::uint16_t));
  void* mem = AllocatePacked(code_bytes + high_bytes + scale_bytes);
  if (mem == nullptr) throw Error("Pack: out of memory for " + std::to_string(code_bytes + high_bytes + scale_bytes) + " bytes");
  p->storage.reset(mem);
  auto* base = static_cast<std::uint8_t*>(mem);
  std::memset(base + code_bytes, 0, high_bytes);
  auto* codes = base;
  auto* high = high_bytes > 0 ? reinterpret_cast<std::uint64_t*>(base + code_bytes) : nullptr;
  auto* scales = reinterpret_cast<std::uint16_t*>(base + code_bytes + high_bytes);
  for (std::int64_t g = 0; g < rows / kPackRows; ++g) {
    switch (type) {
      case GgmlType::kQ8_0: PackGroup(static_cast<const BlockQ8_0*>(data), g, nb, codes, high, scales); break;
      case GgmlType::kQ4_0: PackGroup(static_cast<const BlockQ4_0*>(data), g, nb, codes, high, scales); break;
      default: PackGroup(static_cast<const BlockQ5_0*>(data), g, nb, codes, high, scales); break;
    }
  }
  p->codes = codes;
  p->high = high;
  p->scales = scales;
  return p;
}

}  // namespace kvshare::detail
