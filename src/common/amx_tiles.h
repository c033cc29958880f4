// The AMX tile configuration shared by the tile kernels: the int8 matmuls of
// src/quant/kernels/amx/ and the bf16 attention products of
// src/attention/amx_attend.cc. Compiled with the AMX files' flags only, and
// used only after AmxUsable (cpu_amx.h).
//
// The int8 matmuls multiply C[M][16] += A[M][K] * B[K][16] in int32 with
// tdpb{ss,su}d: A holds M = 16 activation rows, K bytes each; B holds 16
// weight rows in the packed layout's code vectors (K / 4 rows of 64 bytes:
// the 4 bytes of weight row t at bytes 4t .. 4t + 3), which is exactly the
// tiles' B layout (Intel SDM, "TDPBSSD"), decoded to int8 values; C row j is
// then what the AVX-512 kernels hold in one zmm (16 weight rows in the lanes)
// for activation row j.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvshare::detail {

// Activation rows per tile (the tiles' M; the last chunk of a call is padded
// with zero rows up to it).
inline constexpr int kTileRows = 16;

// The 64-byte operand of ldtilecfg (palette 1): per tile its rows and bytes
// per row.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// How many of a call's `acts` activation rows an int8 tile kernel takes: none
// below min_rows (where its tiles pay for a whole call); else its whole
// tiles of kTileRows, plus the last partial one when that one has min_tail
// rows or more (a tile product costs as much for 1 row as for 16, but the
// weights are already decoded). The AVX-512 kernels, bitwise the same
// outputs, take the rest.
inline int AmxTiledRows(int acts, int min_rows, int min_tail) {
  if (acts < min_rows) return 0;
  const int tail = acts % kTileRows;
  return tail != 0 && tail < min_tail ? acts - tail : acts;
}

// The lanes of 16 elements from column c that lie below column n: the
// AVX-512 mask (__mmask16) of the tile kernels' edge loads and stores.
inline std::uint16_t TailMask16(std::int64_t c, std::int64_t n) {
  return c + 16 <= n ? std::uint16_t{0xFFFF}
         : c >= n    ? std::uint16_t{0}
                     : static_cast<std::uint16_t>((1u << (n - c)) - 1);
}

// The int8 tile instructions with the tile numbers as template arguments
// and the memory each load reads and each store writes named to the
// compiler (kBytes contiguous bytes from p: rows * stride). The intrinsics
// take literal tile numbers only, name no memory for a load (a store to its
// source may then be moved after it) and clobber all memory for a store (so
// every value a kernel keeps in registers across it, such as its
// accumulators, goes to memory and back). AT&T operand order: tdp* B, A, C.
template <int kTile, std::size_t kBytes>
inline void TileLoad(const void* p, long stride) {
  asm volatile("tileloadd (%1,%2,1), %%tmm%c3" ::"m"(*reinterpret_cast<const char (*)[kBytes]>(p)), "r"(p),
               "r"(stride), "i"(kTile));
}
template <int kTile, std::size_t kBytes>
inline void TileStore(void* p, long stride) {
  asm volatile("tilestored %%tmm%c3, (%1,%2,1)"
               : "=m"(*reinterpret_cast<char (*)[kBytes]>(p))
               : "r"(p), "r"(stride), "i"(kTile));
}
template <int kTile>
inline void TileZero() {
  asm volatile("tilezero %%tmm%c0" ::"i"(kTile));
}
// C += A B over signed bytes (tdpbssd), and over signed A, unsigned B
// (tdpbsud).
template <int kC, int kA, int kB>
inline void TileDpbssd() {
  asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(kC), "i"(kA), "i"(kB));
}
template <int kC, int kA, int kB>
inline void TileDpbsud() {
  asm volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(kC), "i"(kA), "i"(kB));
}

// All 8 tiles of 16 rows of 64 bytes: the shape of every tile of the bf16
// products (attention, float weights) and of the K-quant / IQ int8 kernels.
const TileConfig& FullTiles();

// Loads `cfg` into this thread's tile configuration unless it is already
// the loaded one (ldtilecfg also zeroes every tile, so kernels of one shape
// do not pay it per call). The check reads the thread's tile state, so it
// holds whoever configured the tiles last (another kernel family, oneDNN).
void UseTiles(const TileConfig& cfg);

// The thread's tiles configured as cfg (UseTiles) for the scope of a kernel
// call, and released at its end (tilerelease: the tile state back to INIT),
// so that a thread holds no tile state between products: the OS then saves
// and restores no 8 KiB of tile data at its context switches (XSAVE skips
// state in INIT), and the core's AMX state ends with the product. Costs one
// ldtilecfg per call.
class TileScope {
 public:
  explicit TileScope(const TileConfig& cfg) { UseTiles(cfg); }
  ~TileScope();
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

}  // namespace kvshare::detail
