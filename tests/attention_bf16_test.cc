// The GQA op's bf16 products (GqaRunOptions::matmul_precision = kBf16,
// src/attention/cpu_attend_bf16.cc):
//  - against the op's double reference kernel on the same inputs, within the
//    bound stated in kvshare/attention/gqa.h, per output element, at query
//    lengths around the 64-query blocks (1, 63, 64, 65, 130, 200), head sizes
//    64 / 72 / 128, GQA groups (N_kv < N), right-padded rows (T_b < S), packed QKV and
//    16-bit tensors; the error must also be above f32 rounding (a silent f32
//    fallback fails);
//  - 1 and 2 pool threads give the same bits; K/V read in place or through
//    present outputs give the same bits;
//  - every combination it does not cover is refused with kvshare::Error
//    naming matmul_precision and the parameter, before any output is written.
//  - on CPUs with the AMX tile form (amx_attend.h): causal prompts with a
//    window, softcap, sink and bias within the same bound, and a prompt in
//    one call equal, bit for bit, to a cached prefix plus a decode step plus
//    the rest.
// The numeric tests skip where oneDNN has no bf16 matmul (below AVX-512).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention/amx_attend.h"
#include "attention/bf16_support.h"
#include "attention_gqa_case.h"
#include "common/str.h"
#include "common_record_measured.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::testing {
namespace {

constexpr double kU = 1.0 / 256;  // 2^-8: one bf16 rounding

double Gamma(double n) { return n * std::ldexp(1.0, -24) / (1 - n * std::ldexp(1.0, -24)); }

GqaRunOptions Bf16(ThreadPool* pool = nullptr) {
  GqaRunOptions o;
  o.pool = pool;
  o.matmul_precision = GqaMatMulPrecision::kBf16;
  return o;
}

struct Shape4 {
  int B, S, N, Nkv, H;
};

// A first prompt of S tokens per row, causal = 0; row b > 0 may be
// right-padded to T_b = S - pad keys (all S of its queries see those keys).
GqaCase MakeCase(const Shape4& sh, DType dt, bool packed, int pad, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  GqaCase c;
  c.attrs.num_heads = sh.N;
  c.attrs.kv_num_heads = sh.Nkv;
  c.attrs.causal = 0;  // the tile tests' edits (Modes) may set causal, window, softcap, bias, sink
  c.attrs.scale = static_cast<float>(1.0 / std::sqrt(sh.H));
  const std::int64_t qh = static_cast<std::int64_t>(sh.N) * sh.H, kvh = static_cast<std::int64_t>(sh.Nkv) * sh.H;
  if (packed) {
    c.query = RandomBuffer(dt, {sh.B, sh.S, qh + 2 * kvh}, g);
  } else {
    c.query = RandomBuffer(dt, {sh.B, sh.S, qh}, g);
    c.key = RandomBuffer(dt, {sh.B, sh.S, kvh}, g);
    c.value = RandomBuffer(dt, {sh.B, sh.S, kvh}, g);
    c.has_key = true;
  }
  std::vector<std::int64_t> T(static_cast<std::size_t>(sh.B), sh.S);
  for (std::size_t b = 1; b < T.size(); ++b) T[b] = std::max<std::int64_t>(1, sh.S - pad);
  c.SetSeqlens(T, sh.S);
  c.output = Buffer(dt, {sh.B, sh.S, qh});
  return c;
}

// Per-element bound of gqa.h for query (b, s), head h, over the T keys of
// row b: q, k, v read from the case (packed or not) as doubles.
struct Bound {
  const GqaCase& c;
  Shape4 sh;
  bool packed;

