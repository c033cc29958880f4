// The AMX tile configuration and the activation padding the tile kernels of
// kernels/amx/ share. Compiled with the AMX files' flags only; in an
// anonymous namespace as x86.h.
//
// A tile kernel multiplies C[M][16] += A[M][K] * B[K][16] in int32 with
// tdpb{ss,su}d: A holds M = 16 activation rows, K bytes each, loaded straight
// from the quantized activations (ActQ8 / ActQ8K) with the activation row
// stride; B holds 16 weight rows in the packed layout's code vectors (K / 4
// rows of 64 bytes: the 4 bytes of weight row t at bytes 4t .. 4t + 3), which
// is exactly the tiles' B layout (Intel SDM, "TDPBSSD"), decoded to int8
// values; C row j is then what the AVX-512 kernels hold in one zmm (16
// weight rows in the lanes) for activation row j.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace kvshare::detail {
namespace {

// Activation rows per tile (the tiles' M; the last chunk of a call is padded
// with zero rows up to it).
constexpr int kTileRows = 16;

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

// Loads `cfg` into this thread's tile configuration unless it is already the
// one loaded (ldtilecfg also zeroes every tile, so kernels of one shape do
// not pay it per call). Each kernel family keeps one configuration for all
// its calls.
inline void UseTiles(const TileConfig& cfg) {
  thread_local TileConfig loaded{.palette = 0};
  if (std::memcmp(&loaded, &cfg, sizeof cfg) == 0) return;
  _tile_loadconfig(&cfg);
  loaded = cfg;
}

// Where the tile kernels read activation rows [j0, j0 + kTileRows) of a
// call's acts rows (x, row stride xs, nb blocks a row): straight from x for
// whole chunks, and for the last chunk, when acts is not a multiple of
// kTileRows, from a zero-padded copy made once per call (a zero row's
// products are zero; its outputs are not stored).
template <typename Act>
class ActTiles {
 public:
  ActTiles(const Act* x, std::int64_t xs, std::int64_t nb, int acts) : x_(x), xs_(xs), nb_(nb) {
    tail_ = acts / kTileRows * kTileRows;
    if (tail_ == acts) return;
    thread_local std::vector<Act> pad;
    pad.assign(static_cast<std::size_t>(kTileRows * nb), Act{});
    for (int j = tail_; j < acts; ++j)
      std::memcpy(pad.data() + (j - tail_) * nb, x + j * xs, static_cast<std::size_t>(nb) * sizeof(Act));
    pad_ = pad.data();
  }
  // Row j0's blocks (j0 a multiple of kTileRows); *stride: blocks between rows.
  const Act* Rows(int j0, std::int64_t* stride) const {
    if (j0 < tail_ || pad_ == nullptr) {
      *stride = xs_;
      return x_ + j0 * xs_;
    }
    *stride = nb_;
    return pad_;
  }

 private:
  const Act* x_;
  std::int64_t xs_, nb_;
  int tail_ = 0;
  const Act* pad_ = nullptr;
};

}  // namespace
}  // namespace kvshare::detail
