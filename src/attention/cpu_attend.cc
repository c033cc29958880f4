// Blocked online-softmax attention: detail::AttendOptimized (attend.h).
//
// Work items are (row b, KV head n, query tile, KV split) from
// cpu_attend_plan.h. An item walks its keys in blocks aligned to absolute key
// positions (multiples of the block length, the first and last clipped to the
// item's keys; a score row is indexed from the aligned start, so a key always
// sits in the same lane whichever tile reads it): the K block is read in
// place (fp16 / bf16 rows widened to fp32 in registers, never copied) and
// scored against all query-head rows of the tile (tile queries x the G heads
// sharing the KV head), then the online softmax (running max m, denominator l)
// rescales the fp32 accumulators and the V block is added in. Split partials are combined in
// split order, so results never depend on the thread count. The optional
// qk output is a second pass that recomputes the scores.
//
// Policies: softcap and bias are compile-time switches chosen once in
// AttendImpl; causal / window / bidirectional spans only shape the per-row
// key ranges (VisibleKeys, attend.h: a span moves a row's upper bound to its
// end), so the tile key unions and the per-block row tests skip fully masked
// blocks with spans as without; the sink enters at finalization.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/cpu_attend.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"

#include "attention/amx_attend.h"
#include "attention/attend.h"
#include "attention/cpu_attend-inl.h"
#include "attention/cpu_attend_plan.h"
#include "attention/store_rows.h"
#include "common/float_convert.h"
#include "common/prefetch.h"
#include "kvshare/common/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::detail::HWY_NAMESPACE {
namespace {

std::size_t RoundUp(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

// Runs of consecutive splits per pool thread in the split phase: more runs
// balance load, fewer keep each thread's K and V reads sequential streams
// that the hardware prefetchers follow across split boundaries.
constexpr std::int64_t kRunsPerThread = 4;

// K tiles of a block prefetched ahead of the one being scored (into L2, as
// the V rows are). The hardware prefetchers alone left decode from DRAM at
// about half the read bandwidth of 2 threads (decode/gemma_n4/B:8/T:320 f16:
// 0.53 of the triad); 4-6 tiles ahead measured 8-15% faster there, 1-2 no
// better than none.
constexpr std::size_t kKeyPrefetchTiles = 4;

struct Ctx {
  const AttendParams* p = nullptr;
  const AttendPlan* plan = nullptr;
  std::size_t H = 0, G = 0, bs = 0, bsp = 0;
  float* partial = nullptr;  // split partials (plan.partial_floats)
  float* stats = nullptr;    // [B, N, S] x (m, l) after the sink, for qk mode 2
};

struct RowInfo {
  KeyRange keys;  // visible keys within the item's [j0, j1)
  int s = 0;
  int h = 0;
  std::int64_t bias_off = 0;
};

// Per-thread scratch; contents never carry over between items.
struct Scratch {
  hwy::AlignedFreeUniquePtr<float[]> buf;
  std::size_t cap = 0;
  std::vector<std::int64_t> koff, voff;    // element offsets of a block's K / V rows
  hwy::AlignedFreeUniquePtr<float[]> kdq;  // [kKeyTile, H]: a q8_0 K tile, dequantized
  std::size_t kdq_cap = 0;
  std::vector<std::int64_t> kdq_off;  // offsets of its rows, laid out as koff
  std::vector<RowInfo> rows;
  std::vector<float> m, l, alpha;
  std::vector<char> active;  // per row group of kRowTile rows
  float* qs = nullptr;       // [rp, H] scaled queries
  float* sc = nullptr;       // [rp, bsp] scores / probabilities
  float* acc = nullptr;      // [rp, H] output accumulators
  AmxQueries amx_q;          // qs in bf16 for the tiles (AttendParams::bf16_tiles)
};

Scratch& ThreadScratch() {
  static thread_local Scratch s;
  return s;
}

// out[i] = element offset of key j0 + i's K/V row, i < count (ring slots
// wrap at ring_capacity; one division per call, not per key).
void KvOffsets(const KvSource& kv, int b, int n, std::int64_t j0, std::size_t count, std::int64_t* out) {
  const std::int64_t base = b * kv.batch_stride + n * kv.head_stride;
  const std::int64_t cap = kv.ring_capacity;
  std::int64_t slot = cap > 0 ? j0 % cap : j0;
  for (std::size_t i = 0; i < count; ++i) {
    out[i] = base + slot * kv.row_stride;
    if (++slot == cap) slot = 0;
  }
}

// Calls f(T{}) with T the element type of a K/V dtype (float32, float16,
// bfloat16, or the Q8_0Row tag of q8_0 blocks), so the SIMD loops widen
// (dequantize) K/V rows in registers.
template <class F>
void WithKvType(DType dtype, F&& f) {
  if (dtype == DType::kFloat16) {
    f(hwy::float16_t{});
  } else if (dtype == DType::kBFloat16) {
    f(hwy::bfloat16_t{});
  } else if (dtype == DType::kQ8_0) {
    f(Q8_0Row{});
  } else {
    f(float{});
  }
}

// Lays out scratch for a tile and fills queries and row ranges clipped to
// [j0, j1). Returns the number of real rows (the rest up to a multiple of
// kRowTile are zero padding).
template <class D>
std::size_t SetupTile(D d, const Ctx& cx, const AttendTile& t, std::int64_t j0, std::int64_t j1, Scratch& s) {
  const AttendParams& p = *cx.p;
  const std::size_t H = cx.H, G = cx.G;
  const std::size_t rows = static_cast<std::size_t>(t.s1 - t.s0) * G;
  const std::size_t rp = RoundUp(rows, kRowTile);
  const std::size_t need = 2 * rp * H + rp * cx.bsp;
  if (need > s.cap) {
    s.buf = hwy::AllocateAligned<float>(need);
    s.cap = need;
  }
  s.qs = s.buf.get();
  s.acc = s.qs + rp * H;
  s.sc = s.acc + rp * H;
  s.rows.assign(rp, RowInfo{});
  s.m.assign(rp, kNegInf);
  s.l.assign(rp, 0.0f);
  s.alpha.assign(rp, 1.0f);
  s.active.assign(rp / kRowTile, 0);
  s.koff.resize(RoundUp(cx.bs, kKeyTile));
  s.voff.resize(cx.bs);
  std::fill(s.qs + rows * H, s.qs + rp * H, 0.0f);
  for (std::size_t r = 0; r < rows; ++r) {
    RowInfo& ri = s.rows[r];
    ri.s = t.s0 + static_cast<int>(r / G);
    ri.h = t.n * static_cast<int>(G) + static_cast<int>(r % G);
    ri.keys = VisibleKeys(p, t.b, ri.s);
    ri.keys.lo = std::max(ri.keys.lo, j0);
    ri.keys.hi = std::min(ri.keys.hi, j1 - 1);
    ri.bias_off = t.b * p.bias.b_stride + ri.h * p.bias.h_stride + ri.s * p.bias.s_stride;
    const float* q =
        p.q + ((static_cast<std::int64_t>(t.b) * p.q_len + ri.s) * p.num_heads + ri.h) * static_cast<std::int64_t>(H);
    ScaleRow(d, q, H, p.scale, s.qs + r * H);
  }
  for (std::size_t r = rows; r < rp; ++r) s.rows[r].keys = KeyRange{};
  return rows;
}

// Adds bias elements [a, e) of one row (offset off + kb) to x.
void AddBias(const BiasSource& bias, std::int64_t off, std::size_t a, std::size_t e, float* x) {
  if (bias.dtype == DType::kFloat32) {
    const float* src = static_cast<const float*>(bias.data) + off;
    for (std::size_t i = a; i < e; ++i) x[i] += src[i];
  } else if (bias.dtype == DType::kFloat16) {
    const std::uint16_t* src = static_cast<const std::uint16_t*>(bias.data) + off;
    for (std::size_t i = a; i < e; ++i) x[i] += F16ToF32(src[i]);
  } else {
    const std::uint16_t* src = static_cast<const std::uint16_t*>(bias.data) + off;
    for (std::size_t i = a; i < e; ++i) x[i] += BF16ToF32(src[i]);
  }
}

// The f32 scores of ScoreBlock: keys [0, nkp) of the block (koff, padded to
// kKeyTile keys) against the active row groups, into s.sc at column off.
template <class D>
void ScoreKeys(D d, const Ctx& cx, std::size_t nk, std::size_t nkp, std::size_t off, const std::int64_t* voff,
               Scratch& s) {
  const AttendParams& p = *cx.p;
  const std::size_t H = cx.H, bsp = cx.bsp;
  // Each K tile is scored against every active row group while it is in L1.
  const std::size_t part = nkp / kKeyTile;
  const std::size_t v_row_bytes = DTypeBytes(p.v.dtype, static_cast<std::int64_t>(H));
  const std::int64_t v_block = DTypeBlockSize(p.v.dtype);
  const auto v_block_bytes = static_cast<std::int64_t>(DTypeBytes(p.v.dtype, v_block));
  const char* v_base = static_cast<const char*>(p.v.data);
  std::size_t groups = 0;
  for (char a : s.active) groups += a ? 1 : 0;
  WithKvType(p.k.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* kv = static_cast<const T*>(p.k.data);
    const std::size_t k_row_bytes = KvRowBytes<T>(H);
    // q8_0 keys scored by several row groups: each tile's keys are
    // dequantized once into L1 scratch (bitwise the values the in-register
    // path forms) instead of once per group.
    constexpr bool kQ8 = std::is_same_v<T, Q8_0Row>;
    const bool staged = kQ8 && groups > 1;
    if (staged && s.kdq_cap < kKeyTile * H) {
      s.kdq = hwy::AllocateAligned<float>(kKeyTile * H);
      s.kdq_cap = kKeyTile * H;
    }
    if (staged) s.kdq_off.resize(nkp);
    for (std::size_t k = 0; k < part; ++k) {  // keys k, k + part, ... (kKeyTile)
      if (k + kKeyPrefetchTiles < part) {
        for (std::size_t i = 0; i < kKeyTile; ++i) {
          PrefetchToL2(KvRowAt(kv, s.koff[k + kKeyPrefetchTiles + i * part]), k_row_bytes);
        }
      }
      if constexpr (kQ8) {
        if (staged) {
          for (std::size_t i = 0; i < kKeyTile; ++i) {
            DequantizeQ8_0Row(d, KvRowAt(kv, s.koff[k + i * part]), H, s.kdq.get() + i * H);
            s.kdq_off[k + i * part] = static_cast<std::int64_t>(i * H);
          }
        }
      }
      for (std::size_t g = 0; g < s.active.size(); ++g) {
        if (!s.active[g]) continue;
        float* out = s.sc + g * kRowTile * bsp + off + k;
        if (staged) {
          DotTile<kKeyTile>(d, s.qs + g * kRowTile * H, H, s.kdq.get(), s.kdq_off.data() + k, part, out, bsp);
        } else {
          DotTile<kKeyTile>(d, s.qs + g * kRowTile * H, H, kv, s.koff.data() + k, part, out, bsp);
        }
      }
      if (voff == nullptr) continue;
      for (std::size_t j = k; j < nk; j += part) PrefetchToL2(v_base + voff[j] / v_block * v_block_bytes, v_row_bytes);
    }
  });
}

// Scores of keys [kb + off, kb + off + nk) of the block that starts at kb, for
// the tile's active row groups: x[j - kb] after scale, softcap and bias, -inf
// outside each row's visible range (and outside those keys). Returns
// false when no row sees any key of the block. With voff (element offsets of
// the block's V rows; null: no prefetch), while
// the K rows of a tile are read, the V rows of the same keys are prefetched:
// V then streams from DRAM in step with K (as kKeyTile sequential streams)
// and is in L2 when P.V sweeps it column by column. (Prefetching whole blocks
// ahead, or not prefetching V, measured slower on Zen 3.)
template <class D, bool kSoftcap, bool kBias>
bool ScoreBlock(D d, const Ctx& cx, const AttendTile& t, std::size_t rows, std::int64_t kb, std::size_t off,
                std::size_t nk, const std::int64_t* voff, Scratch& s) {
  const AttendParams& p = *cx.p;
  const std::size_t bsp = cx.bsp;
  const std::int64_t k0 = kb + static_cast<std::int64_t>(off);
  const std::int64_t ke = k0 + static_cast<std::int64_t>(nk) - 1;
  bool any = false;
  for (std::size_t g = 0; g < s.active.size(); ++g) {
    char a = 0;
    for (std::size_t r = g * kRowTile; r < (g + 1) * kRowTile && r < rows; ++r) {
      const KeyRange& k = s.rows[r].keys;
      a |= (!k.Empty() && k.lo <= ke && k.hi >= k0) ? 1 : 0;
    }
    s.active[g] = a;
    any = any || a;
  }
  if (!any) return false;

  const std::size_t nkp = RoundUp(nk, kKeyTile);
  KvOffsets(p.k, t.b, t.n, k0, nk, s.koff.data());
  for (std::size_t j = nk; j < nkp; ++j) s.koff[j] = s.koff[0];
  if (p.bf16_tiles) {
    AmxScoreBlock(s.amx_q, p.k, s.koff.data(), nk, s.active.data(), kRowTile, s.sc + off, bsp);
  } else {
    ScoreKeys(d, cx, nk, nkp, off, voff, s);
  }

  for (std::size_t g = 0; g < s.active.size(); ++g) {
    if (!s.active[g]) continue;
    for (std::size_t r = g * kRowTile; r < (g + 1) * kRowTile && r < rows; ++r) {
      float* x = s.sc + r * bsp;
      const KeyRange& k = s.rows[r].keys;
      const std::int64_t lo = std::max(k.lo, k0), hi = std::min(k.hi, ke);
      if (k.Empty() || lo > hi) {
        std::fill(x, x + bsp, kNegInf);
        continue;
      }
      const std::size_t a = static_cast<std::size_t>(lo - kb), e = static_cast<std::size_t>(hi - kb) + 1;
      if constexpr (kSoftcap) {
        std::fill(x, x + off, 0.0f);
        std::fill(x + off + nkp, x + bsp, 0.0f);
        SoftcapRow(d, x, bsp, p.softcap);
      }
      if constexpr (kBias) AddBias(p.bias, s.rows[r].bias_off + kb, a, e, x);
      std::fill(x, x + a, kNegInf);
      std::fill(x + e, x + bsp, kNegInf);
    }
  }
  return true;
}

// Writes the normalized output rows of a tile from (m, l, acc) and records
// the final (m, l) for the qk pass.
template <class D>
void Finalize(D d, const Ctx& cx, const AttendTile& t, std::size_t rows, const float* m, const float* l, float* acc,
              const std::vector<RowInfo>& ri) {
  const AttendParams& p = *cx.p;
  const std::size_t H = cx.H;
  for (std::size_t r = 0; r < rows; ++r) {
    const int s = ri[r].s, h = ri[r].h;
    float* a = acc + r * H;
    float mf = m[r], lf = 0.0f, inv = 0.0f;
    if (mf != kNegInf) {
      float scale = 1.0f, extra = 0.0f;
      if (p.sink != nullptr) {
        mf = std::max(m[r], p.sink[h]);
        scale = std::exp(m[r] - mf);
        extra = std::exp(p.sink[h] - mf);
      }
      lf = l[r] * scale + extra;
      inv = scale / lf;
    }
    const std::int64_t off =
        ((static_cast<std::int64_t>(t.b) * p.q_len + s) * p.num_heads + h) * static_cast<std::int64_t>(H);
    if (p.out_dtype == DType::kFloat32) {
      ScaleRow(d, a, H, inv, static_cast<float*>(p.out) + off);
    } else {
      ScaleRow(d, a, H, inv, a);
      StoreRowFromFloat(p.out, p.out_dtype, off, a, static_cast<std::int64_t>(H));
    }
    if (cx.stats != nullptr) {
      float* st = cx.stats + ((static_cast<std::int64_t>(t.b) * p.num_heads + h) * p.q_len + s) * 2;
      st[0] = mf;
      st[1] = lf;
    }
  }
}

// Runs split sp: its blocks in order, the online softmax over them, and the
// split's partial state (or the tile's output when it has one split).
template <class D, bool kSoftcap, bool kBias>
void RunSplit(D d, const Ctx& cx, const AttendSplit& sp) {
  const AttendTile& t = cx.plan->tiles[static_cast<std::size_t>(sp.tile)];
  Scratch& s = ThreadScratch();
  const std::size_t rows = SetupTile(d, cx, t, sp.j0, sp.j1, s);
  const AttendParams& p = *cx.p;
  const std::size_t H = cx.H, bsp = cx.bsp;
  if (p.bf16_tiles) AmxPackQueries(s.qs, s.rows.size(), H, &s.amx_q);
  std::fill(s.acc, s.acc + s.rows.size() * H, 0.0f);
  const std::int64_t bs = static_cast<std::int64_t>(cx.bs);
  for (std::int64_t kb = sp.j0 - sp.j0 % bs; kb < sp.j1; kb += bs) {
    // Keys [k0, ke] of the aligned block [kb, kb + bs); score row entries
    // [0, off) stay -inf and take no part in P.V.
    const std::int64_t k0 = std::max(kb, sp.j0), ke = std::min(kb + bs, sp.j1) - 1;
    const std::size_t off = static_cast<std::size_t>(k0 - kb), nk = static_cast<std::size_t>(ke - k0 + 1);
    // V row offsets: the prefetch during Q.K and P.V both use them.
    KvOffsets(p.v, t.b, t.n, k0, nk, s.voff.data());
    if (!ScoreBlock<D, kSoftcap, kBias>(d, cx, t, rows, kb, off, nk, s.voff.data(), s)) continue;
    for (std::size_t g = 0; g < s.active.size(); ++g) {
      if (!s.active[g]) continue;
      for (std::size_t r = g * kRowTile; r < (g + 1) * kRowTile; ++r) {
        float* x = s.sc + r * bsp;
        const KeyRange& k = s.rows[r].keys;
        s.alpha[r] = 1.0f;
        if (r >= rows || k.Empty() || k.lo > ke || k.hi < k0) {
          std::fill(x + off, x + off + nk, 0.0f);
          continue;
        }
        const float m_new = std::max(s.m[r], MaxRow(d, x, bsp));
        if (m_new == kNegInf) {  // every visible score so far is -inf
          std::fill(x + off, x + off + nk, 0.0f);
          continue;
        }
        s.alpha[r] = std::exp(s.m[r] - m_new);
        const float sum = ExpRow(d, x, bsp, m_new);
        s.l[r] = s.l[r] * s.alpha[r] + sum;
        s.m[r] = m_new;
      }
    }
    if (p.bf16_tiles) {
      AmxPvBlock(s.acc, H, s.alpha.data(), s.sc + off, bsp, p.v, s.voff.data(), nk, s.active.data(), kRowTile,
                 s.rows.size());
      continue;
    }
    WithKvType(p.v.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* vv = static_cast<const T*>(p.v.data);
      PvRows(d, s.acc, H, s.alpha.data(), s.sc + off, bsp, vv, s.voff.data(), nk, s.active.data(), s.active.size());
    });
  }
  if (t.num_splits == 1) {
    Finalize(d, cx, t, rows, s.m.data(), s.l.data(), s.acc, s.rows);
    return;
  }
  float* part = cx.partial + sp.part_offset;
  std::copy(s.m.begin(), s.m.begin() + static_cast<std::ptrdiff_t>(rows), part);
  std::copy(s.l.begin(), s.l.begin() + static_cast<std::ptrdiff_t>(rows), part + rows);
  std::copy(s.acc, s.acc + rows * H, part + 2 * rows);
}