  double Q(int b, int s, int h, int d) const {
    const std::int64_t w =
        packed ? static_cast<std::int64_t>(sh.N + 2 * sh.Nkv) * sh.H : static_cast<std::int64_t>(sh.N) * sh.H;
    return c.query.Get((static_cast<std::int64_t>(b) * sh.S + s) * w + static_cast<std::int64_t>(h) * sh.H + d);
  }
  double KV(bool value, int b, int j, int n, int d) const {
    const std::int64_t kvh = static_cast<std::int64_t>(sh.Nkv) * sh.H;
    if (packed) {
      const std::int64_t w = static_cast<std::int64_t>(sh.N) * sh.H + 2 * kvh;
      return c.query.Get((static_cast<std::int64_t>(b) * sh.S + j) * w + static_cast<std::int64_t>(sh.N) * sh.H +
                         (value ? kvh : 0) + static_cast<std::int64_t>(n) * sh.H + d);
    }
    const Buffer& buf = value ? c.value : c.key;
    return buf.Get((static_cast<std::int64_t>(b) * sh.S + j) * kvh + static_cast<std::int64_t>(n) * sh.H + d);
  }
  // Fills per-dimension bounds for (b, s, h) over T keys.
  void At(int b, int s, int h, int T, std::vector<double>& out) const {
    const int n = h / (sh.N / sh.Nkv);
    double amax = 0;
    for (int j = 0; j < T; ++j) {
      double a = 0;
      for (int d = 0; d < sh.H; ++d) a += std::fabs(Q(b, s, h, d) * KV(false, b, j, n, d));
      amax = std::max(amax, a);
    }
    const double eps = c.attrs.scale * amax * (2 * kU + kU * kU + Gamma(sh.H) * (1 + kU) * (1 + kU));
    const double r = std::exp(2 * eps) * (1 + kU) / (1 - kU) * (1 + std::ldexp(1.0, -16)) - 1;
    // gamma_2T: the tile form's blocked softmax adds a rescale per block of keys (gqa.h).
    const double f = (1 + r) * (1 + kU) * (1 + Gamma(2 * T)) * (1 + Gamma(2 * T)) * (1 + std::ldexp(1.0, -24)) - 1;
    out.assign(static_cast<std::size_t>(sh.H), 0.0);
    for (int d = 0; d < sh.H; ++d) {
      double vmax = 0;
      for (int j = 0; j < T; ++j) vmax = std::max(vmax, std::fabs(KV(true, b, j, n, d)));
      out[static_cast<std::size_t>(d)] = f * vmax;
    }
  }
};

// Runs sh through the bf16 op (no pool, and 2 threads: same bits) and the
// reference; checks every element against the bound; returns the largest
// error relative to its bound.
double CheckCase(const Shape4& sh, DType dt, bool packed, int pad, std::uint64_t seed,
                 void (*edit)(GqaCase&) = nullptr, const char* mode = "") {
  const std::string what = detail::Str("B ", sh.B, " S ", sh.S, " N ", sh.N, "/", sh.Nkv, " H ", sh.H, " ",
                                       DTypeName(dt), packed ? " packed" : "", " pad ", pad, mode);
  GqaCase c = MakeCase(sh, dt, packed, pad, seed);
  if (edit != nullptr) edit(c);
  GqaCase ref = c;
  ref.Run(GqaKernel::kReference);
  GroupQueryAttention(c.attrs, c.Inputs(), c.Outputs(), Bf16());
  const Buffer one = c.output;
  ThreadPool pool(2);
  std::fill(c.output.bytes.begin(), c.output.bytes.end() - 1, 0xAB);  // the data, not the guard byte
  GroupQueryAttention(c.attrs, c.Inputs(), c.Outputs(), Bf16(&pool));
  EXPECT_TRUE(one.bytes == c.output.bytes) << what << ": 1 and 2 threads differ";
  const Bound bound{c, sh, packed};
  const double u_out = dt == DType::kFloat32 ? std::ldexp(1.0, -24) : (dt == DType::kBFloat16 ? kU : 1.0 / 2048);
  double worst = 0, max_err = 0;
  std::vector<double> bd;
  for (int b = 0; b < sh.B; ++b) {
    const int T = b == 0 ? sh.S : std::max(1, sh.S - pad);
    for (int s = 0; s < sh.S; ++s) {
      for (int h = 0; h < sh.N; ++h) {
        const std::int64_t base = ((static_cast<std::int64_t>(b) * sh.S + s) * sh.N + h) * sh.H;
        bound.At(b, s, h, T, bd);
        for (int d = 0; d < sh.H; ++d) {
          const double want = ref.output.Get(base + d), got = one.Get(base + d);
          // Both outputs are rounded to the output dtype.
          const double lim =
              bd[static_cast<std::size_t>(d)] + 2 * u_out * (std::fabs(want) + bd[static_cast<std::size_t>(d)]);
          const double err = std::fabs(got - want);
          max_err = std::max(max_err, err);
          worst = std::max(worst, err / lim);
          if (err > lim) {
            ADD_FAILURE() << what << ": b " << b << " s " << s << " h " << h << " d " << d << ": " << got
                          << " vs reference " << want << ", bound " << lim;
            return worst;
          }
        }
      }
    }
  }
  // bf16 products leave errors far above f32 rounding: a silent f32 path fails.
  EXPECT_GT(max_err, 1e-4) << what << ": errors at f32 level, the bf16 products did not run";
  RecordMeasured("%s: max |error| %.3g, at most %.3f of the bound", what.c_str(), max_err, worst);
  return worst;
}

class AttentionBf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::Bf16MatMulSupported()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU";
  }
};

