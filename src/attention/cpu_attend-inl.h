// Per-target SIMD building blocks of the blocked attention kernel
// (cpu_attend.cc): K/V row conversion, Q.K tiles, the online-softmax row
// update and the P.V tile update. Re-included once per Highway target.
#if defined(KVSHARE_ATTENTION_CPU_ATTEND_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSHARE_ATTENTION_CPU_ATTEND_INL_H_
#undef KVSHARE_ATTENTION_CPU_ATTEND_INL_H_
#else
#define KVSHARE_ATTENTION_CPU_ATTEND_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kvshare/common/tensor.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Register tiling: 4 query rows x kKeyTile keys for Q.K, 4 rows x kPvVecs
// vectors for P.V, so a tile has 4 * kKeyTile (4 * kPvVecs) independent FMA
// chains. x86 targets below AVX-512 have 16 vector registers: 3 gives 12
// accumulators plus 3 K (V) registers. Two FMA ports of latency 4 (Zen 3,
// Skylake) need 8 chains in flight; with exactly 8 (the 4 x 2 tiles this
// replaced) any late operand stalls a port, and 4 x 3 measured 5-10% faster
// fp16 decode at 8 heads per KV head. HWY_SCALAR keeps the wide tiles:
// registers do not matter there, and it runs that code on machines without
// AVX-512.
//
// The kKeyTile keys of a Q.K tile come from kKeyTile equal, contiguous parts
// of the block (keys k, k + part, k + 2 part, ...), never from adjacent rows:
// each part is then read as one sequential stream, which the hardware
// prefetchers follow. Adjacent rows read in turn (cache lines 512 bytes apart,
// alternately) halved the DRAM read rate of decode on Zen 3. Scores do not
// depend on which keys share a tile.
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3 && HWY_TARGET != HWY_SCALAR
inline constexpr std::size_t kKeyTile = 3;
inline constexpr std::size_t kPvVecs = 3;
#else
inline constexpr std::size_t kKeyTile = 4;
inline constexpr std::size_t kPvVecs = 4;
#endif
inline constexpr std::size_t kRowTile = 4;
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Lanes(d) elements of a K/V row at p, widened to float in registers
// (T = float, hwy::float16_t or hwy::bfloat16_t).
template <class D, typename T>
HWY_INLINE hn::Vec<D> LoadKv(D d, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(d, p);
  } else {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<T, D>(), p));
  }
}

// q8_0 K/V rows (tensor.h: 34-byte blocks {fp16 d, int8 q[32]}). A
// `const Q8_0Row*` is the byte address of a q8_0 cache; element offsets (row
// starts, multiples of 32) map to block addresses. Rows are read in place and
// dequantized in registers, a block (or a part of it) at a time.
struct Q8_0Row {};

template <typename T>
HWY_INLINE const T* KvRowAt(const T* base, std::int64_t off) {
  return base + off;
}
HWY_INLINE const unsigned char* KvRowAt(const Q8_0Row* base, std::int64_t off) {
  return reinterpret_cast<const unsigned char*>(base) + off / kQ8_0BlockSize * kQ8_0BlockBytes;
}

// Bytes of one K/V row of H elements.
template <typename T>
constexpr std::size_t KvRowBytes(std::size_t H) {
  if constexpr (std::is_same_v<T, Q8_0Row>) {
    return H / kQ8_0BlockSize * kQ8_0BlockBytes;
  } else {
    return H * sizeof(T);
  }
}

// The scale d of the q8_0 block at blk (its fp16 bits widened in a register).
HWY_INLINE float Q8_0Scale(const unsigned char* HWY_RESTRICT blk) {
  const hn::CappedTag<float, 1> d1;
  return hn::GetLane(hn::PromoteTo(
      d1, hn::LoadU(hn::Rebind<hwy::float16_t, decltype(d1)>(), reinterpret_cast<const hwy::float16_t*>(blk))));
}

// Lanes(d) int8 codes at q as float (not yet scaled).
template <class D>
HWY_INLINE hn::Vec<D> LoadQ8_0Codes(D d, const unsigned char* HWY_RESTRICT q) {
  const hn::RebindToSigned<D> di;
  return hn::ConvertTo(
      d, hn::PromoteTo(di, hn::LoadU(hn::Rebind<std::int8_t, D>(), reinterpret_cast<const std::int8_t*>(q))));
}

