// bf16 score and value products on AMX tiles (amx_attend.h). Compiled with
// -mavx512{f,bw,vl,bf16} -mamx-{tile,bf16} on x86-64; elsewhere the entry
// points are never reached (AmxAttendUsable() is false).
//
// Every tile is 16 rows of 64 bytes (16 f32, or 32 bf16 as 16 pairs):
//  - scores, transposed: C[key][row] += K[key][32 dims] (A: the block's
//    keys in bf16, row-major) times Q^T (B: AmxQueries), over the head
//    dimensions in steps of 32; C is transposed into the score rows;
//  - values: C[row][16 columns] += P[row][32 keys] (A) times V (B: the
//    block's values as pairs of consecutive keys per column), over the keys
//    in steps of 32; C is then added to the accumulators.
// The transposed score product reads K as the cache stores it (rows), so the
// only reshuffles are of the queries (once per item) and of 16 x 16 score
// tiles, instead of every key block.
#include "attention/amx_attend.h"

#include <algorithm>

#include "common/cpu_amx.h"
#include "common/prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "common/amx_tiles.h"
#endif

namespace kvshare::detail {

#if defined(__x86_64__) && defined(__GNUC__)

namespace {

constexpr std::size_t RoundUp(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

const TileConfig& AttendTiles() { return FullTiles(); }

// 16 floats of row `off` of a K/V source from column c (columns >= H read as 0).
inline __m512 Load16(const KvSource& kv, std::int64_t off, std::size_t c, std::size_t H) {
  const __mmask16 m = TailMask16(c, H);
  switch (kv.dtype) {
    case DType::kFloat16:
      return _mm512_cvtph_ps(
          _mm256_maskz_loadu_epi16(m, static_cast<const std::uint16_t*>(kv.data) + off + static_cast<std::int64_t>(c)));
    case DType::kBFloat16:
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(
                                m, static_cast<const std::uint16_t*>(kv.data) + off + static_cast<std::int64_t>(c))),
                            16));
    default: return _mm512_maskz_loadu_ps(m, static_cast<const float*>(kv.data) + off + static_cast<std::int64_t>(c));
  }
}

// 32 floats as bf16 (nearest even), lo first.
inline __m512i Bf16x32(__m512 lo, __m512 hi) { return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)); }

// 32 elements of row `off` of a K/V source from column c as bf16 (columns >= H
// read as 0): bf16 rows as they are (the rounding of their exact f32 values
// would give the same bits), the others rounded.
inline __m512i RowBf16x32(const KvSource& kv, std::int64_t off, std::size_t c, std::size_t H) {
  if (kv.dtype == DType::kBFloat16) {
    const __mmask32 m = c + 32 <= H ? __mmask32(0xFFFFFFFFu) : c >= H ? __mmask32(0) : __mmask32((1u << (H - c)) - 1);
    return _mm512_maskz_loadu_epi16(m, static_cast<const std::uint16_t*>(kv.data) + off + static_cast<std::int64_t>(c));
  }
  return Bf16x32(Load16(kv, off, c, H), Load16(kv, off, c + 16, H));
}

// 32 floats of p from column c (columns >= n read as 0), as bf16.
inline __m512i Bf16Row32(const float* p, std::size_t c, std::size_t n) {
  return Bf16x32(_mm512_maskz_loadu_ps(TailMask16(c, n), p + c),
                 _mm512_maskz_loadu_ps(TailMask16(c + 16, n), p + c + 16));
}

// In-register transpose of a 16 x 16 matrix of 32-bit elements.
inline void Transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c], 128-bit lane L: rows 4g .. 4g + 3 at column 4L + c.
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// Rows read this many keys ahead of their conversion are prefetched into L2:
// decode reads each cached row once, from DRAM, and the hardware prefetchers
// alone left the staging loops at about half the f32 kernel's read rate.
constexpr std::size_t kPrefetchRows = 8;