TEST_F(AttentionBf16Test, MatchesReferenceWithinBound) {
  const Shape4 shapes[] = {{1, 1, 2, 2, 64},   {1, 63, 4, 2, 64},  {1, 64, 2, 2, 72},
                           {2, 65, 2, 1, 128}, {1, 130, 3, 3, 72}, {2, 200, 4, 2, 64}};
  std::uint64_t seed = 1;
  for (const Shape4& sh : shapes) CheckCase(sh, DType::kFloat32, false, sh.B > 1 ? 7 : 0, seed++);
}

TEST_F(AttentionBf16Test, PackedQkvAndSixteenBitTensors) {
  CheckCase({1, 70, 4, 2, 64}, DType::kFloat32, true, 0, 11);
  CheckCase({2, 66, 2, 2, 72}, DType::kBFloat16, false, 3, 12);
  CheckCase({1, 65, 4, 1, 128}, DType::kFloat16, true, 0, 13);
}

// The same values unpacked and packed give the same bits.
TEST_F(AttentionBf16Test, PackedEqualsUnpacked) {
  const Shape4 sh{1, 67, 4, 2, 64};
  GqaCase packed = MakeCase(sh, DType::kFloat32, true, 0, 21);
  GqaCase split = MakeCase(sh, DType::kFloat32, false, 0, 21);
  const std::int64_t qh = static_cast<std::int64_t>(sh.N) * sh.H, kvh = static_cast<std::int64_t>(sh.Nkv) * sh.H;
  for (std::int64_t s = 0; s < sh.S; ++s) {
    for (std::int64_t i = 0; i < qh; ++i) split.query.Set(s * qh + i, packed.query.Get(s * (qh + 2 * kvh) + i));
    for (std::int64_t i = 0; i < kvh; ++i) {
      split.key.Set(s * kvh + i, packed.query.Get(s * (qh + 2 * kvh) + qh + i));
      split.value.Set(s * kvh + i, packed.query.Get(s * (qh + 2 * kvh) + qh + kvh + i));
    }
  }
  GroupQueryAttention(packed.attrs, packed.Inputs(), packed.Outputs(), Bf16());
  GroupQueryAttention(split.attrs, split.Inputs(), split.Outputs(), Bf16());
  EXPECT_TRUE(packed.output.bytes == split.output.bytes);
}