// out[0, H) = the q8_0 row at row, dequantized (the same products as the
// in-register path: code * scale in fp32, exact).
template <class D>
HWY_INLINE void DequantizeQ8_0Row(D d, const unsigned char* HWY_RESTRICT row, std::size_t H, float* HWY_RESTRICT out) {
  const std::size_t L = hn::Lanes(d);
  for (std::size_t c0 = 0; c0 < H; c0 += kQ8_0BlockSize, row += kQ8_0BlockBytes) {
    const auto scale = hn::Set(d, Q8_0Scale(row));
    for (std::size_t c = 0; c < static_cast<std::size_t>(kQ8_0BlockSize); c += L) {
      hn::StoreU(hn::Mul(LoadQ8_0Codes(d, row + 2 + c), scale), d, out + c0 + c);
    }
  }
}

// Adds the 128-bit blocks of v and stores the 4 lanes of the sum to out.
#if HWY_TARGET != HWY_SCALAR
template <class D>
HWY_INLINE void FoldBlocksStore4(D d, hn::Vec<D> v, float* HWY_RESTRICT out) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    hn::StoreU(v, d, out);
  } else {
    const hn::Half<D> dh;
    FoldBlocksStore4(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)), out);
  }
}

// out[k] = sum of the lanes of a_k, k < 4 (a transposing reduction: 3
// shuffles + 3 adds per 128-bit block instead of four full reductions).
template <class D>
HWY_INLINE void SumOfLanes4(D d, hn::Vec<D> a0, hn::Vec<D> a1, hn::Vec<D> a2, hn::Vec<D> a3, float* HWY_RESTRICT out) {
  if constexpr (hn::MaxLanes(D()) < 4) {
    out[0] = hn::GetLane(hn::SumOfLanes(d, a0));
    out[1] = hn::GetLane(hn::SumOfLanes(d, a1));
    out[2] = hn::GetLane(hn::SumOfLanes(d, a2));
    out[3] = hn::GetLane(hn::SumOfLanes(d, a3));
  } else {
    const hn::Repartition<std::uint64_t, D> d64;
    // Per block: [a0_0 + a0_2, a1_0 + a1_2, a0_1 + a0_3, a1_1 + a1_3].
    const auto u01 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
    const auto u23 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
    const auto b01 = hn::BitCast(d64, u01), b23 = hn::BitCast(d64, u23);
    // Per block: [sum a0, sum a1, sum a2, sum a3] (partial over the block).
    const auto w =
        hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, b01, b23)), hn::BitCast(d, hn::InterleaveUpper(d64, b01, b23)));
    FoldBlocksStore4(d, w, out);
  }
}
#else
template <class D>
HWY_INLINE void SumOfLanes4(D d, hn::Vec<D> a0, hn::Vec<D> a1, hn::Vec<D> a2, hn::Vec<D> a3, float* HWY_RESTRICT out) {
  out[0] = hn::GetLane(hn::SumOfLanes(d, a0));
  out[1] = hn::GetLane(hn::SumOfLanes(d, a1));
  out[2] = hn::GetLane(hn::SumOfLanes(d, a2));
  out[3] = hn::GetLane(hn::SumOfLanes(d, a3));
}
#endif

template <std::size_t KT, class D>
HWY_INLINE void ZeroDotTile(D d, hn::Vec<D> (&acc)[kRowTile][KT]) {
  for (std::size_t r = 0; r < kRowTile; ++r) {
    for (std::size_t k = 0; k < KT; ++k) acc[r][k] = hn::Zero(d);
  }
}

// acc[r][k] += q_r[c, c + Lanes) * kc[k] for the 4 query rows (H floats apart).
template <std::size_t KT, class D>
HWY_INLINE void AccumulateDotTile(D d, const float* HWY_RESTRICT q, std::size_t H, std::size_t c,
                                  const hn::Vec<D> (&kc)[KT], hn::Vec<D> (&acc)[kRowTile][KT]) {
  for (std::size_t r = 0; r < kRowTile; ++r) {
    const auto qv = hn::LoadU(d, q + r * H + c);
    for (std::size_t k = 0; k < KT; ++k) acc[r][k] = hn::MulAdd(qv, kc[k], acc[r][k]);
  }
}

// out[r * ldo + k * ks] = the lane sum of acc[r][k] (the dot products of a tile).
template <std::size_t KT, class D>
HWY_INLINE void StoreDotSums(D d, const hn::Vec<D> (&acc)[kRowTile][KT], std::size_t ks, float* HWY_RESTRICT out,
                             std::size_t ldo) {
  static_assert(kRowTile == 4, "SumOfLanes4 reduces the 4 rows of a key together");
  for (std::size_t k = 0; k < KT; ++k) {
    alignas(16) float sums[kRowTile];
    SumOfLanes4(d, acc[0][k], acc[1][k], acc[2][k], acc[3][k], sums);
    for (std::size_t r = 0; r < kRowTile; ++r) out[r * ldo + k * ks] = sums[r];
  }
}

