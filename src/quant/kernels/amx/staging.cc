// Activation rows laid out for the AMX level's tile kernels (dispatch.h:
// AmxStagedActs), once per MatMulMany chunk or, where a kernel is called
// without it, once per call. Compiled with the AMX files' flags (only the
// AVX-512 ones are used here).
#include <immintrin.h>

#include <cstring>

#include "common/amx_tiles.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/x86.h"

namespace kvshare::detail {
namespace {

int Chunks(int acts) { return (acts + kTileRows - 1) / kTileRows; }

}  // namespace

// The 32-element kernel's tile A of block b and chunk i: 512 contiguous
// bytes, no row across a cache line (read in place, ActQ8's 40-byte rows put
// some of them across two).
AmxStagedActs AmxStageQ8(const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts, AmxActStage& stage) {
  const int chunks = Chunks(acts);
  stage.tiles.resize(static_cast<std::size_t>(chunks * nb * 8));  // 512 bytes a block and chunk
  stage.d.assign(static_cast<std::size_t>(chunks * nb * kTileRows), 0.0f);
  auto* q = reinterpret_cast<std::int8_t*>(stage.tiles.data());
  for (int i = 0; i < chunks; ++i) {
    for (std::int64_t b = 0; b < nb; ++b) {
      std::int8_t* at = q + (i * nb + b) * 512;
      for (int j = 0; j < kTileRows; ++j) {
        const int row = i * kTileRows + j;
        if (row < acts) {
          std::memcpy(at + 32 * j, x[row * xs + b].qs, 32);
          stage.d[static_cast<std::size_t>((i * nb + b) * kTileRows + j)] = x[row * xs + b].d;
        } else {
          std::memset(at + 32 * j, 0, 32);
        }
      }
    }
  }
  return {.tiles = q, .d = stage.d.data(), .pairs = nullptr, .rows = acts};
}

// The K-quant kernels' tile A: per block and chunk, K-step q's 16 rows of
// 64 bytes contiguous. Read in place (rows 292 bytes apart, each across two
// cache lines) the A loads took about twice as long as the 8 tile products
// they feed (a tile loop on this host, per 16-row chunk: A in place 150-180
// ns, A from 64-byte rows 72-81 ns, the products alone 57-94 ns). The
// epilogue's scales and sum pairs dense by (block, row) beside them.
AmxStagedActs AmxStageQ8K(const ActQ8K* x, std::int64_t xs, std::int64_t nb, int acts, AmxActStage& stage) {
  const int chunks = Chunks(acts);
  stage.tiles.resize(static_cast<std::size_t>(nb * chunks * 4 * kTileRows));
  stage.d.resize(static_cast<std::size_t>(nb * acts));
  stage.pairs.resize(static_cast<std::size_t>(nb * acts * 4));
  AmxActStage::Line* out = stage.tiles.data();
  for (std::int64_t b = 0; b < nb; ++b) {
    for (int j0 = 0; j0 < chunks * kTileRows; j0 += kTileRows, out += 4 * kTileRows) {
      for (int r = 0; r < kTileRows; ++r) {
        const int j = j0 + r;
        for (int q = 0; q < 4; ++q) {
          const __m512i v = j < acts ? _mm512_loadu_si512(x[j * xs + b].qs + 64 * q) : _mm512_setzero_si512();
          _mm512_store_si512(out + q * kTileRows + r, v);
        }
      }
    }
    for (int j = 0; j < acts; ++j) {
      const ActQ8K& a = x[j * xs + b];
      stage.d[static_cast<std::size_t>(b * acts + j)] = a.d;
      for (int q = 0; q < 4; ++q) stage.pairs[static_cast<std::size_t>((b * acts + j) * 4 + q)] = SubBlockSumPair(a, q);
    }
  }
  return {.tiles = stage.tiles.data()->bytes, .d = stage.d.data(), .pairs = stage.pairs.data(), .rows = acts};
}

}  // namespace kvshare::detail