// With present outputs the K/V go through the op's cache copy instead of
// being read in place: the same bits out, and the f32 op's present rows.
TEST_F(AttentionBf16Test, PresentOutputsChangeNothing) {
  const Shape4 sh{1, 70, 4, 2, 72};
  GqaCase plain = MakeCase(sh, DType::kFloat32, false, 0, 41);
  GqaCase kept = plain, f32 = plain;
  for (GqaCase* c : {&kept, &f32}) {
    c->present_key = Buffer(DType::kFloat32, {sh.B, sh.Nkv, sh.S, sh.H});
    c->present_value = Buffer(DType::kFloat32, {sh.B, sh.Nkv, sh.S, sh.H});
    c->has_present = true;
  }
  GroupQueryAttention(plain.attrs, plain.Inputs(), plain.Outputs(), Bf16());
  GroupQueryAttention(kept.attrs, kept.Inputs(), kept.Outputs(), Bf16());
  f32.Run();
  EXPECT_TRUE(plain.output.bytes == kept.output.bytes);
  EXPECT_TRUE(kept.present_key.bytes == f32.present_key.bytes);
  EXPECT_TRUE(kept.present_value.bytes == f32.present_value.bytes);
}

// The AMX tile form (amx_attend.h): every mode of the blocked kernel, on CPUs
// where AmxAttendUsable().
class AttentionBf16TilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::AmxAttendUsable()) GTEST_SKIP() << "no AMX tile form on this CPU (or KVSHARE_KERNEL holds it)";
  }
};

// Causal prompts with a window, softcap, a head sink and a bias, over several
// key blocks and two splits (1100 keys), within the gqa.h bound per element.
TEST_F(AttentionBf16TilesTest, CausalModesWithinBound) {
  CheckCase({1, 300, 4, 2, 64}, DType::kFloat32, false, 0, 61, [](GqaCase& c) { c.attrs.causal = 1; }, " causal");
  CheckCase(
      {2, 200, 4, 1, 72}, DType::kFloat16, false, 9,
      62, [](GqaCase& c) { c.attrs.causal = 1, c.attrs.local_window_size = 37; }, " causal window 37");
  CheckCase(
      {1, 260, 2, 2, 128}, DType::kBFloat16, false, 0, 63,
      [](GqaCase& c) {
        std::mt19937_64 g(64);
        c.attrs.causal = 1;
        c.attrs.softcap = 20.0f;
        c.sink = RandomBuffer(DType::kFloat32, {2}, g);
        c.has_sink = true;
      },
      " causal softcap sink");
  CheckCase(
      {1, 90, 2, 1, 256}, DType::kFloat32, false, 0, 65,
      [](GqaCase& c) {
        std::mt19937_64 g(66);
        c.attrs.causal = 1;
        c.bias = RandomBuffer(DType::kFloat32, {1, 2, 90, 90}, g, 0.5f);
        c.has_bias = true;
      },
      " causal bias");
  CheckCase({1, 1100, 2, 1, 64}, DType::kFloat16, false, 0, 67, [](GqaCase& c) { c.attrs.causal = 1; },
            " causal, two splits");
}

// A row's result depends on its own keys only: a prompt in one call, and the
// same prompt as a cached prefix (f16 present -> past), one decode step and
// the rest, give the same bits for every query; so does every thread count.
class AttentionBf16TilesCacheTest : public AttentionBf16TilesTest, public ::testing::WithParamInterface<DType> {};

