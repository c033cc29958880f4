// The lattice grids of ggml's IQ1 / IQ2 / IQ3 weight types (iq_grids.cc,
// generated from the PyPI `gguf` package's tables): one grid point per
// integer, element k in byte k.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace kvshare::detail {

extern const std::uint64_t kIq2xxsGrid[256];  // magnitudes 8, 25, 43
extern const std::uint64_t kIq2xsGrid[512];   // magnitudes 8, 25, 43
extern const std::uint64_t kIq2sGrid[1024];   // magnitudes 8, 25, 43
extern const std::uint32_t kIq3xxsGrid[256];  // magnitudes 4, 12, ..., 62
extern const std::uint32_t kIq3sGrid[512];    // magnitudes 1, 3, ..., 15
extern const std::uint64_t kIq1sGrid[2048];   // int8 values -1, 0, 1 (IQ1_S and IQ1_M)

// ggml's ksigns_iq2xs: a 7-bit sign index i stands for the 8 sign bits
// i | parity(i) << 7 (an even count of minus signs).
inline constexpr std::array<std::uint8_t, 128> kIq2SignTable = [] {
  std::array<std::uint8_t, 128> t{};
  for (unsigned i = 0; i < 128; ++i) t[i] = static_cast<std::uint8_t>(i | ((std::popcount(i) & 1) << 7));
  return t;
}();
constexpr std::uint8_t Iq2Signs(unsigned i) { return kIq2SignTable[i & 127]; }

}  // namespace kvshare::detail