// Combines the split partials of tile ti in split order and finalizes.
template <class D>
void CombineTile(D d, const Ctx& cx, std::size_t ti) {
  const AttendTile& t = cx.plan->tiles[ti];
  Scratch& s = ThreadScratch();
  const std::size_t rows = SetupTile(d, cx, t, 0, 0, s);
  const std::size_t H = cx.H;
  for (std::size_t r = 0; r < rows; ++r) {
    float mx = kNegInf;
    for (int i = 0; i < t.num_splits; ++i) {
      const float* part = cx.partial + cx.plan->splits[static_cast<std::size_t>(t.first_split + i)].part_offset;
      mx = std::max(mx, part[r]);
    }
    float* acc = s.acc + r * H;
    std::fill(acc, acc + H, 0.0f);
    float l = 0.0f;
    if (mx != kNegInf) {
      for (int i = 0; i < t.num_splits; ++i) {
        const float* part = cx.partial + cx.plan->splits[static_cast<std::size_t>(t.first_split + i)].part_offset;
        if (part[r] == kNegInf) continue;
        const float w = std::exp(part[r] - mx);
        l += part[rows + r] * w;
        AxpyRow(d, part + 2 * rows + r * H, H, w, acc);
      }
    }
    s.m[r] = mx;
    s.l[r] = l;
  }
  Finalize(d, cx, t, rows, s.m.data(), s.l.data(), s.acc, s.rows);
}

