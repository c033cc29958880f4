// Bidirectional spans (include/kvshare/attention/gqa.h, "Bidirectional
// spans"): both kernels against a dense-mask float64 reference written here
// (the [S, T_b] mask built from the rule, then a plain softmax) in every KV
// mode and KV dtype; thread-count, block-size and chunking invariance; decode;
// every validation error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_gqa_case.h"
#include "attention_gqa_random_case.h"
#include "common/str.h"
#include "common_record_measured.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::testing {
namespace {

using SpanList = std::vector<std::pair<std::int64_t, std::int64_t>>;  // one row's [start, end) pairs

// int64 [B, K, 2]: each row's pairs, then (0, 0) padding up to K (at least
// the longest row's count).
Buffer SpansBuffer(const std::vector<SpanList>& rows, std::int64_t K = 0) {
  for (const SpanList& r : rows) K = std::max(K, static_cast<std::int64_t>(r.size()));
  std::vector<std::int64_t> v(rows.size() * static_cast<std::size_t>(K) * 2, 0);
  for (std::size_t b = 0; b < rows.size(); ++b) {
    for (std::size_t k = 0; k < rows[b].size(); ++k) {
      v[(b * static_cast<std::size_t>(K) + k) * 2] = rows[b][k].first;
      v[(b * static_cast<std::size_t>(K) + k) * 2 + 1] = rows[b][k].second;
    }
  }
  return Int64Buffer(v, {static_cast<std::int64_t>(rows.size()), K, 2});
}

// Row b as the kernels see it: T_b keys, query s at position off + s,
// queries s >= valid are padding.
struct RowGeom {
  std::int64_t T = 0, off = 0, valid = 0;
};

struct SpanCase {
  GqaCase c;
  KvMode mode = KvMode::kAppend;
  std::vector<RowGeom> rows;
  std::vector<SpanList> spans;
  std::string desc;

