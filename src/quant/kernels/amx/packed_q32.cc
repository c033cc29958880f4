// AMX-INT8 kernel over packed Q8_0 / Q4_0 / Q5_0 / IQ4_NL / IQ4_XS / MXFP4
// weights (layout: packed.h), compiled with the AVX-512 flags plus
// -mamx-{tile,int8,bf16}; entered only when AmxUsable (cpu_amx.h).
//
// Per group of 16 weight rows the codes are decoded once per call into int8
// values (the AVX-512 kernel's unsigned codes minus their bias: LoadCodes of
// avx512/packed_q32_codes.h), 512 bytes per block in the tiles' B layout.
// Then 16 activation rows at a time: per block, tdpbssd of the rows' 32
// activation bytes (tile A: AmxStageQ8's layout, made once per MatMulMany
// chunk or per call) against the block's values (tile B, K = 32, the block
// size) gives each (activation row, weight row) its exact block sum p_b, the
// same int32 the AVX-512 kernel forms as -bias * sum x + sum code * x. Each
// block's sums stay separate (tile K is one block), and the scale step is
// the AVX-512 kernel's: y = fma(float(p_b), dw_b * dx_b, y) over the blocks
// in order, 16 weight rows in the lanes: the outputs are bitwise those of
// avx512/packed_q32.cc for every row count.
// Fewer than kAmxMinRows activation rows (decode steps), and a last partial
// tile of fewer than kAmxMinTail, go to that kernel (AmxTiledRows).
#include <immintrin.h>

#include <algorithm>

#include "common/amx_tiles.h"
#include "quant/kernels/avx512/packed_q32_codes.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"

namespace kvshare::detail {
namespace {

// Below this many activation rows the AVX-512 kernel runs (a tile product
// costs the same for 1 row as for 16).
constexpr int kAmxMinRows = 16;
// A last partial tile of fewer rows goes to the AVX-512 kernel too (2048 x
// 640 Q5_0, 1 thread, 3 alternating runs: m = 17 and 20 were 8% faster that
// way, m = 33 15%; m = 28, a tail of 12, 30% slower).
constexpr int kAmxMinTail = 6;

// Bytes of decoded values per block: 8 B-tile rows of 64.
constexpr std::size_t kBlockValues = 512;

// Tiles 0, 1: A (16 activation rows of one block, 32 bytes each) and 2, 3:
// B (a block's values, 8 rows of 64 bytes) of even and odd blocks; 4, 5:
// their C (16 rows of 16 int32).
const TileConfig& Q32Tiles() {
  static const TileConfig cfg = [] {
    TileConfig c;
    for (int t : {0, 1}) c.rows[t] = kTileRows, c.colsb[t] = 32;  // stride 32: AmxStageQ8
    for (int t : {2, 3}) c.rows[t] = 8, c.colsb[t] = 64;
    for (int t : {4, 5}) c.rows[t] = kTileRows, c.colsb[t] = 64;
    return c;
  }();
  return cfg;
}

// The group's nb blocks as int8 values into out (kBlockValues per block).
template <GgmlType kType>
void DecodeValues(const std::uint8_t* codes, const std::uint64_t* high, std::int64_t nb, std::int8_t* out) {
  constexpr std::size_t kCodeBytes = kType == GgmlType::kQ8_0 ? 512 : 256;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(Bias<kType>()));
  for (std::int64_t b = 0; b < nb; ++b) {
    PrefetchPackedAhead(codes + static_cast<std::size_t>(b) * kCodeBytes, kCodeBytes);
    __m512i c[8];
    LoadCodes<kType>(codes + static_cast<std::size_t>(b) * kCodeBytes, high != nullptr ? high + b * 8 : nullptr, c);
    for (int k = 0; k < 8; ++k)
      _mm512_store_si512(out + static_cast<std::size_t>(b) * kBlockValues + 64 * k, _mm512_sub_epi8(c[k], bias));
  }
}

// Block b's tile loads and product (tiles of even or odd blocks: kOdd), and
// the store of its sums.
template <int kOdd>
inline void BlockProduct(const std::int8_t* qs, const std::int8_t* values) {
  TileLoad<kOdd, kTileRows * 32>(qs, 32);
  TileLoad<2 + kOdd, kBlockValues>(values, 64);
  TileZero<4 + kOdd>();
  TileDpbssd<4 + kOdd, kOdd, 2 + kOdd>();
}
template <int kOdd>
inline void StoreSums(std::int32_t* c) {
  TileStore<4 + kOdd, kTileRows * 64>(c, 64);
}

// The AVX-512 kernel's scale step for block b of one chunk, from the block's
// int32 sums p: y = fma(float(p), dw * dx, y), 16 weight rows in the lanes.
template <GgmlType kType>
inline void ScaleBlock(const std::int32_t* p, const void* scales, std::int64_t b, const float* dx,
                       __m512 acc[kTileRows]) {
  const __m512 dw = BlockScales<kType>(scales, b);
#pragma GCC unroll 16
  for (int j = 0; j < kTileRows; ++j) {
    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(p + 16 * j)),
                             _mm512_mul_ps(dw, _mm512_set1_ps(dx[b * kTileRows + j])), acc[j]);
  }
}