inline void PrefetchRow(const KvSource& kv, const std::int64_t* off, std::size_t j, std::size_t n, std::size_t H) {
  if (j < n) {
    PrefetchToL2(static_cast<const char*>(kv.data) + DTypeBytes(kv.dtype, off[j]),
                 DTypeBytes(kv.dtype, static_cast<std::int64_t>(H)));
  }
}

// Per-thread staging of a block's keys or values in bf16.
std::uint16_t* Staging(std::size_t elements) {
  thread_local std::vector<std::uint16_t> buf;
  if (buf.size() < elements) buf.resize(elements);
  return buf.data();
}

// M (1 to 4) C tiles 4 .. 3 + M: C_j += A(tile 0) . B_j, the B_j loaded from
// b + j * b_step (stride b_stride bytes) into tiles 1, 2, 3, 1.
template <int M>
inline void ProductRow(const void* a, long a_stride, const std::uint16_t* b, std::size_t b_step, long b_stride) {
  _tile_loadd(0, a, a_stride);
  _tile_loadd(1, b, b_stride);
  _tile_dpbf16ps(4, 0, 1);
  if constexpr (M > 1) {
    _tile_loadd(2, b + b_step, b_stride);
    _tile_dpbf16ps(5, 0, 2);
  }
  if constexpr (M > 2) {
    _tile_loadd(3, b + 2 * b_step, b_stride);
    _tile_dpbf16ps(6, 0, 3);
  }
  if constexpr (M > 3) {
    _tile_loadd(1, b + 3 * b_step, b_stride);
    _tile_dpbf16ps(7, 0, 1);
  }
}

template <int M>
inline void ZeroC() {
  _tile_zero(4);
  if constexpr (M > 1) _tile_zero(5);
  if constexpr (M > 2) _tile_zero(6);
  if constexpr (M > 3) _tile_zero(7);
}

template <int M>
inline void StoreC(float* c) {
  _tile_stored(4, c, 64);
  if constexpr (M > 1) _tile_stored(5, c + 256, 64);
  if constexpr (M > 2) _tile_stored(6, c + 512, 64);
  if constexpr (M > 3) _tile_stored(7, c + 768, 64);
}

// C_j (j < M) = sum over `steps` of A(a + s * a_step) . B_j(b + s * b_step_s
// + j * b_step_j), stored to c (256 floats per tile).
template <int M>
void Products(const std::uint16_t* a, std::size_t a_step, long a_stride, const std::uint16_t* b, std::size_t b_step_s,
              std::size_t b_step_j, long b_stride, std::size_t steps, float* c) {
  ZeroC<M>();
  for (std::size_t s = 0; s < steps; ++s) ProductRow<M>(a + s * a_step, a_stride, b + s * b_step_s, b_step_j, b_stride);
  StoreC<M>(c);
}

void ProductsN(int m, const std::uint16_t* a, std::size_t a_step, long a_stride, const std::uint16_t* b,
               std::size_t b_step_s, std::size_t b_step_j, long b_stride, std::size_t steps, float* c) {
  switch (m) {
    case 1: Products<1>(a, a_step, a_stride, b, b_step_s, b_step_j, b_stride, steps, c); return;
    case 2: Products<2>(a, a_step, a_stride, b, b_step_s, b_step_j, b_stride, steps, c); return;
    case 3: Products<3>(a, a_step, a_stride, b, b_step_s, b_step_j, b_stride, steps, c); return;
    default: Products<4>(a, a_step, a_stride, b, b_step_s, b_step_j, b_stride, steps, c); return;
  }
}

bool GroupsActive(const char* active, std::size_t group_rows, std::size_t r0, std::size_t r1) {
  for (std::size_t g = r0 / group_rows; g * group_rows < r1; ++g) {
    if (active[g]) return true;
  }
  return false;
}

}  // namespace

bool AmxAttendUsable() { return AmxBf16Allowed(); }