// qk output for tile ti: recomputes the scores of visible keys and writes x
// (mode 1) or exp(x - m) / l (mode 2). The buffer is zeroed beforehand.
template <class D, bool kSoftcap, bool kBias>
void QkTile(D d, const Ctx& cx, std::size_t ti) {
  const AttendParams& p = *cx.p;
  const AttendTile& t = cx.plan->tiles[ti];
  if (t.keys.Empty()) return;
  const std::int64_t j0 = t.keys.lo, j1 = std::min(t.keys.hi + 1, p.qk_cols);
  Scratch& s = ThreadScratch();
  const std::size_t rows = SetupTile(d, cx, t, j0, j1, s);
  if (p.bf16_tiles) AmxPackQueries(s.qs, s.rows.size(), cx.H, &s.amx_q);
  for (std::int64_t kb = j0; kb < j1; kb += static_cast<std::int64_t>(cx.bs)) {
    const std::size_t nk = static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(cx.bs), j1 - kb));
    if (!ScoreBlock<D, kSoftcap, kBias>(d, cx, t, rows, kb, 0, nk, nullptr, s)) continue;
    const std::int64_t ke = kb + static_cast<std::int64_t>(nk) - 1;
    for (std::size_t r = 0; r < rows; ++r) {
      const RowInfo& ri = s.rows[r];
      const std::int64_t lo = std::max(ri.keys.lo, kb), hi = std::min(ri.keys.hi, ke);
      if (ri.keys.Empty() || lo > hi) continue;
      const float* st = cx.stats + ((static_cast<std::int64_t>(t.b) * p.num_heads + ri.h) * p.q_len + ri.s) * 2;
      if (p.qk_mode == 2 && st[0] == kNegInf) continue;
      const float* x = s.sc + r * cx.bsp;
      const std::int64_t row_off = ((static_cast<std::int64_t>(t.b) * p.num_heads + ri.h) * p.q_len + ri.s) * p.qk_cols;
      for (std::int64_t j = lo; j <= hi; ++j) {
        const float xv = x[j - kb];
        const float v = p.qk_mode == 1 ? xv : std::exp(xv - st[0]) / st[1];
        StoreFromFloat(p.qk, p.qk_dtype, row_off + j, v);
      }
    }
  }
}

