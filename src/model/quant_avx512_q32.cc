// AVX-512 VNNI kernels for the 32-element block types Q8_0 / Q4_0 / Q5_0,
// compiled with -mavx512{f,bw,vl,vnni} (256-bit VNNI forms; entered only when
// the CPU reports those features, quant_matmul.cc).
//
// Every output is defined by one arithmetic, whichever kernel computes it:
//   y = 0; for each block b in order: y = fma(float(p_b), dw_b * dx_b, y)
// with p_b the exact int32 dot product of the block's weight values with the
// activation's int8 values, dw_b the weight block's fp16 scale and dx_b the
// activation block's scale (fp32 multiply, then fp32 fused multiply-add). So a
// row's result is bitwise the same in any group of activation rows.
//
// p_b comes from vpdpbusd (u8 x s8 -> int32) with the weight codes as the
// unsigned operand, c = value + bias (Q8_0: the int8 with its sign bit
// flipped, bias 128; Q5_0: the 5-bit code, bias 16; Q4_0: the nibble, bias 8)
// and the activations as the signed one: sum c x = p_b + bias * sum x, and
// sum x is the activation's own (ActQ8::sum), so the correction costs nothing
// per weight row.
//
// Two layouts:
//  - Lanes (4 activation rows or more): the lanes of a 256-bit register are 8
//    activation rows (padded with zero rows); each 4-byte group of a weight
//    block's codes is broadcast against the 8 rows' matching 4 bytes, so a
//    block of one weight row against 8 activation rows takes 8 vpdpbusd and
//    one scale step, with no horizontal sums. Weight codes are decoded once per
//    tile of 4 weight rows for all the call's activation rows.
//  - Rows (1 to 3 activation rows): the lanes are 8 weight rows; each row's
//    block dot product is one vpdpbusd, and 8 of them are summed across lanes
//    into one register of 8 p_b.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "model/quant_kernels.h"
#include "model/quant_x86.h"

namespace kvshare::detail {
namespace {

// Unsigned codes c (32 bytes, element order) and bias of one block.
template <typename Block>
struct Codes;

template <>
struct Codes<BlockQ8_0> {
  static constexpr int kBias = 128;
  static __m256i Get(const BlockQ8_0& b) { return _mm256_xor_si256(Load32(b.qs), _mm256_set1_epi8(static_cast<char>(0x80))); }
};

template <>
struct Codes<BlockQ4_0> {
  static constexpr int kBias = 8;
  static __m256i Get(const BlockQ4_0& b) { return Nibbles(b.qs); }
};

template <>
struct Codes<BlockQ5_0> {
  static constexpr int kBias = 16;
  static __m256i Get(const BlockQ5_0& b) { return FiveBitCodes(b.qh, b.qs); }
};

struct alignas(32) Vec32 {
  std::uint8_t bytes[32];
};

inline __m256i LoadV(const Vec32& v) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(&v)); }
inline __m256 LoadF(const Vec32& v) { return _mm256_load_ps(reinterpret_cast<const float*>(&v)); }

// ---- Lanes layout -----------------------------------------------------------

constexpr int kLanes = 8;  // activation rows per 256-bit register
constexpr int kTile = 4;   // weight rows per decoded tile

// The activation rows of one call in groups of kLanes, per group g and block
// b: x[(g nb + b) 8 + k] holds bytes 4k .. 4k+3 of each row's block in lane j
// (row 8g + j), init[g nb + b] = -bias sum x per lane, d[g nb + b] = dx per
// lane. Rows past `acts` are zero (their outputs are not stored).
struct LaneActs {
  std::vector<Vec32> x, init, d;
};

void MakeLaneActs(const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts, int bias, LaneActs& out) {
  const std::int64_t groups = (acts + kLanes - 1) / kLanes;
  out.x.assign(static_cast<std::size_t>(groups * nb * 8), Vec32{});
  out.init.assign(static_cast<std::size_t>(groups * nb), Vec32{});
  out.d.assign(out.init.size(), Vec32{});
  for (int j = 0; j < acts; ++j) {
    const std::int64_t g = j / kLanes, lane = j % kLanes;
    for (std::int64_t b = 0; b < nb; ++b) {
      const ActQ8& a = x[j * xs + b];
      const std::size_t gb = static_cast<std::size_t>(g * nb + b);
      for (int k = 0; k < 8; ++k) std::memcpy(out.x[gb * 8 + static_cast<std::size_t>(k)].bytes + 4 * lane, a.qs + 4 * k, 4);
      const std::int32_t init = -bias * a.sum;
      std::memcpy(out.init[gb].bytes + 4 * lane, &init, 4);
      std::memcpy(out.d[gb].bytes + 4 * lane, &a.d, 4);
    }
  }
}