TEST_P(AttentionBf16TilesCacheTest, ChunkedPrefillAndDecodeEqualOneCall) {
  // 160 = 96 + 1 + 63 keys: bf16 blocks of whole 16-key tiles are read in
  // place (96, 160 keys), the 97-key step is staged.
  constexpr int S = 160, N = 4, Nkv = 2, H = 64;
  const DType dt = GetParam();
  std::mt19937_64 g(71);
  const Buffer q = RandomBuffer(dt, {1, S, N * H}, g), k = RandomBuffer(dt, {1, S, Nkv * H}, g),
               v = RandomBuffer(dt, {1, S, Nkv * H}, g);
  ThreadPool pool(2);
  // Queries [s0, s0 + n) over the cache `past` (s0 positions; empty: none);
  // returns the output rows and leaves the present cache in past.
  const auto run = [&](int s0, int n, GqaCase& state, ThreadPool* threads) {
    GqaCase c;
    c.attrs.num_heads = N;
    c.attrs.kv_num_heads = Nkv;
    c.attrs.causal = 1;
    c.attrs.scale = 0.125f;
    c.query = Buffer(dt, {1, n, N * H});
    c.key = Buffer(dt, {1, n, Nkv * H});
    c.value = Buffer(dt, {1, n, Nkv * H});
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(n) * N * H; ++i) c.query.Set(i, q.Get(s0 * N * H + i));
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(n) * Nkv * H; ++i) {
      c.key.Set(i, k.Get(s0 * Nkv * H + i));
      c.value.Set(i, v.Get(s0 * Nkv * H + i));
    }
    c.has_key = true;
    if (s0 > 0) {
      c.past_key = state.present_key;
      c.past_value = state.present_value;
      c.has_past = true;
    }
    c.SetSeqlens({s0 + n}, s0 + n);
    c.present_key = Buffer(dt, {1, Nkv, s0 + n, H});
    c.present_value = Buffer(dt, {1, Nkv, s0 + n, H});
    c.has_present = true;
    c.output = Buffer(dt, {1, n, N * H});
    GroupQueryAttention(c.attrs, c.Inputs(), c.Outputs(), Bf16(threads));
    state = c;
    return c.output;
  };
  GqaCase whole_state, chunk_state;
  const Buffer whole = run(0, S, whole_state, nullptr);
  const Buffer whole2 = run(0, S, whole_state, &pool);
  EXPECT_TRUE(whole.bytes == whole2.bytes) << "1 and 2 threads differ";
  int s0 = 0;
  for (int n : {96, 1, 63}) {
    const Buffer part = run(s0, n, chunk_state, s0 == 0 ? nullptr : &pool);
    for (int s = 0; s < n; ++s) {
      const std::size_t row = static_cast<std::size_t>(N) * H * 2;
      EXPECT_EQ(std::memcmp(part.bytes.data() + s * row, whole.bytes.data() + (s0 + s) * row, row), 0)
          << "query " << s0 + s << " (chunk at " << s0 << ") differs from the one-call prompt";
    }
    s0 += n;
  }
  EXPECT_TRUE(chunk_state.present_key.bytes == whole_state.present_key.bytes);
}

// f16 caches are rounded to bf16 as they are read; bf16 ones are read in place.
INSTANTIATE_TEST_SUITE_P(Caches, AttentionBf16TilesCacheTest, ::testing::Values(DType::kFloat16, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(DTypeName(i.param)); });