  void SetSpans(const std::vector<SpanList>& s, std::int64_t K = 0) {
    spans = s;
    c.spans = SpansBuffer(s, K);
    c.has_spans = true;
  }
};

// The rule, key by key (HF's blockwise overlay): (causal OR same span) AND
// window, among the row's keys.
bool Visible(const RowGeom& g, const SpanList& spans, int W, std::int64_t pos, std::int64_t j) {
  bool same_span = false;
  for (const auto& [st, en] : spans) same_span = same_span || (st <= pos && pos < en && st <= j && j < en);
  return j < g.T && (j <= pos || same_span) && (W <= 0 || pos - j < W);
}

// K (value = false) or V element (b, n, j, h) where the kernels read it
// after the call (new rows written, in the cache dtype).
double KvAt(const SpanCase& sc, const GqaCase& run, bool value, std::int64_t b, std::int64_t n, std::int64_t j,
            std::int64_t h) {
  const std::int64_t Nkv = run.attrs.kv_num_heads;
  const Buffer* buf = nullptr;
  switch (sc.mode) {
    case KvMode::kAppend:
    case KvMode::kStaticScatter: buf = value ? &run.present_value : &run.present_key; break;
    case KvMode::kShareBuffer:
    case KvMode::kBorrowedEmptyKv:
    case KvMode::kBorrowedOmittedKv: buf = value ? &run.past_value : &run.past_key; break;
    case KvMode::kExternalKv: buf = value ? &run.value : &run.key; break;
  }
  const Shape& s = buf->shape;
  if (s.rank == 3) {  // BSNH: external K/V or a 3-D scatter cache (a ring when circular)
    const std::int64_t rows = s[1], H = s[2] / Nkv;
    const std::int64_t slot = run.attrs.scatter_mode == GqaAttributes::ScatterMode::kCircular ? j % rows : j;
    return buf->Get((b * rows + slot) * s[2] + n * H + h);
  }
  const std::int64_t C = s[2], H = s[3];
  const std::int64_t slot = run.attrs.scatter_mode == GqaAttributes::ScatterMode::kCircular ? j % C : j;
  return buf->Get(((b * Nkv + n) * C + slot) * H + h);
}

// Float64 attention under the dense mask: out [B, S, N, H], zeros for
// padding queries and queries that see no key.
std::vector<double> DenseReference(const SpanCase& sc, const GqaCase& run) {
  const GqaAttributes& a = run.attrs;
  const std::int64_t B = run.query.shape[0], S = run.query.shape[1], N = a.num_heads;
  const std::int64_t H = run.query.shape[2] / N, G = N / a.kv_num_heads;
  const int W = a.local_window_size > 0 ? a.local_window_size : 0;
  const double scale = a.scale > 0.0f ? a.scale : 1.0 / std::sqrt(static_cast<double>(H));
  std::vector<double> out(static_cast<std::size_t>(B * S * N * H), 0.0);
  for (std::int64_t b = 0; b < B; ++b) {
    const RowGeom& g = sc.rows[static_cast<std::size_t>(b)];
    std::vector<char> mask(static_cast<std::size_t>(S * std::max<std::int64_t>(g.T, 0)), 0);
    for (std::int64_t s = 0; s < g.valid; ++s) {
      for (std::int64_t j = 0; j < g.T; ++j) {
        mask[static_cast<std::size_t>(s * g.T + j)] =
            Visible(g, sc.spans[static_cast<std::size_t>(b)], W, g.off + s, j);
      }
    }
    for (std::int64_t s = 0; s < g.valid; ++s) {
      for (std::int64_t h = 0; h < N; ++h) {
        std::vector<double> x;
        std::vector<std::int64_t> js;
        for (std::int64_t j = 0; j < g.T; ++j) {
          if (!mask[static_cast<std::size_t>(s * g.T + j)]) continue;
          double dot = 0.0;
          for (std::int64_t d = 0; d < H; ++d) {
            dot += static_cast<double>(run.query.Get(((b * S + s) * N + h) * H + d)) *
                   KvAt(sc, run, false, b, h / G, j, d);
          }
          double v = scale * dot;
          if (a.softcap > 0.0f) v = a.softcap * std::tanh(v / a.softcap);
          x.push_back(v);
          js.push_back(j);
        }
        if (x.empty()) continue;
        const bool has_sink = run.has_sink || a.smooth_softmax == 1;
        const double sink = run.has_sink ? run.sink.Get(h) : 0.0;
        double m = *std::max_element(x.begin(), x.end());
        if (has_sink) m = std::max(m, sink);
        double den = has_sink ? std::exp(sink - m) : 0.0;
        for (double v : x) den += std::exp(v - m);
        for (std::size_t i = 0; i < x.size(); ++i) {
          const double w = std::exp(x[i] - m) / den;
          for (std::int64_t d = 0; d < H; ++d) {
            out[static_cast<std::size_t>(((b * S + s) * N + h) * H + d)] += w * KvAt(sc, run, true, b, h / G, js[i], d);
          }
        }
      }
    }
  }
  return out;
}

// max |got - want| / max(1, max |want|) within the dtype's tolerance
// (common_test_util.h: fp32 1e-5, fp16 / bf16 1e-2).
void ExpectNear(const Buffer& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(static_cast<std::size_t>(got.Size()), want.size()) << what;
  double diff = 0.0, scale = 1.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got.Get(static_cast<std::int64_t>(i))) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_LE(diff / scale, Tolerance(got.dtype, got.dtype)) << what;
}

// A row's random spans, mostly around this call's queries: lengths 1 to 60,
// touching or apart, some at position 0, some clipped to end exactly at T_b.
SpanList RandomSpans(Rng& r, const RowGeom& g) {
  SpanList out;
  if (g.T <= 0) return out;
  const int count = r.Int(0, 4);
  std::int64_t x =
      r.Coin(0.25) ? 0 : r.Int(static_cast<int>(std::max<std::int64_t>(0, g.off - 12)), static_cast<int>(g.T - 1));
  for (int i = 0; i < count; ++i) {
    const std::int64_t st = x + ((i == 0 || r.Coin(0.3)) ? 0 : r.Int(1, 6));
    if (st >= g.T) break;
    const std::int64_t len = r.Coin(0.3) ? 1 : r.Coin(0.5) ? r.Int(2, 6) : r.Int(7, 60);
    out.push_back({st, std::min(st + len, g.T)});
    x = out.back().second;
  }
  return out;
}

struct CaseOptions {
  int q_len = 0;      // S; 0: random
  bool fp32 = false;  // float32 query and cache (block-size invariance is stated in fp32)
  bool spans = true;  // random spans per row
};