template <class D, bool kSoftcap, bool kBias>
void AttendT(D d, const AttendParams& p, ThreadPool* pool) {
  const AttendPlan plan = BuildAttendPlan(p);
  Ctx cx;
  cx.p = &p;
  cx.plan = &plan;
  cx.H = static_cast<std::size_t>(p.head_size);
  cx.G = static_cast<std::size_t>(plan.group);
  cx.bs = static_cast<std::size_t>(plan.block);
  // Room for a clipped block's scores at an offset plus the Q.K tile padding.
  // The tiles score 16 keys at a time.
  cx.bsp = RoundUp(cx.bs + (p.bf16_tiles ? 16 : kKeyTile), hn::Lanes(d));
  hwy::AlignedFreeUniquePtr<float[]> partial;
  if (plan.partial_floats > 0) {
    partial = hwy::AllocateAligned<float>(static_cast<std::size_t>(plan.partial_floats));
    cx.partial = partial.get();
  }
  const bool want_qk = p.qk != nullptr && (p.qk_mode == 1 || p.qk_mode == 2) && p.qk_cols > 0;
  std::vector<float> stats;
  if (want_qk) {
    stats.assign(static_cast<std::size_t>(p.batch) * static_cast<std::size_t>(p.num_heads) *
                     static_cast<std::size_t>(p.q_len) * 2,
                 kNegInf);
    cx.stats = stats.data();
  }

  // Each pool thread runs a few runs of consecutive splits (which split runs
  // on which thread never changes a result). The items after the runs zero
  // the output rows of padding queries, one batch row each: a batched step
  // that mixes decode rows with a prompt chunk pads every row to the chunk
  // (7 rows x 255 padding queries x 4 KiB for Gemma 3 270M), and those writes
  // then go on beside the other threads' splits instead of before them all.
  const std::int64_t num_splits = static_cast<std::int64_t>(plan.splits.size());
  const std::int64_t runs = std::min<std::int64_t>(
      num_splits, static_cast<std::int64_t>(pool != nullptr ? pool->NumThreads() : 1) * kRunsPerThread);
  const std::size_t row_bytes = static_cast<std::size_t>(p.num_heads) * cx.H * DTypeSize(p.out_dtype);
  ParallelFor(pool, runs + p.batch, [&](std::int64_t r) {
    if (r >= runs) {
      const std::int64_t b = r - runs;
      const std::int64_t vq = std::clamp<std::int64_t>(p.valid_q[b], 0, p.q_len);
      if (vq < p.q_len) {
        std::memset(static_cast<char*>(p.out) + static_cast<std::size_t>(b * p.q_len + vq) * row_bytes, 0,
                    static_cast<std::size_t>(p.q_len - vq) * row_bytes);
      }
      return;
    }
    const std::int64_t i0 = r * num_splits / runs, i1 = (r + 1) * num_splits / runs;
    for (std::int64_t i = i0; i < i1; ++i)
      RunSplit<D, kSoftcap, kBias>(d, cx, plan.splits[static_cast<std::size_t>(i)]);
  });
  std::vector<std::size_t> split_tiles;
  for (std::size_t i = 0; i < plan.tiles.size(); ++i) {
    if (plan.tiles[i].num_splits > 1) split_tiles.push_back(i);
  }
  ParallelFor(pool, static_cast<std::int64_t>(split_tiles.size()),
              [&](std::int64_t i) { CombineTile(d, cx, split_tiles[static_cast<std::size_t>(i)]); });

  if (want_qk) {
    const std::size_t qk_bytes = static_cast<std::size_t>(p.batch) * static_cast<std::size_t>(p.num_heads) *
                                 static_cast<std::size_t>(p.q_len) * static_cast<std::size_t>(p.qk_cols) *
                                 DTypeSize(p.qk_dtype);
    std::memset(p.qk, 0, qk_bytes);
    ParallelFor(pool, static_cast<std::int64_t>(plan.tiles.size()),
                [&](std::int64_t i) { QkTile<D, kSoftcap, kBias>(d, cx, static_cast<std::size_t>(i)); });
  }
}