// out[r * ldo + k * ks] = q_r . key_k for r < 4, k < KT; q rows are H floats
// apart, key k is the row at kv + off[k * ks].
template <std::size_t KT, class D, typename T>
HWY_INLINE void DotTile(D d, const float* HWY_RESTRICT q, std::size_t H, const T* HWY_RESTRICT kv,
                        const std::int64_t* off, std::size_t ks, float* HWY_RESTRICT out, std::size_t ldo) {
  using V = hn::Vec<D>;
  const std::size_t L = hn::Lanes(d);
  V acc[kRowTile][KT];
  ZeroDotTile<KT>(d, acc);
  const T* kp[KT];
  for (std::size_t k = 0; k < KT; ++k) kp[k] = kv + off[k * ks];
  for (std::size_t c = 0; c < H; c += L) {
    V kc[KT];
    for (std::size_t k = 0; k < KT; ++k) kc[k] = LoadKv(d, kp[k] + c);
    AccumulateDotTile<KT>(d, q, H, c, kc, acc);
  }
  StoreDotSums<KT>(d, acc, ks, out, ldo);
}

// DotTile over q8_0 keys: per block, each key's codes are widened to float and
// multiplied by its block scale in registers (Lanes(d) divides 32).
template <std::size_t KT, class D>
HWY_INLINE void DotTile(D d, const float* HWY_RESTRICT q, std::size_t H, const Q8_0Row* HWY_RESTRICT kv,
                        const std::int64_t* off, std::size_t ks, float* HWY_RESTRICT out, std::size_t ldo) {
  using V = hn::Vec<D>;
  const std::size_t L = hn::Lanes(d);
  V acc[kRowTile][KT];
  ZeroDotTile<KT>(d, acc);
  const unsigned char* kp[KT];
  for (std::size_t k = 0; k < KT; ++k) kp[k] = KvRowAt(kv, off[k * ks]);
  for (std::size_t c0 = 0; c0 < H; c0 += kQ8_0BlockSize) {
    float scale[KT];
    for (std::size_t k = 0; k < KT; ++k) {
      kp[k] += c0 == 0 ? 0 : kQ8_0BlockBytes;
      scale[k] = Q8_0Scale(kp[k]);
    }
    for (std::size_t c = 0; c < static_cast<std::size_t>(kQ8_0BlockSize); c += L) {
      V kc[KT];
      for (std::size_t k = 0; k < KT; ++k) kc[k] = hn::Mul(LoadQ8_0Codes(d, kp[k] + 2 + c), hn::Set(d, scale[k]));
      AccumulateDotTile<KT>(d, q, H, c0 + c, kc, acc);
    }
  }
  StoreDotSums<KT>(d, acc, ks, out, ldo);
}

// x[0, n) = cap * tanh(x / cap); n is a multiple of Lanes(d).
template <class D>
HWY_INLINE void SoftcapRow(D d, float* HWY_RESTRICT x, std::size_t n, float cap) {
  const std::size_t L = hn::Lanes(d);
  const auto vc = hn::Set(d, cap);
  const auto inv = hn::Set(d, 1.0f / cap);
  for (std::size_t i = 0; i < n; i += L) {
    hn::StoreU(hn::Mul(vc, hn::Tanh(d, hn::Mul(hn::LoadU(d, x + i), inv))), d, x + i);
  }
}

template <class D>
HWY_INLINE float MaxRow(D d, const float* HWY_RESTRICT x, std::size_t n) {
  const std::size_t L = hn::Lanes(d);
  auto m = hn::Set(d, kNegInf);
  for (std::size_t i = 0; i < n; i += L) m = hn::Max(m, hn::LoadU(d, x + i));
  return hn::GetLane(hn::MaxOfLanes(d, m));
}