// T weight rows (decoded codes c[t nb + b], scales dw[t nb + b]) against one
// group of 8 activation rows; out[t] = the 8 rows' results for weight row t.
template <int T>
void LaneTile(const Vec32* c, const float* dw, const LaneActs& a, std::int64_t g, std::int64_t nb, __m256 out[T]) {
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const Vec32* xg = a.x.data() + g * nb * 8;
  for (std::int64_t b = 0; b < nb; ++b) {
    __m256i xk[8];
    for (int k = 0; k < 8; ++k) xk[k] = LoadV(xg[b * 8 + k]);
    const __m256i init = LoadV(a.init[static_cast<std::size_t>(g * nb + b)]);
    const __m256 dx = LoadF(a.d[static_cast<std::size_t>(g * nb + b)]);
    for (int t = 0; t < T; ++t) {
      const std::uint8_t* ct = c[t * nb + b].bytes;
      __m256i p = init;
      for (int k = 0; k < 8; ++k) {
        std::int32_t word;
        std::memcpy(&word, ct + 4 * k, 4);
        p = _mm256_dpbusd_epi32(p, _mm256_set1_epi32(word), xk[k]);
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(_mm256_set1_ps(dw[t * nb + b]), dx), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = acc[t];
}

template <typename Block, int T>
void LaneRows(const Block* w, std::int64_t r0, const LaneActs& a, std::int64_t nb, int acts, float* y, std::int64_t ys,
              std::vector<Vec32>& c, std::vector<float>& dw) {
  for (int t = 0; t < T; ++t) {
    for (std::int64_t b = 0; b < nb; ++b) {
      const Block& blk = w[(r0 + t) * nb + b];
      _mm256_store_si256(reinterpret_cast<__m256i*>(&c[static_cast<std::size_t>(t * nb + b)]), Codes<Block>::Get(blk));
      dw[static_cast<std::size_t>(t * nb + b)] = H2F(blk.d);
    }
  }
  for (std::int64_t g = 0; g * kLanes < acts; ++g) {
    __m256 out[T];
    LaneTile<T>(c.data(), dw.data(), a, g, nb, out);
    const int lanes = std::min<int>(kLanes, acts - static_cast<int>(g) * kLanes);
    for (int t = 0; t < T; ++t) {
      alignas(32) float v[kLanes];
      _mm256_store_ps(v, out[t]);
      for (int j = 0; j < lanes; ++j) y[(g * kLanes + j) * ys + r0 + t] = v[j];
    }
  }
}

template <typename Block>
void LaneKernel(const Block* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts, float* y,
                std::int64_t ys) {
  thread_local LaneActs a;
  thread_local std::vector<Vec32> c;
  thread_local std::vector<float> dw;
  MakeLaneActs(x, xs, nb, acts, Codes<Block>::kBias, a);
  c.resize(static_cast<std::size_t>(kTile * nb));
  dw.resize(c.size());
  std::int64_t r = 0;
  for (; r + kTile <= nrows; r += kTile) LaneRows<Block, kTile>(w, r, a, nb, acts, y, ys, c, dw);
  switch (nrows - r) {
    case 1: LaneRows<Block, 1>(w, r, a, nb, acts, y, ys, c, dw); break;
    case 2: LaneRows<Block, 2>(w, r, a, nb, acts, y, ys, c, dw); break;
    case 3: LaneRows<Block, 3>(w, r, a, nb, acts, y, ys, c, dw); break;
    default: break;
  }
  static_assert(kTile == 4);
}

// ---- Rows layout ------------------------------------------------------------

// Lane t = the sum of v[t]'s 8 lanes.
inline __m256i SumLanes8(const __m256i v[8]) {
  const __m256i h0 = _mm256_hadd_epi32(v[0], v[1]), h1 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h2 = _mm256_hadd_epi32(v[4], v[5]), h3 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i g0 = _mm256_hadd_epi32(h0, h1), g1 = _mm256_hadd_epi32(h2, h3);
  return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
}

// Weight rows r0 .. r0 + 7 (row t at rows[t]; rows past the matrix repeat the
// last one and are not stored) against R activation rows.
template <int R, typename Block>
void RowsTile(const Block* const rows[8], int valid, std::int64_t r0, const ActQ8* x, std::int64_t xs, std::int64_t nb,
              float* y, std::int64_t ys) {
  // Byte offsets of the rows from rows[0]: the 8 block scales in one gather.
  alignas(32) std::int32_t off[8];
  for (int t = 0; t < 8; ++t) {
    off[t] = static_cast<std::int32_t>(reinterpret_cast<const char*>(rows[t]) - reinterpret_cast<const char*>(rows[0]));
  }
  const __m256i offsets = _mm256_load_si256(reinterpret_cast<const __m256i*>(off));
  __m256 acc[R];
  for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    __m256i c[8];
    for (int t = 0; t < 8; ++t) c[t] = Codes<Block>::Get(rows[t][b]);
    const __m256i dbits = _mm256_i32gather_epi32(reinterpret_cast<const int*>(rows[0] + b), offsets, 1);  // d in the low half
    const __m256 dw = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(dbits));
    for (int j = 0; j < R; ++j) {
      const ActQ8& a = x[j * xs + b];
      const __m256i xv = Load32(a.qs);
      __m256i v[8];
      for (int t = 0; t < 8; ++t) v[t] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), c[t], xv);
      const __m256i p = _mm256_sub_epi32(SumLanes8(v), _mm256_set1_epi32(Codes<Block>::kBias * a.sum));
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dw, _mm256_set1_ps(a.d)), acc[j]);
    }
  }
  for (int j = 0; j < R; ++j) {
    alignas(32) float v[8];
    _mm256_store_ps(v, acc[j]);
    for (int t = 0; t < valid; ++t) y[j * ys + r0 + t] = v[t];
  }
}