void AmxPackQueries(const float* qs, std::size_t rows, std::size_t H, AmxQueries* q) {
  const std::size_t hp = RoundUp(H, 32), rt = RoundUp(rows, 16) / 16, nd = hp / 32;
  q->rows = rows;
  q->head_size = H;
  q->packed.resize(rt * nd * 512);
  for (std::size_t t = 0; t < rt; ++t) {
    for (std::size_t d = 0; d < nd; ++d) {
      __m512i r[16];
      for (std::size_t i = 0; i < 16; ++i) {
        const std::size_t row = t * 16 + i;
        r[i] = row < rows ? Bf16Row32(qs + row * H, 32 * d, H) : _mm512_setzero_si512();
      }
      Transpose16(r);
      std::uint16_t* out = q->packed.data() + (t * nd + d) * 512;
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(out + 32 * i, r[i]);
    }
  }
}

void AmxScoreBlock(const AmxQueries& q, const KvSource& k, const std::int64_t* koff, std::size_t nk, const char* active,
                   std::size_t group_rows, float* x, std::size_t ldx) {
  const std::size_t H = q.head_size, hp = RoundUp(H, 32), nd = hp / 32, nkp = RoundUp(nk, 16);
  const std::size_t row_tiles = RoundUp(q.rows, 16) / 16;
  // The block's keys in bf16: read in place from a bf16 cache whose rows are
  // evenly spaced and whole (every tile row a real key), else staged as
  // [nkp][hp] with zero padding.
  const std::int64_t rs = nk > 1 ? koff[1] - koff[0] : 0;
  bool direct = k.dtype == DType::kBFloat16 && H % 32 == 0 && nk % 16 == 0 && rs > 0;
  for (std::size_t j = 1; direct && j < nk; ++j) direct = koff[j] == koff[0] + static_cast<std::int64_t>(j) * rs;
  const std::uint16_t* kb = nullptr;
  std::size_t row_elems = hp;  // elements from one key's row to the next
  if (direct) {
    kb = static_cast<const std::uint16_t*>(k.data) + koff[0];
    row_elems = static_cast<std::size_t>(rs);
    for (std::size_t j = 0; j < std::min(nk, kPrefetchRows * 4); ++j) PrefetchRow(k, koff, j, nk, H);
  } else {
    std::uint16_t* staged = Staging(nkp * hp);
    for (std::size_t j = 0; j < nkp; ++j) {
      PrefetchRow(k, koff, j + kPrefetchRows, nk, H);
      for (std::size_t c = 0; c < hp; c += 32) {
        const __m512i v = j < nk ? RowBf16x32(k, koff[j], c, H) : _mm512_setzero_si512();
        _mm512_storeu_si512(staged + j * hp + c, v);
      }
    }
    kb = staged;
  }
  const TileScope tiles(AttendTiles());
  alignas(64) float c[4 * 256];
  for (std::size_t t0 = 0; t0 < row_tiles; t0 += 4) {
    const int m = static_cast<int>(std::min<std::size_t>(4, row_tiles - t0));
    if (!GroupsActive(active, group_rows, t0 * 16, std::min(q.rows, (t0 + m) * 16))) continue;
    for (std::size_t kc = 0; kc < nkp / 16; ++kc) {
      if (direct && t0 == 0) {
        for (std::size_t j = 0; j < 16; ++j) PrefetchRow(k, koff, (kc + 2) * 16 + j, nk, H);
      }
      // C_j[key][row] over the dims: A = 16 keys x 32 dims, B_j = Q^T of row tile t0 + j.
      ProductsN(m, kb + kc * 16 * row_elems, 32, static_cast<long>(row_elems * 2), q.packed.data() + t0 * nd * 512, 512,
                nd * 512, 64, nd, c);
      for (int j = 0; j < m; ++j) {
        __m512i r[16];
        for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(c + j * 256 + 16 * i);
        Transpose16(r);
        for (std::size_t i = 0; i < 16; ++i) {
          const std::size_t row = (t0 + static_cast<std::size_t>(j)) * 16 + i;
          if (row < q.rows) _mm512_storeu_si512(x + row * ldx + kc * 16, r[i]);
        }
      }
    }
  }
}