// exp(y) for y <= 0 (0 for y < -87, where exp(y) < 2^-125, and for -inf):
// y = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite, ln2 split in two), exp(r)
// from its degree-7 Taylor polynomial (truncation < 2^-27 relative), 2^n
// built in the exponent bits (n >= -126: normal). About half the operations
// of the general hn::Exp, which handles any y.
template <class D>
HWY_INLINE hn::Vec<D> ExpNonPositive(D d, hn::Vec<D> y) {
  const hn::RebindToSigned<D> di;
  const auto live = hn::Gt(y, hn::Set(d, -87.0f));
  y = hn::Max(y, hn::Set(d, -87.0f));
  const auto n = hn::Round(hn::Mul(y, hn::Set(d, 1.44269504088896341f)));
  auto r = hn::NegMulAdd(n, hn::Set(d, 0.693145751953125f), y);
  r = hn::NegMulAdd(n, hn::Set(d, 1.4286068203094172e-06f), r);
  auto p = hn::Set(d, 1.0f / 5040.0f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 720.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  const auto scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  return hn::IfThenElseZero(live, hn::Mul(p, scale));
}

// x[i] = exp(x[i] - m) (0 for x = -inf); returns the sum. m is finite and
// >= every x[i].
template <class D>
HWY_INLINE float ExpRow(D d, float* HWY_RESTRICT x, std::size_t n, float m) {
  const std::size_t L = hn::Lanes(d);
  const auto vm = hn::Set(d, m);
  auto sum = hn::Zero(d);
  for (std::size_t i = 0; i < n; i += L) {
    const auto e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, x + i), vm));
    sum = hn::Add(sum, e);
    hn::StoreU(e, d, x + i);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// dst[0, H) = src[0, H) * s.
template <class D>
HWY_INLINE void ScaleRow(D d, const float* src, std::size_t H, float s, float* dst) {
  const std::size_t L = hn::Lanes(d);
  const auto vs = hn::Set(d, s);
  for (std::size_t c = 0; c < H; c += L) hn::StoreU(hn::Mul(hn::LoadU(d, src + c), vs), d, dst + c);
}

// dst[0, H) += src[0, H) * s.
template <class D>
HWY_INLINE void AxpyRow(D d, const float* HWY_RESTRICT src, std::size_t H, float s, float* HWY_RESTRICT dst) {
  const std::size_t L = hn::Lanes(d);
  const auto vs = hn::Set(d, s);
  for (std::size_t c = 0; c < H; c += L) {
    hn::StoreU(hn::MulAdd(hn::LoadU(d, src + c), vs, hn::LoadU(d, dst + c)), d, dst + c);
  }
}

// a[r][i] = alpha[r] * the accumulator vector i at column c of row r (alpha
// null: no rescale), for the 4 rows of a row group.
template <std::size_t NV, class D>
HWY_INLINE void LoadPvAcc(D d, const float* HWY_RESTRICT acc, std::size_t H, const float* HWY_RESTRICT alpha,
                          std::size_t c, hn::Vec<D> (&a)[kRowTile][NV]) {
  const std::size_t L = hn::Lanes(d);
  for (std::size_t r = 0; r < kRowTile; ++r) {
    for (std::size_t i = 0; i < NV; ++i) a[r][i] = hn::LoadU(d, acc + r * H + c + i * L);
    if (alpha != nullptr) {
      const auto s = hn::Set(d, alpha[r]);
      for (std::size_t i = 0; i < NV; ++i) a[r][i] = hn::Mul(a[r][i], s);
    }
  }
}

template <std::size_t NV, class D>
HWY_INLINE void StorePvAcc(D d, const hn::Vec<D> (&a)[kRowTile][NV], std::size_t H, std::size_t c,
                           float* HWY_RESTRICT acc) {
  const std::size_t L = hn::Lanes(d);
  for (std::size_t r = 0; r < kRowTile; ++r) {
    for (std::size_t i = 0; i < NV; ++i) hn::StoreU(a[r][i], d, acc + r * H + c + i * L);
  }
}

// acc[r] = alpha[r] * acc[r] + sum_{j < nk} p[r * ldp + j] * v_j over the NV
// vectors at column c, for the 4 rows of a row group (alpha null: no
// rescale); v_j is the row at vv + off[j].
template <std::size_t NV, class D, typename T>
HWY_INLINE void PvChunk(D d, float* HWY_RESTRICT acc, std::size_t H, const float* HWY_RESTRICT alpha,
                        const float* HWY_RESTRICT p, std::size_t ldp, const T* HWY_RESTRICT vv, const std::int64_t* off,
                        std::size_t nk, std::size_t c) {
  using V = hn::Vec<D>;
  const std::size_t L = hn::Lanes(d);
  V a[kRowTile][NV];
  LoadPvAcc<NV>(d, acc, H, alpha, c, a);
  for (std::size_t j = 0; j < nk; ++j) {
    const T* row = vv + off[j] + c;
    V v[NV];
    for (std::size_t i = 0; i < NV; ++i) v[i] = LoadKv(d, row + i * L);
    for (std::size_t r = 0; r < kRowTile; ++r) {
      const V pr = hn::Set(d, p[r * ldp + j]);
      for (std::size_t i = 0; i < NV; ++i) a[r][i] = hn::MulAdd(pr, v[i], a[r][i]);
    }
  }
  StorePvAcc<NV>(d, a, H, c, acc);
}