// Blocks between a block's tile store and the vector loads of its sums.
constexpr int kScaleLag = 2;

// One chunk of 16 activation rows (qs, dx: AmxStageQ8) against one group's
// decoded values: y[j * ys + t] for the `rows` real rows j. Software-
// pipelined: the tile unit runs its instructions in order and tiles are not
// renamed, so block b + 1's product is issued before block b's sums are
// stored (the store waits for its product); the vector scale step of a block
// reads its sums kScaleLag blocks after their store, while the tile unit
// works.
template <GgmlType kType>
void TileRows(const std::int8_t* values, const void* scales, std::int64_t nb, const std::int8_t* qs,
              const float* dx, int rows, float* y, std::int64_t ys) {
  __m512 acc[kTileRows];
#pragma GCC unroll 16
  for (int j = 0; j < kTileRows; ++j) acc[j] = _mm512_setzero_ps();
  constexpr int kRing = kScaleLag + 2;
  alignas(64) std::int32_t c[kRing][kTileRows * 16];
  const auto product = [&](std::int64_t b) {
    const std::int8_t* v = values + static_cast<std::size_t>(b) * kBlockValues;
    const std::int8_t* a = qs + static_cast<std::size_t>(b) * kBlockValues;
    if (b % 2 == 0) {
      BlockProduct<0>(a, v);
    } else {
      BlockProduct<1>(a, v);
    }
  };
  product(0);
  for (std::int64_t b = 0; b < nb + kScaleLag; ++b) {
    if (b + 1 < nb) product(b + 1);
    if (b < nb) {
      if (b % 2 == 0) {
        StoreSums<0>(c[b % kRing]);
      } else {
        StoreSums<1>(c[b % kRing]);
      }
    }
    if (b >= kScaleLag) ScaleBlock<kType>(c[(b - kScaleLag) % kRing], scales, b - kScaleLag, dx, acc);
  }
  // Constant indices only, so that acc stays in registers.
#pragma GCC unroll 16
  for (int j = 0; j < kTileRows; ++j) {
    if (j < rows) _mm512_storeu_ps(y + j * ys, acc[j]);
  }
}

template <GgmlType kType>
void AmxRowsT(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8* x, std::int64_t xs, int acts,
              float* y, std::int64_t ys, const AmxStagedActs* staged) {
  const std::int64_t nb = w.nb;
  const TileScope tiles(Q32Tiles());
  thread_local AmxActStage own;
  const AmxStagedActs a = staged != nullptr ? *staged : AmxStageQ8(x, xs, nb, acts, own);
  auto* values = static_cast<std::int8_t*>(DecodedCodeScratch(static_cast<std::size_t>(8 * nb)));
  for (std::int64_t g = r0 / kPackRows; g < r1 / kPackRows; ++g) {
    const std::uint8_t* codes = w.codes + static_cast<std::size_t>(g * nb) * w.bytes.codes;
    const auto* high = w.high != nullptr ? reinterpret_cast<const std::uint64_t*>(w.high) + g * nb * 8 : nullptr;
    const void* d = kPackedFloatScales<kType> ? static_cast<const void*>(w.dsub + g * nb * kPackRows)
                                              : static_cast<const void*>(w.d + g * nb * kPackRows);
    DecodeValues<kType>(codes, high, nb, values);
    float* yg = y + (g * kPackRows - r0);
    for (int j0 = 0, i = 0; j0 < acts; j0 += kTileRows, ++i) {
      TileRows<kType>(values, d, nb, a.tiles + i * nb * static_cast<std::int64_t>(kBlockValues),
                      a.d + i * nb * kTileRows, std::min(kTileRows, acts - j0), yg + j0 * ys, ys);
    }
  }
}

}  // namespace

void AmxPackedRows(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const ActQ8* x, std::int64_t xs, int acts,
                   float* y, std::int64_t ys, const AmxStagedActs* staged) {
  const int tiled = AmxTiledRows(acts, kAmxMinRows, kAmxMinTail);
  if (tiled > 0) {
    switch (w.type) {
      case GgmlType::kQ8_0: AmxRowsT<GgmlType::kQ8_0>(w, r0, r1, x, xs, tiled, y, ys, staged); break;
      case GgmlType::kQ4_0: AmxRowsT<GgmlType::kQ4_0>(w, r0, r1, x, xs, tiled, y, ys, staged); break;
      case GgmlType::kIQ4_NL: AmxRowsT<GgmlType::kIQ4_NL>(w, r0, r1, x, xs, tiled, y, ys, staged); break;
      case GgmlType::kIQ4_XS: AmxRowsT<GgmlType::kIQ4_XS>(w, r0, r1, x, xs, tiled, y, ys, staged); break;
      case GgmlType::kMXFP4: AmxRowsT<GgmlType::kMXFP4>(w, r0, r1, x, xs, tiled, y, ys, staged); break;
      default: AmxRowsT<GgmlType::kQ5_0>(w, r0, r1, x, xs, tiled, y, ys, staged); break;
    }
  }
  if (tiled < acts) Avx512PackedRows(w, r0, r1, x + tiled * xs, xs, acts - tiled, y + tiled * ys, ys, nullptr);
}

}  // namespace kvshare::detail