void AmxPvBlock(float* acc, std::size_t H, const float* alpha, const float* p, std::size_t ldp, const KvSource& v,
                const std::int64_t* voff, std::size_t nk, const char* active, std::size_t group_rows,
                std::size_t rows) {
  const std::size_t hp = RoundUp(H, 16), nkp = RoundUp(nk, 32), row_tiles = RoundUp(rows, 16) / 16;
  // Values as key pairs: vp[pair][column][2], [nkp / 2][hp][2]; then the
  // probabilities in bf16, [row_tiles * 16][nkp]; padding zero.
  std::uint16_t* vp = Staging(nkp * hp + row_tiles * 16 * nkp);
  std::uint16_t* pb = vp + nkp * hp;
  const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                          37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
  for (std::size_t j = 0; j < nkp; j += 2) {
    PrefetchRow(v, voff, j + kPrefetchRows, nk, H);
    PrefetchRow(v, voff, j + kPrefetchRows + 1, nk, H);
    for (std::size_t c = 0; c < hp; c += 32) {
      const __m512i a = j < nk ? RowBf16x32(v, voff[j], c, H) : _mm512_setzero_si512();
      const __m512i b = j + 1 < nk ? RowBf16x32(v, voff[j + 1], c, H) : _mm512_setzero_si512();
      std::uint16_t* out = vp + j * hp + 2 * c;  // pair j / 2 starts at (j / 2) * 2 * hp
      _mm512_storeu_si512(out, _mm512_permutex2var_epi16(a, lo_idx, b));
      if (c + 16 < hp) _mm512_storeu_si512(out + 32, _mm512_permutex2var_epi16(a, hi_idx, b));
    }
  }
  for (std::size_t r = 0; r < row_tiles * 16; ++r) {
    const bool live = r < rows && active[r / group_rows];
    for (std::size_t c = 0; c < nkp; c += 32) {
      _mm512_storeu_si512(pb + r * nkp + c, live ? Bf16Row32(p + r * ldp, c, nk) : _mm512_setzero_si512());
    }
  }
  const TileScope tiles(AttendTiles());
  alignas(64) float c[4 * 256];
  const std::size_t col_tiles = hp / 16;
  for (std::size_t t = 0; t < row_tiles; ++t) {
    if (!GroupsActive(active, group_rows, t * 16, std::min(rows, t * 16 + 16))) continue;
    for (std::size_t c0 = 0; c0 < col_tiles; c0 += 4) {
      const int m = static_cast<int>(std::min<std::size_t>(4, col_tiles - c0));
      // C_j[row][16 columns] over the keys: A = 16 rows x 32 keys, B_j = 16 key pairs x 16 columns.
      ProductsN(m, pb + t * 16 * nkp, 32, static_cast<long>(nkp * 2), vp + c0 * 32, 32 * hp, 32,
                static_cast<long>(hp * 4), nkp / 32, c);
      for (std::size_t i = 0; i < 16; ++i) {
        const std::size_t r = t * 16 + i;
        if (r >= rows || !active[r / group_rows]) continue;
        const __m512 a = _mm512_set1_ps(alpha[r]);
        for (int j = 0; j < m; ++j) {
          const std::size_t col = (c0 + static_cast<std::size_t>(j)) * 16;
          const __mmask16 mask = TailMask16(col, H);
          float* dst = acc + r * H + col;
          _mm512_mask_storeu_ps(
              dst, mask, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, dst), a, _mm512_load_ps(c + j * 256 + 16 * i)));
        }
      }
    }
  }
}

#else  // not x86-64: the tiles do not exist

bool AmxAttendUsable() { return false; }
void AmxPackQueries(const float*, std::size_t, std::size_t, AmxQueries*) {}
void AmxScoreBlock(const AmxQueries&, const KvSource&, const std::int64_t*, std::size_t, const char*, std::size_t,
                   float*, std::size_t) {}
void AmxPvBlock(float*, std::size_t, const float*, const float*, std::size_t, const KvSource&, const std::int64_t*,
                std::size_t, const char*, std::size_t, std::size_t) {}

#endif

}  // namespace kvshare::detail