// A random valid case of `mode` with spans. No RoPE and no packed QKV: the
// reference reads the queries as given and K/V where the kernels read them.
SpanCase MakeCase(Rng& r, KvMode mode, const CaseOptions& o = {}) {
  SpanCase sc;
  sc.mode = mode;
  GqaCase& c = sc.c;
  const auto heads = r.Pick<std::pair<int, int>>({{2, 2}, {4, 4}, {4, 1}, {8, 2}, {6, 2}});
  const int N = heads.first, Nkv = heads.second;
  const int H = r.Pick({32, 40, 64, 96});
  const DType dt = o.fp32 ? DType::kFloat32 : r.Pick({DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  DType cdt = o.fp32 ? DType::kFloat32 : r.Pick({DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kQ8_0});
  if (cdt == DType::kQ8_0 && H % kQ8_0BlockSize != 0) cdt = DType::kFloat16;
  const int B = r.Int(1, 3);
  const int S = o.q_len > 0 ? o.q_len : r.Coin(0.3) ? 1 : r.Coin(0.5) ? r.Int(2, 8) : r.Int(9, 40);
  const bool first_prompt = mode == KvMode::kAppend && r.Coin(0.4);
  const int maxT = first_prompt ? S : S + r.Pick({r.Int(0, 8), r.Int(9, 80), r.Int(81, 300)});
  const bool circular = mode == KvMode::kStaticScatter && r.Coin(0.3);
  GqaAttributes& a = c.attrs;
  a.num_heads = N;
  a.kv_num_heads = Nkv;
  if (circular || r.Coin(0.5)) a.local_window_size = r.Coin(0.5) ? r.Int(1, 4) : r.Int(5, maxT + 3);
  if (r.Coin(0.3)) a.softcap = r.Pick({5.0f, 30.0f});
  if (r.Coin(0.5)) a.scale = 3.0f / std::sqrt(static_cast<float>(H));  // peaked: a wrong key shows
  const bool sink = r.Coin(0.25);
  if (!sink && r.Coin(0.2)) a.smooth_softmax = 1;
  const int block = r.Pick({0, 1, 3, 16, 64, -1});
  if (block >= 0) a.kv_block_size = block;
  if (block < 0) a.num_kv_blocks = 1;

  std::mt19937_64& g = r.g;
  std::vector<std::int64_t> T(static_cast<std::size_t>(B));
  for (int b = 0; b < B; ++b) T[static_cast<std::size_t>(b)] = b == 0 ? maxT : r.Int(first_prompt ? 1 : S, maxT);
  const std::int64_t kvh = static_cast<std::int64_t>(Nkv) * H;
  c.query = RandomBuffer(dt, {B, S, static_cast<std::int64_t>(N) * H}, g);
  if (mode != KvMode::kBorrowedOmittedKv && mode != KvMode::kExternalKv) {
    const std::int64_t rows = mode == KvMode::kBorrowedEmptyKv ? 0 : S;
    c.key = RandomBuffer(dt, {B, rows, kvh}, g);
    c.value = RandomBuffer(dt, {B, rows, kvh}, g);
    c.has_key = true;
  }
  std::int64_t cap = 0;
  switch (mode) {
    case KvMode::kAppend:
      if (!first_prompt) {
        cap = maxT - S + r.Int(0, 3);
        c.past_key = RandomBuffer(cdt, {B, Nkv, cap, H}, g);
        c.past_value = RandomBuffer(cdt, {B, Nkv, cap, H}, g);
        c.has_past = true;
      }
      c.present_key = Buffer(cdt, {B, Nkv, std::max<std::int64_t>(maxT, cap), H});
      c.present_value = Buffer(cdt, {B, Nkv, std::max<std::int64_t>(maxT, cap), H});
      c.has_present = true;
      break;
    case KvMode::kShareBuffer:
    case KvMode::kBorrowedEmptyKv:
    case KvMode::kBorrowedOmittedKv:
      cap = maxT + r.Int(0, 3);
      c.past_key = RandomBuffer(cdt, {B, Nkv, cap, H}, g);
      c.past_value = RandomBuffer(cdt, {B, Nkv, cap, H}, g);
      c.has_past = true;
      c.alias_present = mode == KvMode::kShareBuffer;
      break;
    case KvMode::kExternalKv: {
      cap = maxT + r.Int(0, 3) + (maxT == S ? 1 : 0);
      const DType edt = cdt == DType::kQ8_0 ? DType::kQ8_0 : dt;  // the query's dtype, or q8_0
      c.key = RandomBuffer(edt, {B, cap, kvh}, g);
      c.value = RandomBuffer(edt, {B, cap, kvh}, g);
      c.has_key = true;
      break;
    }
    case KvMode::kStaticScatter: {
      RandomScatterCache(r, c, cdt, T, S, maxT, H, circular);
      for (int b = 0; b < B; ++b) {
        const std::int64_t wi = c.write_indices.As64(b), np = c.nonpad.As64(b);
        sc.rows.push_back({np, wi, np - wi});
      }
      break;
    }
  }
  if (mode != KvMode::kStaticScatter) {
    c.SetSeqlens(T, maxT);
    for (int b = 0; b < B; ++b) {
      const std::int64_t t = T[static_cast<std::size_t>(b)];
      sc.rows.push_back({t, first_prompt ? 0 : t - S, S});
    }
  }
  if (sink) {
    c.sink = RandomBuffer(DType::kFloat32, {N}, g);
    c.has_sink = true;
  }
  c.output = Buffer(dt, {B, S, static_cast<std::int64_t>(N) * H});
  std::vector<SpanList> spans;
  for (const RowGeom& row : sc.rows) spans.push_back(o.spans ? RandomSpans(r, row) : SpanList{});
  sc.SetSpans(spans, r.Coin(0.3) ? r.Int(1, 2) + 4 : 0);  // sometimes more padding than needed
  sc.desc = detail::Str(KvModeName(mode), " B=", B, " S=", S, " T=", maxT, " N=", N, "/", Nkv, " H=", H,
                        " dt=", DTypeName(dt), " cache=", DTypeName(cdt), " W=", a.local_window_size,
                        " softcap=", a.softcap, " sink=", sink, " smooth=", a.smooth_softmax, " block=", block,
                        " circular=", circular, " first=", first_prompt, " spans:");
  for (std::size_t b = 0; b < spans.size(); ++b) {
    sc.desc +=
        detail::Str(" row ", b, " (T ", sc.rows[b].T, ", off ", sc.rows[b].off, ", valid ", sc.rows[b].valid, ")");
    for (const auto& [st, en] : spans[b]) sc.desc += detail::Str(" [", st, ",", en, ")");
  }
  return sc;
}

constexpr KvMode kModes[] = {KvMode::kAppend,          KvMode::kShareBuffer,
                             KvMode::kBorrowedEmptyKv, KvMode::kBorrowedOmittedKv,
                             KvMode::kExternalKv,      KvMode::kStaticScatter};

// Both kernels against the dense reference.
void ExpectBothKernelsMatch(const SpanCase& sc, ThreadPool* pool) {
  SCOPED_TRACE(sc.desc);
  GqaCase ref = sc.c, opt = sc.c;
  ASSERT_EQ(DetectKvMode(ref.attrs, ref.Inputs(), ref.Outputs()), sc.mode);
  ref.Run(GqaKernel::kReference);
  opt.Run(GqaKernel::kOptimized, pool);
  const std::vector<double> want = DenseReference(sc, opt);
  ExpectNear(ref.output, want, "reference kernel");
  ExpectNear(opt.output, want, "optimized kernel");
}

TEST(GqaSpans, BothKernelsMatchTheDenseMaskReferenceInEveryMode) {
#if defined(__SANITIZE_ADDRESS__)
  constexpr int kConfigs = 60;
#else
  constexpr int kConfigs = 420;
#endif
  const char* env = std::getenv("KVSHARE_SWEEP_CONFIGS");
  const int configs = env != nullptr ? std::atoi(env) : kConfigs;
  Rng r(20261127);
  ThreadPool pool(2);
  int ran = 0;
  for (int i = 0; i < configs; ++i) {
    ExpectBothKernelsMatch(MakeCase(r, kModes[i % 6]), i % 2 ? &pool : nullptr);
    if (::testing::Test::HasFailure()) break;
    ++ran;
  }
  testing::RecordMeasured("GqaSpans: %d configurations against the dense mask\n", ran);
}

// Hand-picked shapes on a right-padded first prompt (S = 24, rows of 24, 17
// and 6 keys): spans of length 1, at position 0 and at T_b - 1, touching
// spans, several per row, different per row; windows smaller and larger than
// a span; G = 1 and G = 4; softcap and sinks; every KV dtype; block sizes
// from 1 to one block.
TEST(GqaSpans, NastyShapes) {
  const std::vector<std::vector<SpanList>> span_sets = {
      {{{0, 1}}, {{0, 1}}, {{0, 1}}},    {{{23, 24}}, {{16, 17}}, {{5, 6}}},
      {{{0, 24}}, {{0, 17}}, {{0, 6}}},  {{{2, 9}, {9, 10}, {10, 18}, {20, 24}}, {{1, 3}, {5, 17}}, {}},
      {{{4, 20}}, {}, {{1, 4}, {4, 6}}},
  };
  std::mt19937_64 g(5);
  int ran = 0;
  for (const auto& [N, Nkv] : {std::pair{2, 2}, std::pair{8, 2}}) {
    for (DType cdt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kQ8_0}) {
      for (int W : {-1, 1, 3, 30}) {
        for (std::size_t set = 0; set < span_sets.size(); ++set) {
          SpanCase sc;
          GqaCase& c = sc.c;
          const int S = 24, H = 32;
          c.attrs.num_heads = N;
          c.attrs.kv_num_heads = Nkv;
          c.attrs.local_window_size = W;
          c.attrs.softcap = set % 2 ? 30.0f : 0.0f;
          c.attrs.scale = 3.0f / std::sqrt(static_cast<float>(H));
          c.attrs.kv_block_size = std::vector<int>{1, 3, 8, 0, 24}[set];
          c.query = RandomBuffer(DType::kFloat32, {3, S, static_cast<std::int64_t>(N) * H}, g);
          c.key = RandomBuffer(DType::kFloat32, {3, S, static_cast<std::int64_t>(Nkv) * H}, g);
          c.value = RandomBuffer(DType::kFloat32, {3, S, static_cast<std::int64_t>(Nkv) * H}, g);
          c.has_key = true;
          c.present_key = Buffer(cdt, {3, Nkv, S, H});
          c.present_value = Buffer(cdt, {3, Nkv, S, H});
          c.has_present = true;
          c.SetSeqlens({24, 17, 6}, S);
          if (set % 3 == 1) {
            c.sink = RandomBuffer(DType::kFloat32, {N}, g);
            c.has_sink = true;
          }
          c.output = Buffer(DType::kFloat32, {3, S, static_cast<std::int64_t>(N) * H});
          sc.rows = {{24, 0, S}, {17, 0, S}, {6, 0, S}};
          sc.SetSpans(span_sets[set]);
          sc.desc = detail::Str("N=", N, "/", Nkv, " cache=", DTypeName(cdt), " W=", W, " set ", set);
          ExpectBothKernelsMatch(sc, nullptr);
          if (::testing::Test::HasFailure()) return;
          ++ran;
        }
      }
    }
  }
  testing::RecordMeasured("GqaSpans: %d hand-picked cases\n", ran);
}

// A small float32 case, 2 query heads on 1 KV head of 32: query, new K/V and
// output for B rows of S tokens; the caller adds its KV mode's inputs.
GqaCase SmallCase(std::uint64_t seed, std::int64_t B, std::int64_t S) {
  std::mt19937_64 g(seed);
  GqaCase c;
  c.attrs.num_heads = 2;
  c.attrs.kv_num_heads = 1;
  c.query = RandomBuffer(DType::kFloat32, {B, S, 64}, g);
  c.key = RandomBuffer(DType::kFloat32, {B, S, 32}, g);
  c.value = RandomBuffer(DType::kFloat32, {B, S, 32}, g);
  c.has_key = true;
  c.output = Buffer(DType::kFloat32, {B, S, 64});
  return c;
}

// Spans widen the causal bound only: the result must differ from the causal
// one where a span holds later keys (else the tests above prove nothing).
TEST(GqaSpans, ASpanChangesTheQueriesInsideIt) {
  GqaCase c = SmallCase(9, 1, 8);
  c.SetSeqlens({8}, 8);
  GqaCase with = c;
  with.spans = SpansBuffer({{{2, 5}}});
  with.has_spans = true;
  c.Run();
  with.Run();
  const std::int64_t row = 64;
  for (std::int64_t s = 0; s < 8; ++s) {
    const bool same = std::memcmp(c.output.bytes.data() + s * row * 4, with.output.bytes.data() + s * row * 4,
                                  static_cast<std::size_t>(row) * 4) == 0;
    EXPECT_EQ(same, s < 2 || s >= 4) << "query " << s;  // queries 2 and 3 see keys up to 4
  }
}

// Decode (S = 1): the query is the last key of its row, so every span ends at
// or before it and spans change nothing, bitwise, in every mode.
TEST(GqaSpans, DecodeIsBitwiseUnchanged) {
  Rng r(31);
  for (int i = 0; i < 60; ++i) {
    SpanCase sc = MakeCase(r, kModes[i % 6], {.q_len = 1});
    SCOPED_TRACE(sc.desc);
    GqaCase plain = sc.c;
    plain.has_spans = false;
    for (GqaKernel k : {GqaKernel::kReference, GqaKernel::kOptimized}) {
      GqaCase a = sc.c, b = plain;
      a.Run(k);
      b.Run(k);
      EXPECT_EQ(a.output.bytes, b.output.bytes);
    }
  }
}

// The optimized kernel is bitwise the same for any thread count with spans,
// and every block size gives the one-block result to fp32 rounding (as
// tests/attention_sweep_test.cc states it: 1e-6 relative).
TEST(GqaSpans, ThreadCountAndBlockSizeInvariant) {
  Rng r(77);
  ThreadPool one(1), two(2);
  for (int i = 0; i < 36; ++i) {
    SpanCase sc = MakeCase(r, kModes[i % 6], {.fp32 = true});
    SCOPED_TRACE(sc.desc);
    GqaCase a = sc.c, b = sc.c, c = sc.c;
    a.Run(GqaKernel::kOptimized, nullptr);
    b.Run(GqaKernel::kOptimized, &one);
    c.Run(GqaKernel::kOptimized, &two);
    EXPECT_EQ(a.output.bytes, b.output.bytes);
    EXPECT_EQ(a.output.bytes, c.output.bytes);
    GqaCase whole = sc.c;
    whole.attrs.kv_block_size = 0;
    whole.attrs.num_kv_blocks = 1;
    whole.Run(GqaKernel::kOptimized);
    for (int block : {1, 7, 16, 64, 0}) {
      GqaCase blocked = sc.c;
      blocked.attrs.num_kv_blocks = 0;
      blocked.attrs.kv_block_size = block;
      blocked.Run(GqaKernel::kOptimized, &two);
      EXPECT_LT(MaxRelDiff(blocked.output.ToFloat(), whole.output.ToFloat()), 1e-6) << "block " << block;
    }
  }
}

// Rows [s0, s1) of a [1, L, D] buffer as a [1, s1 - s0, D] one.
Buffer Rows(const Buffer& full, std::int64_t s0, std::int64_t s1) {
  const std::int64_t D = full.shape[2];
  Buffer out(full.dtype, {1, s1 - s0, D});
  std::memcpy(out.bytes.data(), full.bytes.data() + DTypeBytes(full.dtype, s0 * D),
              DTypeBytes(full.dtype, (s1 - s0) * D));
  return out;
}

// A prompt of 60 tokens in one static-scatter call and in chunks that end at
// span boundaries or outside spans: each chunk passes the spans that end by
// its T_b (with or without those of earlier chunks, which lie wholly before
// its queries). Every query's output is bitwise the same as in the one call
// (blocks and splits sit at absolute positions, cpu_attend_plan.h), and both
// match the dense reference.
TEST(GqaSpans, ChunkedPrefillMatchesOneCall) {
  const SpanList all = {{5, 15}, {15, 18}, {30, 45}, {59, 60}};
  const std::vector<std::int64_t> cuts = {0, 18, 25, 45, 60};
  const std::int64_t L = 60;
  std::mt19937_64 g(13);
  for (const auto& [W, cdt, block] : {std::tuple{-1, DType::kFloat32, 0}, std::tuple{7, DType::kFloat16, 5},
                                      std::tuple{40, DType::kQ8_0, 1}, std::tuple{3, DType::kBFloat16, 16}}) {
    for (bool keep_earlier : {true, false}) {
      const int N = 4, Nkv = 2, H = 64;
      SpanCase whole;
      GqaCase& c = whole.c;
      c.attrs.num_heads = N;
      c.attrs.kv_num_heads = Nkv;
      c.attrs.local_window_size = W;
      c.attrs.kv_block_size = block;
      c.attrs.scale = 3.0f / std::sqrt(static_cast<float>(H));
      c.query = RandomBuffer(DType::kFloat32, {1, L, N * H}, g);
      c.key = RandomBuffer(DType::kFloat32, {1, L, Nkv * H}, g);
      c.value = RandomBuffer(DType::kFloat32, {1, L, Nkv * H}, g);
      c.has_key = true;
      c.present_key = Buffer(cdt, {1, Nkv, L + 3, H});
      c.present_value = Buffer(cdt, {1, Nkv, L + 3, H});
      c.has_present = true;
      c.SetScatter({L}, {L});
      c.output = Buffer(DType::kFloat32, {1, L, N * H});
      whole.mode = KvMode::kStaticScatter;
      whole.rows = {{L, 0, L}};
      whole.SetSpans({all});
      whole.desc = detail::Str("W=", W, " cache=", DTypeName(cdt), " block=", block, " keep=", keep_earlier);
      SCOPED_TRACE(whole.desc);
      ExpectBothKernelsMatch(whole, nullptr);
      GqaCase one = c;
      one.Run(GqaKernel::kOptimized);

      GqaCase chunk = c;  // its cache carries over from chunk to chunk
      std::fill(chunk.present_key.bytes.begin(), chunk.present_key.bytes.end(), 0);
      std::fill(chunk.present_value.bytes.begin(), chunk.present_value.bytes.end(), 0);
      for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
        const std::int64_t s0 = cuts[i], s1 = cuts[i + 1];
        SpanList mine;
        for (const auto& sp : all) {
          if (sp.second <= s1 && (keep_earlier || sp.first >= s0)) mine.push_back(sp);
        }
        chunk.query = Rows(c.query, s0, s1);
        chunk.key = Rows(c.key, s0, s1);
        chunk.value = Rows(c.value, s0, s1);
        chunk.output = Buffer(DType::kFloat32, {1, s1 - s0, N * H});
        chunk.SetScatter({s1 - s0}, {s1});
        chunk.spans = SpansBuffer({mine});
        chunk.Run(GqaKernel::kOptimized, nullptr);
        const std::size_t row = DTypeBytes(DType::kFloat32, N * H);
        EXPECT_EQ(0, std::memcmp(chunk.output.bytes.data(), one.output.bytes.data() + s0 * row,
                                 static_cast<std::size_t>(s1 - s0) * row))
            << "chunk [" << s0 << ", " << s1 << ")";
      }
    }
  }
}