template <int R, typename Block>
void RowsKernelR(const Block* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, float* y,
                 std::int64_t ys) {
  // A tile reads its 8 rows block by block, 8 interleaved streams the hardware
  // prefetchers follow poorly from DRAM (the LM head at m = 1 ran at a quarter
  // of the bandwidth): the tile kPrefetchTiles ahead is prefetched whole.
  constexpr std::int64_t kPrefetchTiles = 2;
  const char* base = reinterpret_cast<const char*>(w);
  const std::int64_t row_bytes = nb * static_cast<std::int64_t>(sizeof(Block)), total = nrows * row_bytes;
  for (std::int64_t r0 = 0; r0 < nrows; r0 += 8) {
    const std::int64_t ahead = (r0 + 8 * kPrefetchTiles) * row_bytes;
    const std::int64_t ahead_end = std::min(total, ahead + 8 * row_bytes);
    for (std::int64_t o = ahead; o < ahead_end; o += 64) _mm_prefetch(base + o, _MM_HINT_T0);
    const int valid = static_cast<int>(std::min<std::int64_t>(8, nrows - r0));
    const Block* rows[8];
    for (int t = 0; t < 8; ++t) rows[t] = w + (r0 + std::min(t, valid - 1)) * nb;
    RowsTile<R, Block>(rows, valid, r0, x, xs, nb, y, ys);
  }
}

// The DotRowsFn: lanes from 4 activation rows on, rows below.
template <typename Block>
void Q32Rows(const Block* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts, float* y,
             std::int64_t ys) {
  if (acts >= 4) {
    LaneKernel<Block>(w, nrows, x, xs, nb, acts, y, ys);
    return;
  }
  switch (acts) {
    case 1: RowsKernelR<1, Block>(w, nrows, x, xs, nb, y, ys); break;
    case 2: RowsKernelR<2, Block>(w, nrows, x, xs, nb, y, ys); break;
    default: RowsKernelR<3, Block>(w, nrows, x, xs, nb, y, ys); break;
  }
}

}  // namespace

void Avx512Q8_0Rows(const BlockQ8_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys) {
  Q32Rows(w, nrows, x, xs, nb, acts, y, ys);
}
void Avx512Q4_0Rows(const BlockQ4_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys) {
  Q32Rows(w, nrows, x, xs, nb, acts, y, ys);
}
void Avx512Q5_0Rows(const BlockQ5_0* w, std::int64_t nrows, const ActQ8* x, std::int64_t xs, std::int64_t nb, int acts,
                    float* y, std::int64_t ys) {
  Q32Rows(w, nrows, x, xs, nb, acts, y, ys);
}

}  // namespace kvshare::detail