template <class D>
void AttendPolicies(D d, const AttendParams& p, ThreadPool* pool) {
  const bool softcap = p.softcap > 0.0f;
  const bool bias = p.bias.data != nullptr;
  if (softcap) {
    bias ? AttendT<D, true, true>(d, p, pool) : AttendT<D, true, false>(d, p, pool);
  } else {
    bias ? AttendT<D, false, true>(d, p, pool) : AttendT<D, false, false>(d, p, pool);
  }
}

}  // namespace

// The one dispatch point: vector width from H, then the policies.
void AttendImpl(const AttendParams& p, ThreadPool* pool) {
  if (p.batch <= 0 || p.q_len <= 0 || p.num_heads <= 0 || p.kv_heads <= 0 || p.head_size <= 0) return;
  const hn::ScalableTag<float> df;
  const std::size_t H = static_cast<std::size_t>(p.head_size);
  if (H % hn::Lanes(df) == 0) {
    AttendPolicies(df, p, pool);
  } else if (H % 8 == 0 && hn::Lanes(hn::CappedTag<float, 8>()) <= 8) {
    AttendPolicies(hn::CappedTag<float, 8>(), p, pool);
  } else {
    AttendPolicies(hn::CappedTag<float, 1>(), p, pool);
  }
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvshare::detail {

HWY_EXPORT(AttendImpl);

void AttendOptimized(const AttendParams& p, ThreadPool* pool) { HWY_DYNAMIC_DISPATCH(AttendImpl)(p, pool); }

}  // namespace kvshare::detail
#endif  // HWY_ONCE