// ---- Validation ------------------------------------------------------------

std::string ErrorOf(GqaCase c, const GqaRunOptions& options = {}) {
  try {
    GroupQueryAttention(c.attrs, c.Inputs(), c.Outputs(), options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A first prompt of 8 tokens in 2 rows (8 and 5 keys) with valid spans.
GqaCase ValidationCase() {
  GqaCase c = SmallCase(1, 2, 8);
  c.SetSeqlens({8, 5}, 8);
  c.spans = SpansBuffer({{{1, 4}, {4, 8}}, {{2, 5}}});
  c.has_spans = true;
  return c;
}

GqaCase WithSpans(const std::vector<SpanList>& rows) {
  GqaCase c = ValidationCase();
  c.spans = SpansBuffer(rows);
  return c;
}

TEST(GqaSpansValidation, ValidCaseRuns) { EXPECT_EQ(ErrorOf(ValidationCase()), ""); }

TEST(GqaSpansValidation, EveryBadInputIsNamed) {
  const std::vector<std::pair<GqaCase, std::string>> cases = [] {
    std::vector<std::pair<GqaCase, std::string>> v;
    GqaCase c = ValidationCase();
    c.spans = Int32Buffer({1, 4, 2, 5}, {2, 1, 2});
    v.push_back({c, "Input 'bidirectional_spans' must be int64, got int32"});
    c = ValidationCase();
    c.spans = Int64Buffer({1, 4, 5, 2, 5, 6}, {2, 1, 3});
    v.push_back({c, "must have shape [batch_size, K, 2] = [2, K, 2] (K [start, end) pairs per row), got [2, 1, 3]"});
    c = ValidationCase();
    c.spans = Int64Buffer({1, 4}, {1, 1, 2});
    v.push_back({c, "must have shape [batch_size, K, 2] = [2, K, 2]"});
    c = ValidationCase();
    c.attrs.causal = 0;
    v.push_back({c, "Input 'bidirectional_spans' needs causal = 1"});
    v.push_back({WithSpans({{{-1, 3}}, {}}), "bidirectional_spans[0, 0] = [-1, 3): start must be >= 0"});
    v.push_back({WithSpans({{}, {{3, 3}}}), "bidirectional_spans[1, 0] = [3, 3): start must be < end"});
    v.push_back({WithSpans({{{1, 2}, {6, 4}}, {}}), "bidirectional_spans[0, 1] = [6, 4): start must be < end"});
    v.push_back({WithSpans({{{0, 0}, {2, 4}}, {}}),
                 "bidirectional_spans[0, 1] = [2, 4) follows the padding pair (0, 0) at [0, 0]"});
    v.push_back({WithSpans({{{4, 6}, {1, 3}}, {}}),
                 "bidirectional_spans[0, 1] = [1, 3) starts before the previous span ends (6): a row's spans must be "
                 "sorted by start and must not overlap"});
    v.push_back({WithSpans({{{1, 5}, {4, 6}}, {}}),
                 "bidirectional_spans[0, 1] = [4, 6) starts before the previous "
                 "span ends (5)"});
    v.push_back({WithSpans({{}, {{2, 6}}}),
                 "bidirectional_spans[1, 0] = [2, 6) must lie in row 1's keys [0, 5) (seqlens_k[1] + 1 = 5): every "
                 "key of a span must be in the cache when its queries attend; pass only the spans that end by 5"});
    c = ValidationCase();
    c.spans = Buffer(DType::kInt64, {2, 1, 2});
    c.spans.bytes.clear();  // data() of an empty vector: null
    c.spans.bytes.shrink_to_fit();
    v.push_back({c, "Input 'bidirectional_spans' has a null data pointer"});
    return v;
  }();
  for (const auto& [c, want] : cases) {
    const std::string got = ErrorOf(c);
    EXPECT_NE(got.find(want), std::string::npos) << "want: " << want << "\ngot:  " << got;
    EXPECT_EQ(got.rfind("GroupQueryAttention: ", 0), 0u) << got;
  }
}

// In static scatter mode T_b is nonpad_kv_seqlen[b]; a refused call writes
// no cache row and no output.
TEST(GqaSpansValidation, ScatterNamesNonpadAndWritesNothing) {
  std::mt19937_64 g(2);
  GqaCase c = SmallCase(3, 1, 4);
  c.present_key = RandomBuffer(DType::kFloat16, {1, 16, 32}, g);
  c.present_value = RandomBuffer(DType::kFloat16, {1, 16, 32}, g);
  c.has_present = true;
  c.SetScatter({4}, {10});
  c.output = RandomBuffer(DType::kFloat32, {1, 4, 64}, g);
  c.spans = SpansBuffer({{{7, 11}}});
  c.has_spans = true;
  const GqaCase before = c;
  const std::string got = ErrorOf(c);
  EXPECT_NE(got.find("bidirectional_spans[0, 0] = [7, 11) must lie in row 0's keys [0, 10) (nonpad_kv_seqlen[0] = "
                     "10)"),
            std::string::npos)
      << got;
  GqaCase run = c;
  EXPECT_THROW(run.Run(), Error);
  EXPECT_EQ(run.present_key.bytes, before.present_key.bytes);
  EXPECT_EQ(run.output.bytes, before.output.bytes);
  run.spans = SpansBuffer({{{7, 10}}});
  EXPECT_NO_THROW(run.Run());
}

// Device cuda takes spans (tests/cuda_gqa_test.cc runs them on a GPU): the
// host-memory case fails on its first placement or device check (no GPU
// here; a host query on a GPU), never on the spans, and writes nothing.
TEST(GqaSpansValidation, CudaTakesSpans) {
  GqaCase c = ValidationCase();
  const GqaCase before = c;
  const std::string got = ErrorOf(c, GqaRunOptions{.device = Device::kCuda});
  EXPECT_NE(got, "");
  EXPECT_EQ(got.find("bidirectional_spans"), std::string::npos) << got;
  EXPECT_EQ(c.output.bytes, before.output.bytes);
}

}  // namespace
}  // namespace kvshare::testing