// Each uncovered parameter, alone on an otherwise valid call.
TEST(AttentionBf16RefusalTest, NamesTheParameter) {
  struct Refusal {
    const char* name;
    void (*edit)(GqaCase&, GqaRunOptions&);
    bool tiles = true;  // the AMX tile form covers it (accepted where AmxAttendUsable)
  };
  const Refusal cases[] = {
      {"causal = 1", [](GqaCase& c, GqaRunOptions&) { c.attrs.causal = 1; }},
      {"local_window_size", [](GqaCase& c, GqaRunOptions&) { c.attrs.local_window_size = 4; }},
      {"softcap", [](GqaCase& c, GqaRunOptions&) { c.attrs.softcap = 30.0f; }},
      {"smooth_softmax", [](GqaCase& c, GqaRunOptions&) { c.attrs.smooth_softmax = 1; }},
      {"attention_bias",
       [](GqaCase& c, GqaRunOptions&) {
         c.bias = Buffer(DType::kFloat32, {1, 1, 8, 8});
         c.has_bias = true;
       }},
      {"head_sink",
       [](GqaCase& c, GqaRunOptions&) {
         c.sink = Buffer(DType::kFloat32, {2});
         c.has_sink = true;
       }},
      {"output_qk",
       [](GqaCase& c, GqaRunOptions&) {
         c.attrs.qk_output = 1;
         c.qk = Buffer(DType::kFloat32, {1, 2, 8, 8});
         c.has_qk = true;
       }},
      {"past_key",
       [](GqaCase& c, GqaRunOptions&) {
         c.past_key = Buffer(DType::kFloat32, {1, 2, 4, 64});
         c.past_value = Buffer(DType::kFloat32, {1, 2, 4, 64});
         c.has_past = true;
         c.SetSeqlens({12}, 12);
         c.present_key = Buffer(DType::kFloat32, {1, 2, 12, 64});
         c.present_value = Buffer(DType::kFloat32, {1, 2, 12, 64});
         c.has_present = true;
       }},
      {"kReference", [](GqaCase&, GqaRunOptions& o) { o.kernel = GqaKernel::kReference; }, false},
      {"device cuda", [](GqaCase&, GqaRunOptions& o) { o.device = Device::kCuda; }, false},
      {"q8_0",
       [](GqaCase& c, GqaRunOptions&) {
         c.present_key = Buffer(DType::kQ8_0, {1, 2, 8, 64});
         c.present_value = Buffer(DType::kQ8_0, {1, 2, 8, 64});
         c.has_present = true;
       },
       false},
  };
  const bool tiles = detail::AmxAttendUsable();
  for (const Refusal& r : cases) {
    GqaCase c = MakeCase({1, 8, 2, 2, 64}, DType::kFloat32, false, 0, 31);
    GqaRunOptions o = Bf16();
    r.edit(c, o);
    std::fill(c.output.bytes.begin(), c.output.bytes.end(), 0x5A);
    const auto before = c.output.bytes;
    if (tiles && r.tiles) {
      EXPECT_NO_THROW(GroupQueryAttention(c.attrs, c.Inputs(), c.Outputs(), o)) << r.name << ": refused with tiles";
      continue;
    }
    try {
      GroupQueryAttention(c.attrs, c.Inputs(), c.Outputs(), o);
      ADD_FAILURE() << r.name << ": accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("matmul_precision"), std::string::npos) << r.name << ": " << msg;
      EXPECT_NE(msg.find(r.name), std::string::npos) << r.name << ": " << msg;
    }
    EXPECT_TRUE(c.output.bytes == before) << r.name << ": output written before the refusal";
  }
}

// Bidirectional spans need causal = 1, which the bf16 products refuse anyway:
// the message names the spans.
TEST(AttentionBf16RefusalTest, BidirectionalSpans) {
  if (detail::AmxAttendUsable()) GTEST_SKIP() << "the AMX tile form covers bidirectional spans";
  GqaCase c = MakeCase({1, 8, 2, 2, 64}, DType::kFloat32, false, 0, 32);
  c.attrs.causal = 1;
  const std::vector<std::int64_t> pairs{2, 6};
  c.spans = Buffer(DType::kInt64, {1, 1, 2});
  std::memcpy(c.spans.bytes.data(), pairs.data(), 2 * sizeof(std::int64_t));
  c.has_spans = true;
  try {
    GroupQueryAttention(c.attrs, c.Inputs(), c.Outputs(), Bf16());
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bidirectional_spans"), std::string::npos) << e.what();
  }
}

// On a CPU without oneDNN's bf16 matmul a valid call says so.
TEST(AttentionBf16RefusalTest, NoBf16MatMulOnThisCpu) {
  if (detail::Bf16MatMulSupported() || detail::AmxAttendUsable()) GTEST_SKIP() << "this CPU has bf16 products";
  GqaCase c = MakeCase({1, 8, 2, 2, 64}, DType::kFloat32, false, 0, 33);
  try {
    GroupQueryAttention(c.attrs, c.Inputs(), c.Outputs(), Bf16());
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AVX-512"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvshare::testing