// PvChunk over q8_0 values: the NV vectors at column c lie in one block
// (NV * Lanes(d) divides 32) and share its scale: each is widened and scaled
// once in registers, then used by the 4 rows.
template <std::size_t NV, class D>
HWY_INLINE void PvChunk(D d, float* HWY_RESTRICT acc, std::size_t H, const float* HWY_RESTRICT alpha,
                        const float* HWY_RESTRICT p, std::size_t ldp, const Q8_0Row* HWY_RESTRICT vv,
                        const std::int64_t* off, std::size_t nk, std::size_t c) {
  using V = hn::Vec<D>;
  const std::size_t L = hn::Lanes(d);
  V a[kRowTile][NV];
  LoadPvAcc<NV>(d, acc, H, alpha, c, a);
  const std::size_t blk = c / kQ8_0BlockSize * kQ8_0BlockBytes, in_blk = 2 + c % kQ8_0BlockSize;
  for (std::size_t j = 0; j < nk; ++j) {
    const unsigned char* row = KvRowAt(vv, off[j]) + blk;
    const V scale = hn::Set(d, Q8_0Scale(row));
    V v[NV];
    for (std::size_t i = 0; i < NV; ++i) v[i] = hn::Mul(LoadQ8_0Codes(d, row + in_blk + i * L), scale);
    for (std::size_t r = 0; r < kRowTile; ++r) {
      const V pr = hn::Set(d, p[r * ldp + j]);
      for (std::size_t i = 0; i < NV; ++i) a[r][i] = hn::MulAdd(pr, v[i], a[r][i]);
    }
  }
  StorePvAcc<NV>(d, a, H, c, acc);
}

// Vectors per q8_0 P.V chunk: 2 (8 accumulators), within one block when
// 2 * Lanes(d) divides 32 (every x86 target); 1 otherwise.
inline constexpr std::size_t kPvVecsQ8 = 2;

// V bytes per key sub-block of PvRows: the rows of a sub-block stay in L1
// while its column chunks are swept (a chunk uses part of each cache line).
inline constexpr std::size_t kPvSubBlockBytes = 16 * 1024;

// acc[r] = alpha[r] * acc[r] + sum_{j < nk} p[r * ldp + j] * v_j for the
// rows r of the row groups g < groups with active[g] (group g: rows
// g * kRowTile ...; acc rows H floats apart, p rows ldp apart): PvChunk over
// all columns, the keys in sub-blocks of about kPvSubBlockBytes of V, each
// sub-block swept by every group while it is in L1. Each accumulator adds
// the keys in order j = 0, 1, ..., whatever the sub-block length, block
// length or nk, so keys that a row does not see (p = 0) never change its sum.
template <class D, typename T>
HWY_INLINE void PvRows(D d, float* HWY_RESTRICT acc, std::size_t H, const float* HWY_RESTRICT alpha,
                       const float* HWY_RESTRICT p, std::size_t ldp, const T* HWY_RESTRICT vv, const std::int64_t* off,
                       std::size_t nk, const char* active, std::size_t groups) {
  const std::size_t L = hn::Lanes(d);
  const std::size_t sub = std::max<std::size_t>(4, kPvSubBlockBytes / KvRowBytes<T>(H));
  for (std::size_t j0 = 0; j0 < nk; j0 += sub) {
    const std::size_t n = std::min(sub, nk - j0);
    for (std::size_t g = 0; g < groups; ++g) {
      if (!active[g]) continue;
      const std::size_t r0 = g * kRowTile;
      float* a = acc + r0 * H;
      const float* al = j0 == 0 ? alpha + r0 : nullptr;
      const float* pg = p + r0 * ldp + j0;
      std::size_t c = 0;
      if constexpr (std::is_same_v<T, Q8_0Row>) {
        if (kQ8_0BlockSize % (kPvVecsQ8 * L) == 0) {
          for (; c < H; c += kPvVecsQ8 * L) PvChunk<kPvVecsQ8>(d, a, H, al, pg, ldp, vv, off + j0, n, c);
        }
      } else {
        for (; c + kPvVecs * L <= H; c += kPvVecs * L) PvChunk<kPvVecs>(d, a, H, al, pg, ldp, vv, off + j0, n, c);
        if constexpr (kPvVecs > 2) {
          for (; c + 2 * L <= H; c += 2 * L) PvChunk<2>(d, a, H, al, pg, ldp, vv, off + j0, n, c);
        }
      }
      for (; c < H; c += L) PvChunk<1>(d, a, H, al, pg, ldp, vv, off + j0, n, c);
    }
  }
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
