// q8_0 KV caches through the GQA op, in every KV-source mode:
//  - the q8_0 op (reference kernel: dequantize, accumulate in double) against
//    the float32 op on the unquantized K/V, within the error bound stated in
//    attention.h, checked per output element;
//  - the cache bytes it writes are exactly the per-block quantization of what
//    the float32 op writes;
//  - the optimized kernel (int8 blocks widened in registers) against the q8_0
//    reference kernel to fp32 rounding;
//  - head sizes that are not a multiple of 32 are refused with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "attention_gqa_case.h"
#include "common/str.h"
#include "common_record_measured.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::testing {
namespace {

int Int(std::mt19937_64& g, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
bool Coin(std::mt19937_64& g, double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(g) < p; }

// The float32 case and its q8_0 twin: the same values, every cache input
// (past, scatter cache, external K/V) quantized, q8_0 present buffers.
struct Twin {
  GqaCase f32, q8;
  KvMode mode = KvMode::kAppend;
  bool scatter_bnsh = true;
  std::string desc;
};

Buffer Q8Like(const Buffer& f) { return Buffer(DType::kQ8_0, f.shape); }

// variant picks the sub-form of a mode: append (0 past + present, 1 first
// prompt, 2 past without present), scatter (0 linear BNSH, 1 linear 3-D,
// 2 circular, 3 read-only), borrowed (0 no present, 1 present copy).
Twin MakeTwin(std::mt19937_64& g, KvMode mode, int variant) {
  Twin t;
  t.mode = mode;
  GqaCase& c = t.f32;
  const auto heads = std::vector<std::pair<int, int>>{{4, 1}, {8, 2}, {8, 8}, {16, 4}}[Int(g, 0, 3)];
  const int N = heads.first, Nkv = heads.second;
  const int H = std::vector<int>{32, 64, 128, 256}[Int(g, 0, 3)];
  const int B = Int(g, 1, 3);
  const bool first = mode == KvMode::kAppend && variant == 1;
  const int S = first ? Int(g, 1, 12) : (Coin(g) ? 1 : Int(g, 2, 9));
  const int maxT = first ? S : std::max(S, Int(g, 1, 200));
  std::vector<std::int64_t> T(static_cast<std::size_t>(B));
  for (auto& x : T) x = first ? Int(g, 1, S) : Int(g, S, maxT);
  T[0] = maxT;
  const std::int64_t tsl = maxT, kvh = static_cast<std::int64_t>(Nkv) * H;
  GqaAttributes& a = c.attrs;
  a.num_heads = N;
  a.kv_num_heads = Nkv;
  const bool circular = mode == KvMode::kStaticScatter && variant == 2;
  if (circular || Coin(g, 0.4)) a.local_window_size = Int(g, 1, maxT + 3);
  if (Coin(g, 0.3)) a.softcap = Coin(g) ? 5.0f : 30.0f;
  a.scale = static_cast<float>(std::uniform_real_distribution<double>(0.5, 2.0)(g) / std::sqrt(H));
  if (Coin(g, 0.3)) a.kv_block_size = std::vector<int>{1, 7, 64}[Int(g, 0, 2)];
  const bool sink = Coin(g, 0.25);
  c.query = RandomBuffer(DType::kFloat32, {B, S, static_cast<std::int64_t>(N) * H}, g);
  std::int64_t cap = 0;
  auto new_kv = [&] {
    c.key = RandomBuffer(DType::kFloat32, {B, S, kvh}, g);
    c.value = RandomBuffer(DType::kFloat32, {B, S, kvh}, g, 2.0f);
    c.has_key = true;
  };
  auto past = [&](std::int64_t rows) {
    c.past_key = RandomBuffer(DType::kFloat32, {B, Nkv, rows, H}, g);
    c.past_value = RandomBuffer(DType::kFloat32, {B, Nkv, rows, H}, g, 2.0f);
    c.has_past = true;
  };
  auto present = [&](std::int64_t rows) {  // zeroed BNSH present buffers
    c.present_key = Buffer(DType::kFloat32, {B, Nkv, rows, H});
    c.present_value = Buffer(DType::kFloat32, {B, Nkv, rows, H});
    c.has_present = true;
  };
  switch (mode) {
    case KvMode::kAppend: {
      new_kv();
      cap = first ? 0 : maxT - S + Int(g, 0, 3);
      if (!first) past(cap);
      if (variant != 2) present(std::max(tsl, cap));
      break;
    }
    case KvMode::kShareBuffer:
      new_kv();
      cap = tsl + Int(g, 0, 3);
      past(cap);
      c.alias_present = true;
      break;
    case KvMode::kBorrowedEmptyKv:
    case KvMode::kBorrowedOmittedKv:
      cap = maxT + Int(g, 0, 3);
      past(cap);
      if (mode == KvMode::kBorrowedEmptyKv) {
        c.key = Buffer(DType::kFloat32, {B, 0, kvh});
        c.value = Buffer(DType::kFloat32, {B, 0, kvh});
        c.has_key = true;
      }
      if (variant == 1) present(cap);
      break;
    case KvMode::kExternalKv:
      cap = maxT + Int(g, 0, 3);
      if (cap == S) ++cap;
      c.key = RandomBuffer(DType::kFloat32, {B, cap, kvh}, g);
      c.value = RandomBuffer(DType::kFloat32, {B, cap, kvh}, g, 2.0f);
      c.has_key = true;
      if (variant == 1) present(cap);
      break;
    case KvMode::kStaticScatter: {
      const bool read_only = variant == 3;
      if (!read_only) new_kv();
      cap = circular ? a.local_window_size + S - 1 + Int(g, 0, 3) : maxT + Int(g, 0, 3);
      t.scatter_bnsh = variant != 1;
      const Shape cs = t.scatter_bnsh ? Shape{B, Nkv, cap, H} : Shape{B, cap, kvh};
      c.present_key = RandomBuffer(DType::kFloat32, cs, g);
      c.present_value = RandomBuffer(DType::kFloat32, cs, g, 2.0f);
      c.has_present = true;
      if (circular) a.scatter_mode = GqaAttributes::ScatterMode::kCircular;
      std::vector<std::int64_t> n, end;
      for (int b = 0; b < B; ++b) {
        n.push_back(Coin(g, 0.3) ? Int(g, 0, S) : S);
        end.push_back(circular ? T[static_cast<std::size_t>(b)] + Int(g, 0, 50) : T[static_cast<std::size_t>(b)]);
      }
      c.SetScatter(n, end);
      break;
    }
  }
  if (mode != KvMode::kStaticScatter) c.SetSeqlens(T, tsl);
  if (!circular && Coin(g, 0.3)) {
    c.bias = RandomBuffer(DType::kFloat32, {B, N, S, mode == KvMode::kStaticScatter ? cap : tsl}, g);
    c.has_bias = true;
  }
  if (sink) {
    c.sink = RandomBuffer(DType::kFloat32, {N}, g);
    c.has_sink = true;
  } else if (Coin(g, 0.2)) {
    a.smooth_softmax = 1;
  }
  c.output = Buffer(DType::kFloat32, {B, S, static_cast<std::int64_t>(N) * H});

  // The twin: the same inputs with q8_0 caches.
  t.q8 = c;
  GqaCase& q = t.q8;
  if (c.has_past) {
    q.past_key = QuantizedQ8_0(c.past_key);
    q.past_value = QuantizedQ8_0(c.past_value);
  }
  if (c.has_present) {
    const bool initial = mode == KvMode::kStaticScatter;  // the cache's contents are inputs too
    q.present_key = initial ? QuantizedQ8_0(c.present_key) : Q8Like(c.present_key);
    q.present_value = initial ? QuantizedQ8_0(c.present_value) : Q8Like(c.present_value);
  }
  if (mode == KvMode::kExternalKv) {
    q.key = QuantizedQ8_0(c.key);
    q.value = QuantizedQ8_0(c.value);
  }
  t.desc = detail::Str(KvModeName(mode), " variant=", variant, " B=", B, " S=", S, " T=", maxT, " N=", N, "/", Nkv,
                       " H=", H, " W=", a.local_window_size, " softcap=", a.softcap, " sink=", sink,
                       " smooth=", a.smooth_softmax, " bias=", c.has_bias, " block=", a.kv_block_size);
  return t;
}

// Every K or V row the f32 run could have attended to, per (b, n): rows of
// past / present (after the run) and of key / value. A superset of the
// visible keys, so bounds taken over it hold for the visible ones.
struct Rows {
  std::vector<std::vector<const float*>> at;  // [b * Nkv + n] -> rows of H floats
  std::vector<std::vector<float>> storage;
};

void AddRows(Rows& r, const Buffer& buf, bool bnsh, int B, int Nkv, int H) {
  if (buf.Size() == 0) return;
  r.storage.push_back(buf.ToFloat());
  const float* base = r.storage.back().data();
  const std::int64_t C = bnsh ? buf.shape[2] : buf.shape[1];
  for (int b = 0; b < B; ++b) {
    for (int n = 0; n < Nkv; ++n) {
      for (std::int64_t j = 0; j < C; ++j) {
        const std::int64_t off =
            bnsh ? ((static_cast<std::int64_t>(b) * Nkv + n) * C + j) * H
                 : (static_cast<std::int64_t>(b) * C + j) * Nkv * H + static_cast<std::int64_t>(n) * H;
        r.at[static_cast<std::size_t>(b * Nkv + n)].push_back(base + off);
      }
    }
  }
}

Rows CandidateRows(const Twin& t, bool values) {
  const GqaCase& c = t.f32;
  const int B = static_cast<int>(c.query.shape[0]), Nkv = c.attrs.kv_num_heads;
  const int H = static_cast<int>(c.query.shape[2]) / c.attrs.num_heads;
  Rows r;
  r.storage.reserve(3);
  r.at.resize(static_cast<std::size_t>(B * Nkv));
  if (c.has_past) AddRows(r, values ? c.past_value : c.past_key, true, B, Nkv, H);
  if (c.has_present) AddRows(r, values ? c.present_value : c.present_key, t.scatter_bnsh, B, Nkv, H);
  if (c.has_key) AddRows(r, values ? c.value : c.key, false, B, Nkv, H);
  return r;
}

// Per-block error bounds of a row (common/q8_0.h).
std::vector<double> BlockBounds(const float* row, int H) {
  std::vector<double> e(static_cast<std::size_t>(H / 32));
  for (int c = 0; c < H / 32; ++c) {
    double amax = 0.0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(static_cast<double>(row[c * 32 + i])));
    e[static_cast<std::size_t>(c)] = detail::Q8_0ErrorBound(amax);
  }
  return e;
}

// Checks |out_q8 - out_f32| per element against attention.h's bound; returns
// the largest error / bound ratio.
double ExpectWithinBound(const Twin& t) {
  const GqaCase& c = t.f32;
  const int B = static_cast<int>(c.query.shape[0]), S = static_cast<int>(c.query.shape[1]);
  const int N = c.attrs.num_heads, Nkv = c.attrs.kv_num_heads, G = N / Nkv;
  const int H = static_cast<int>(c.query.shape[2]) / N;
  const Rows krows = CandidateRows(t, false), vrows = CandidateRows(t, true);
  const std::vector<float> q = c.query.ToFloat(), of = c.output.ToFloat(), oq = t.q8.output.ToFloat();
  double worst = 0.0;
  for (int b = 0; b < B; ++b) {
    for (int n = 0; n < Nkv; ++n) {
      const auto& ks = krows.at[static_cast<std::size_t>(b * Nkv + n)];
      const auto& vs = vrows.at[static_cast<std::size_t>(b * Nkv + n)];
      std::vector<std::vector<double>> ek;
      for (const float* k : ks) ek.push_back(BlockBounds(k, H));
      std::vector<double> vmax(static_cast<std::size_t>(H), 0.0), ev(static_cast<std::size_t>(H), 0.0);
      for (const float* v : vs) {
        const std::vector<double> e = BlockBounds(v, H);
        for (int i = 0; i < H; ++i) {
          vmax[static_cast<std::size_t>(i)] =
              std::max(vmax[static_cast<std::size_t>(i)], std::fabs(static_cast<double>(v[i])));
          ev[static_cast<std::size_t>(i)] =
              std::max(ev[static_cast<std::size_t>(i)], e[static_cast<std::size_t>(i / 32)]);
        }
      }
      for (int s = 0; s < S; ++s) {
        for (int h = n * G; h < (n + 1) * G; ++h) {
          const float* qv = &q[((static_cast<std::size_t>(b) * S + s) * N + h) * H];
          std::vector<double> q1(static_cast<std::size_t>(H / 32), 0.0);  // ||q_c||_1 per block
          for (int i = 0; i < H; ++i) q1[static_cast<std::size_t>(i / 32)] += std::fabs(static_cast<double>(qv[i]));
          double eps = 0.0;
          for (const auto& e : ek) {
            double sum = 0.0;
            for (std::size_t cb = 0; cb < e.size(); ++cb) sum += q1[cb] * e[cb];
            eps = std::max(eps, static_cast<double>(c.attrs.scale) * sum);
          }
          for (int i = 0; i < H; ++i) {
            const std::size_t at = ((static_cast<std::size_t>(b) * S + s) * N + h) * H + static_cast<std::size_t>(i);
            const double vm = vmax[static_cast<std::size_t>(i)];
            // + fp32 rounding of the two stored outputs.
            const double bound = std::expm1(2.0 * eps) * vm + ev[static_cast<std::size_t>(i)] + 1e-6 * vm + 1e-7;
            const double err = std::fabs(static_cast<double>(oq[at]) - of[at]);
            EXPECT_LE(err, bound) << t.desc << " b=" << b << " s=" << s << " h=" << h << " i=" << i;
            if (err > bound) return err / bound;
            worst = std::max(worst, err / bound);
          }
        }
      }
    }
  }
  return worst;
}

// Every cache byte the q8_0 op holds afterwards is the quantization of what
// the float32 op holds: writes quantize per block, copies keep blocks.
void ExpectCachesAreQuantizedF32Caches(const Twin& t) {
  const GqaCase &f = t.f32, &q = t.q8;
  if (f.has_present) {
    EXPECT_EQ(q.present_key.bytes, QuantizedQ8_0(f.present_key).bytes) << "present_key " << t.desc;
    EXPECT_EQ(q.present_value.bytes, QuantizedQ8_0(f.present_value).bytes) << "present_value " << t.desc;
  }
  if (f.has_past) {
    EXPECT_EQ(q.past_key.bytes, QuantizedQ8_0(f.past_key).bytes) << "past_key " << t.desc;
    EXPECT_EQ(q.past_value.bytes, QuantizedQ8_0(f.past_value).bytes) << "past_value " << t.desc;
  }
}

struct ModeVariant {
  KvMode mode;
  int variant;
};

const std::vector<ModeVariant>& AllForms() {
  static const std::vector<ModeVariant> forms = {{KvMode::kAppend, 0},
                                                 {KvMode::kAppend, 1},
                                                 {KvMode::kAppend, 2},
                                                 {KvMode::kShareBuffer, 0},
                                                 {KvMode::kBorrowedEmptyKv, 0},
                                                 {KvMode::kBorrowedEmptyKv, 1},
                                                 {KvMode::kBorrowedOmittedKv, 0},
                                                 {KvMode::kBorrowedOmittedKv, 1},
                                                 {KvMode::kExternalKv, 0},
                                                 {KvMode::kExternalKv, 1},
                                                 {KvMode::kStaticScatter, 0},
                                                 {KvMode::kStaticScatter, 1},
                                                 {KvMode::kStaticScatter, 2},
                                                 {KvMode::kStaticScatter, 3}};
  return forms;
}

TEST(GqaQ8_0, EveryModeWithinTheStatedBoundOfFloat32) {
  std::mt19937_64 g(180418);
  double worst = 0.0;
  int runs = 0;
  for (int round = 0; round < 6; ++round) {
    for (const ModeVariant& mv : AllForms()) {
      Twin t = MakeTwin(g, mv.mode, mv.variant);
      SCOPED_TRACE(t.desc);
      ASSERT_EQ(DetectKvMode(t.q8.attrs, t.q8.Inputs(), t.q8.Outputs()), mv.mode);
      t.f32.Run(GqaKernel::kReference);
      t.q8.Run(GqaKernel::kReference);
      worst = std::max(worst, ExpectWithinBound(t));
      ExpectCachesAreQuantizedF32Caches(t);
      if (HasFailure()) return;
      ++runs;
    }
  }
  // The bound is an upper bound, not an estimate: random errors stay well inside it.
  testing::RecordMeasured("q8_0 vs float32, %d cases: worst |error| / bound = %.3f\n", runs, worst);
  EXPECT_GT(worst, 0.0);
}

// The optimized kernel reads the same blocks as the reference kernel: they
// agree to fp32 rounding, in every mode, on one and two threads.
TEST(GqaQ8_0, OptimizedMatchesReferenceKernelInEveryMode) {
  std::mt19937_64 g(7);
  ThreadPool pool(2);
  for (int round = 0; round < 6; ++round) {
    for (const ModeVariant& mv : AllForms()) {
      const Twin t = MakeTwin(g, mv.mode, mv.variant);
      GqaCase ref = t.q8, opt = t.q8;
      SCOPED_TRACE(t.desc);
      ref.Run(GqaKernel::kReference);
      opt.Run(GqaKernel::kOptimized, round % 2 ? &pool : nullptr);
      EXPECT_LT(MaxRelDiff(opt.output.ToFloat(), ref.output.ToFloat()), 1e-5);
      EXPECT_EQ(opt.present_key.bytes, ref.present_key.bytes);
      EXPECT_EQ(opt.past_value.bytes, ref.past_value.bytes);
      if (HasFailure()) return;
    }
  }
}

std::string ErrorOf(GqaCase c) {
  try {
    c.Run();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A decode step on a past of 4 rows, head size H, caches in cache_dt.
GqaCase Decode(int H, DType cache_dt) {
  std::mt19937_64 g(3);
  GqaCase c;
  c.attrs.num_heads = 2;
  c.attrs.kv_num_heads = 1;
  c.query = RandomBuffer(DType::kFloat32, {1, 1, 2 * H}, g);
  c.key = RandomBuffer(DType::kFloat32, {1, 1, H}, g);
  c.value = RandomBuffer(DType::kFloat32, {1, 1, H}, g);
  c.has_key = true;
  c.past_key = Buffer(cache_dt, {1, 1, 4, H});
  c.past_value = Buffer(cache_dt, {1, 1, 4, H});
  c.has_past = true;
  c.present_key = Buffer(cache_dt, {1, 1, 5, H});
  c.present_value = Buffer(cache_dt, {1, 1, 5, H});
  c.has_present = true;
  c.seqlens_k = Int32Buffer({4}, {1});
  c.total_len = Int32Buffer({5}, {1});
  c.has_seqlens = true;
  c.output = Buffer(DType::kFloat32, {1, 1, 2 * H});
  return c;
}

TEST(GqaQ8_0, HeadSizeNotAMultipleOf32IsRefused) {
  EXPECT_EQ(ErrorOf(Decode(64, DType::kQ8_0)), "");
  // A q8_0 view of H = 40 has no whole blocks: the buffers are sized by hand.
  GqaCase c = Decode(32, DType::kQ8_0);
  for (Buffer* b : {&c.past_key, &c.past_value}) b->shape = Shape{1, 1, 4, 40};
  for (Buffer* b : {&c.present_key, &c.present_value}) b->shape = Shape{1, 1, 5, 40};
  std::mt19937_64 g(4);
  c.query = RandomBuffer(DType::kFloat32, {1, 1, 80}, g);
  c.key = RandomBuffer(DType::kFloat32, {1, 1, 40}, g);
  c.value = RandomBuffer(DType::kFloat32, {1, 1, 40}, g);
  c.output = Buffer(DType::kFloat32, {1, 1, 80});
  const std::string e = ErrorOf(c);
  EXPECT_NE(e.find("'past_key' is q8_0"), std::string::npos) << e;
  EXPECT_NE(e.find("head_size must be a multiple of 32, got 40"), std::string::npos) << e;
  // Present only (first prompt, no past).
  GqaCase p = c;
  p.has_past = false;
  p.total_len = Int32Buffer({1}, {1});
  p.seqlens_k = Int32Buffer({0}, {1});
  for (Buffer* b : {&p.present_key, &p.present_value}) b->shape = Shape{1, 1, 1, 40};
  EXPECT_NE(ErrorOf(p).find("'present_key' is q8_0"), std::string::npos) << ErrorOf(p);
  // New key/value rows are never q8_0 (only the borrowed external cache may be).
  GqaCase k = Decode(64, DType::kFloat32);
  k.key = QuantizedQ8_0(k.key);
  EXPECT_NE(ErrorOf(k).find("Input 'key' must have the dtype of 'query' (float32), got q8_0"), std::string::npos)
      << ErrorOf(k);
  // Past and present must agree.
  GqaCase m = Decode(64, DType::kQ8_0);
  m.present_key = Buffer(DType::kFloat16, {1, 1, 5, 64});
  m.present_value = Buffer(DType::kFloat16, {1, 1, 5, 64});
  EXPECT_NE(ErrorOf(m).find("must have the dtype of 'past_key' (q8_0), got float16"), std::string::npos) << ErrorOf(m);
}

}  // namespace
}  // namespace kvshare::testing
