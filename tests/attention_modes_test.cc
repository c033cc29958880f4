// Every KV-source mode of the op checked against an independent naive oracle
// over explicit K/V histories: append, share buffer, borrowed (empty and
// omitted K/V), external K/V, static scatter (linear / circular, 3-D / BNSH).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "attention_gqa_case.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::testing {
namespace {

// Per-row K/V histories (absolute positions 0..T_b-1) and the S newest queries.
struct History {
  int B, S, N, Nkv, H;
  std::vector<std::int64_t> T;
  std::vector<std::vector<float>> k, v, q;  // k/v[b]: T_b*Nkv*H; q[b]: S*N*H

  History(int b, int s, int n, int nkv, int h, std::vector<std::int64_t> t, std::uint64_t seed)
      : B(b), S(s), N(n), Nkv(nkv), H(h), T(std::move(t)) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.f, 1.f);
    for (int i = 0; i < B; ++i) {
      auto fill = [&](std::size_t n_el) {
        std::vector<float> x(n_el);
        for (auto& e : x) e = d(rng);
        return x;
      };
      k.push_back(fill(static_cast<std::size_t>(T[static_cast<std::size_t>(i)] * Nkv * H)));
      v.push_back(fill(static_cast<std::size_t>(T[static_cast<std::size_t>(i)] * Nkv * H)));
      q.push_back(fill(static_cast<std::size_t>(S * N * H)));
    }
  }
  std::int64_t MaxT() const { return *std::max_element(T.begin(), T.end()); }
  float K(int b, std::int64_t j, int n, int e) const {
    return k[static_cast<std::size_t>(b)][static_cast<std::size_t>((j * Nkv + n) * H + e)];
  }
  float V(int b, std::int64_t j, int n, int e) const {
    return v[static_cast<std::size_t>(b)][static_cast<std::size_t>((j * Nkv + n) * H + e)];
  }

  Buffer Query() const {
    Buffer qb(DType::kFloat32, {B, S, static_cast<std::int64_t>(N) * H});
    for (int b = 0; b < B; ++b)
      for (std::size_t i = 0; i < q[static_cast<std::size_t>(b)].size(); ++i)
        qb.Set(static_cast<std::int64_t>(b) * S * N * H + static_cast<std::int64_t>(i),
               q[static_cast<std::size_t>(b)][i]);
    return qb;
  }
  // BNSH cache of capacity C holding rows [0, rows_b) of each history.
  void FillBnsh(Buffer& kb, Buffer& vb, std::int64_t C, const std::vector<std::int64_t>& rows) const {
    kb = Buffer(DType::kFloat32, {B, Nkv, C, H});
    vb = Buffer(DType::kFloat32, {B, Nkv, C, H});
    for (int b = 0; b < B; ++b)
      for (int n = 0; n < Nkv; ++n)
        for (std::int64_t j = 0; j < rows[static_cast<std::size_t>(b)]; ++j)
          for (int e = 0; e < H; ++e) {
            const std::int64_t at = ((static_cast<std::int64_t>(b) * Nkv + n) * C + j) * H + e;
            kb.Set(at, K(b, j, n, e));
            vb.Set(at, V(b, j, n, e));
          }
  }
  // Token-major (B, L, kv_hidden) holding rows [first_b, first_b + L) (zeros past T_b).
  void FillBsnh(Buffer& kb, Buffer& vb, std::int64_t L, const std::vector<std::int64_t>& first) const {
    kb = Buffer(DType::kFloat32, {B, L, static_cast<std::int64_t>(Nkv) * H});
    vb = Buffer(DType::kFloat32, {B, L, static_cast<std::int64_t>(Nkv) * H});
    for (int b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < L; ++t) {
        const std::int64_t j = first[static_cast<std::size_t>(b)] + t;
        if (j >= T[static_cast<std::size_t>(b)]) continue;
        for (int n = 0; n < Nkv; ++n)
          for (int e = 0; e < H; ++e) {
            const std::int64_t at = ((static_cast<std::int64_t>(b) * L + t) * Nkv + n) * H + e;
            kb.Set(at, K(b, j, n, e));
            vb.Set(at, V(b, j, n, e));
          }
      }
  }
  void SetSeqlens(GqaCase& c) const {
    std::vector<std::int32_t> sl;
    for (auto t : T) sl.push_back(static_cast<std::int32_t>(t - 1));
    c.seqlens_k = Int32Buffer(sl, {B});
    c.total_len = Int32Buffer({static_cast<std::int32_t>(MaxT())}, {1});
    c.has_seqlens = true;
  }
  // Expected output [B, S, N*H]: query s of row b at position T_b - S + s.
  std::vector<float> Expected(const GqaAttributes& a, const std::vector<std::int64_t>& valid_q = {}) const {
    std::vector<float> out;
    for (int b = 0; b < B; ++b) {
      NaiveRow r;
      r.S = S, r.N = N, r.Nkv = Nkv, r.H = H;
      r.q.assign(q[static_cast<std::size_t>(b)].begin(), q[static_cast<std::size_t>(b)].end());
      r.k.assign(k[static_cast<std::size_t>(b)].begin(), k[static_cast<std::size_t>(b)].end());
      r.v.assign(v[static_cast<std::size_t>(b)].begin(), v[static_cast<std::size_t>(b)].end());
      for (int s = 0; s < S; ++s) r.qpos.push_back(T[static_cast<std::size_t>(b)] - S + s);
      r.causal = a.causal == 1;
      r.window = std::max(a.local_window_size, 0);
      r.scale = 1.0 / std::sqrt(static_cast<double>(H));
      r.softcap = a.softcap;
      auto o = r.Run();
      const std::int64_t vq = valid_q.empty() ? S : valid_q[static_cast<std::size_t>(b)];
      for (std::size_t i = 0; i < o.size(); ++i) {
        const bool pad = static_cast<std::int64_t>(i / static_cast<std::size_t>(N * H)) >= vq;
        out.push_back(pad ? 0.f : static_cast<float>(o[i]));
      }
    }
    return out;
  }
};

GqaAttributes Attrs(const History& h, int window = -1) {
  GqaAttributes a;
  a.num_heads = h.N;
  a.kv_num_heads = h.Nkv;
  a.local_window_size = window;
  return a;
}

constexpr double kTol = 1e-5;

TEST(GqaModes, AppendRaggedDecodeMatchesNaiveAndWritesPresent) {
  for (GqaKernel kernel : {GqaKernel::kReference, GqaKernel::kOptimized}) {
    History h(3, 1, 8, 2, 32, {5, 17, 1}, 11);
    GqaCase c;
    c.attrs = Attrs(h);
    c.query = h.Query();
    std::vector<std::int64_t> past, first;
    for (auto t : h.T) past.push_back(t - h.S);
    h.FillBnsh(c.past_key, c.past_value, 16, past);
    h.FillBsnh(c.key, c.value, h.S, past);
    c.has_key = c.has_past = true;
    h.SetSeqlens(c);
    c.output = Buffer(DType::kFloat32, {3, 1, 8 * 32});
    c.present_key = Buffer(DType::kFloat32, {3, 2, 17, 32});
    c.present_value = Buffer(DType::kFloat32, {3, 2, 17, 32});
    c.has_present = true;
    EXPECT_EQ(DetectKvMode(c.attrs, c.Inputs(), c.Outputs()), KvMode::kAppend);
    c.Run(kernel);
    EXPECT_LT(MaxRelDiff(c.output.ToFloat(), h.Expected(c.attrs)), kTol);
    Buffer want_k, want_v;
    h.FillBnsh(want_k, want_v, 17, h.T);
    EXPECT_EQ(c.present_key.ToFloat(), want_k.ToFloat());
    EXPECT_EQ(c.present_value.ToFloat(), want_v.ToFloat());
  }
}

TEST(GqaModes, AppendWithoutPresentAttendsPastPlusNew) {
  History h(2, 3, 4, 1, 64, {9, 3}, 12);
  GqaCase c;
  c.attrs = Attrs(h);
  c.query = h.Query();
  std::vector<std::int64_t> past;
  for (auto t : h.T) past.push_back(t - h.S);
  h.FillBnsh(c.past_key, c.past_value, 6, past);
  h.FillBsnh(c.key, c.value, h.S, past);
  c.has_key = c.has_past = true;
  h.SetSeqlens(c);
  c.output = Buffer(DType::kFloat32, {2, 3, 4 * 64});
  c.Run();
  EXPECT_LT(MaxRelDiff(c.output.ToFloat(), h.Expected(c.attrs)), kTol);
}

TEST(GqaModes, ShareBufferWritesInPlace) {
  History h(2, 2, 8, 8, 32, {7, 2}, 13);
  GqaCase c;
  c.attrs = Attrs(h);
  c.query = h.Query();
  std::vector<std::int64_t> past;
  for (auto t : h.T) past.push_back(t - h.S);
  h.FillBnsh(c.past_key, c.past_value, 10, past);
  h.FillBsnh(c.key, c.value, h.S, past);
  c.has_key = c.has_past = true;
  c.alias_present = true;
  h.SetSeqlens(c);
  c.output = Buffer(DType::kFloat32, {2, 2, 8 * 32});
  EXPECT_EQ(DetectKvMode(c.attrs, c.Inputs(), c.Outputs()), KvMode::kShareBuffer);
  c.Run();
  EXPECT_LT(MaxRelDiff(c.output.ToFloat(), h.Expected(c.attrs)), kTol);
  Buffer want_k, want_v;
  h.FillBnsh(want_k, want_v, 10, h.T);
  EXPECT_EQ(c.past_key.ToFloat(), want_k.ToFloat());
  EXPECT_EQ(c.past_value.ToFloat(), want_v.ToFloat());
}

// A right-padded first prompt (S == total_sequence_length) writes all S new
// rows of every row into present, the padding rows s >= T_b included, as ORT
// does (checked against onnxruntime 1.32 on this case): present is not zero
// beyond T_b here.
TEST(GqaModes, AppendRightPaddedFirstPromptWritesAllRows) {
  const int B = 3, S = 16, N = 4, Nkv = 2, H = 16;
  std::mt19937_64 rng(21);
  GqaCase c;
  c.attrs.num_heads = N;
  c.attrs.kv_num_heads = Nkv;
  c.query = RandomBuffer(DType::kFloat32, {B, S, N * H}, rng);
  c.key = RandomBuffer(DType::kFloat32, {B, S, Nkv * H}, rng);
  c.value = RandomBuffer(DType::kFloat32, {B, S, Nkv * H}, rng);
  c.has_key = true;
  c.seqlens_k = Int32Buffer({2, 15, 8}, {B});
  c.total_len = Int32Buffer({S}, {1});
  c.has_seqlens = true;
  c.output = Buffer(DType::kFloat32, {B, S, N * H});
  c.present_key = Buffer(DType::kFloat32, {B, Nkv, S, H});
  c.present_value = Buffer(DType::kFloat32, {B, Nkv, S, H});
  c.has_present = true;
  ASSERT_EQ(DetectKvMode(c.attrs, c.Inputs(), c.Outputs()), KvMode::kAppend);
  c.Run();
  for (int b = 0; b < B; ++b)
    for (int n = 0; n < Nkv; ++n)
      for (int s = 0; s < S; ++s)
        for (int e = 0; e < H; ++e) {
          const std::int64_t src = ((static_cast<std::int64_t>(b) * S + s) * Nkv + n) * H + e;
          const std::int64_t dst = ((static_cast<std::int64_t>(b) * Nkv + n) * S + s) * H + e;
          ASSERT_EQ(c.present_key.Get(dst), c.key.Get(src)) << "b=" << b << " n=" << n << " s=" << s;
          ASSERT_EQ(c.present_value.Get(dst), c.value.Get(src)) << "b=" << b << " n=" << n << " s=" << s;
        }
}

// Packed QKV (key/value absent, query (B, S, (N + 2 N_kv) H)) with a past is
// accepted, in the append and the share-buffer mode, and gives exactly the
// unpacked op's results (as ORT does; checked against onnxruntime 1.32).
TEST(GqaModes, PackedQkvWithPastEqualsUnpacked) {
  for (bool share : {false, true}) {
    History h(2, 3, 4, 2, 32, {7, 3}, 22);
    std::vector<std::int64_t> past;
    for (auto t : h.T) past.push_back(t - h.S);
    auto make = [&](bool packed) {
      GqaCase c;
      c.attrs = Attrs(h);
      h.FillBnsh(c.past_key, c.past_value, 8, past);
      h.FillBsnh(c.key, c.value, h.S, past);
      c.query = h.Query();
      if (packed) {
        const std::int64_t qh = h.N * h.H, kh = h.Nkv * h.H, width = qh + 2 * kh;
        Buffer qkv(DType::kFloat32, {h.B, h.S, width});
        for (std::int64_t t = 0; t < h.B * h.S; ++t) {
          for (std::int64_t i = 0; i < qh; ++i) qkv.Set(t * width + i, c.query.Get(t * qh + i));
          for (std::int64_t i = 0; i < kh; ++i) {
            qkv.Set(t * width + qh + i, c.key.Get(t * kh + i));
            qkv.Set(t * width + qh + kh + i, c.value.Get(t * kh + i));
          }
        }
        c.query = qkv;
      }
      c.has_key = !packed;
      c.has_past = true;
      c.alias_present = share;
      c.has_present = !share;
      c.present_key = Buffer(DType::kFloat32, {h.B, h.Nkv, 8, h.H});
      c.present_value = Buffer(DType::kFloat32, {h.B, h.Nkv, 8, h.H});
      h.SetSeqlens(c);
      c.output = Buffer(DType::kFloat32, {h.B, h.S, h.N * h.H});
      EXPECT_EQ(DetectKvMode(c.attrs, c.Inputs(), c.Outputs()), share ? KvMode::kShareBuffer : KvMode::kAppend);
      c.Run();
      return c;
    };
    GqaCase unpacked = make(false), packed = make(true);
    EXPECT_LT(MaxRelDiff(packed.output.ToFloat(), h.Expected(packed.attrs)), kTol) << "share=" << share;
    EXPECT_EQ(packed.output.ToFloat(), unpacked.output.ToFloat()) << "share=" << share;
    const Buffer& pk = share ? packed.past_key : packed.present_key;
    const Buffer& uk = share ? unpacked.past_key : unpacked.present_key;
    EXPECT_EQ(pk.ToFloat(), uk.ToFloat()) << "share=" << share;
    Buffer want_k, want_v;
    h.FillBnsh(want_k, want_v, 8, h.T);
    EXPECT_EQ(pk.ToFloat(), want_k.ToFloat()) << "share=" << share;
  }
}

// Borrowed modes: exact attention over the source layer's KV, no append.
TEST(GqaModes, BorrowedEmptyAndOmittedKvAreExact) {
  for (bool omitted : {false, true}) {
    for (int S : {1, 4}) {
      History h(2, S, 8, 1, 32, {12, 20}, 14 + S);
      GqaCase c;
      c.attrs = Attrs(h, 8);
      c.query = h.Query();
      h.FillBnsh(c.past_key, c.past_value, 24, h.T);
      if (!omitted) {
        c.key = Buffer(DType::kFloat32, {2, 0, 32});
        c.value = Buffer(DType::kFloat32, {2, 0, 32});
        c.has_key = true;
      }
      c.has_past = true;
      h.SetSeqlens(c);
      c.output = Buffer(DType::kFloat32, {2, S, 8 * 32});
      c.present_key = Buffer(DType::kFloat32, {2, 1, 24, 32});
      c.present_value = Buffer(DType::kFloat32, {2, 1, 24, 32});
      c.has_present = true;
      EXPECT_EQ(DetectKvMode(c.attrs, c.Inputs(), c.Outputs()),
                omitted ? KvMode::kBorrowedOmittedKv : KvMode::kBorrowedEmptyKv);
      const auto before = c.past_key.ToFloat();
      c.Run();
      EXPECT_LT(MaxRelDiff(c.output.ToFloat(), h.Expected(c.attrs)), 1e-6);
      EXPECT_EQ(c.past_key.ToFloat(), before);     // never written
      EXPECT_EQ(c.present_key.ToFloat(), before);  // present is a copy
    }
  }
}

TEST(GqaModes, ExternalKvMatchesBorrowed) {
  History h(3, 2, 4, 2, 64, {10, 2, 30}, 15);
  GqaCase c;
  c.attrs = Attrs(h, 6);
  c.query = h.Query();
  h.FillBsnh(c.key, c.value, 32, {0, 0, 0});
  c.has_key = true;
  h.SetSeqlens(c);
  c.output = Buffer(DType::kFloat32, {3, 2, 4 * 64});
  EXPECT_EQ(DetectKvMode(c.attrs, c.Inputs(), c.Outputs()), KvMode::kExternalKv);
  c.Run();
  EXPECT_LT(MaxRelDiff(c.output.ToFloat(), h.Expected(c.attrs)), kTol);
}

// Static scatter: ragged rows, padding query rows, 3-D and BNSH caches, on
// the calling thread and on a pool (padding outputs are zeroed as pool items).
TEST(GqaModes, StaticScatterLinearRaggedAnyBatch) {
  ThreadPool two(2);
  for (auto [bnsh, pool] :
       {std::pair<bool, ThreadPool*>{false, nullptr}, {true, nullptr}, {false, &two}, {true, &two}}) {
    History h(3, 4, 8, 2, 32, {9, 4, 6}, 16);
    const std::vector<std::int64_t> n_new = {4, 2, 3};  // row 1 and 2 have padding queries
    const std::int64_t C = 12;
    GqaCase c;
    c.attrs = Attrs(h);
    c.query = h.Query();
    std::vector<std::int64_t> wi, np, past;
    for (int b = 0; b < 3; ++b) {
      np.push_back(h.T[static_cast<std::size_t>(b)]);
      wi.push_back(h.T[static_cast<std::size_t>(b)] - n_new[static_cast<std::size_t>(b)]);
    }
    Buffer kb, vb;
    h.FillBnsh(kb, vb, C, wi);
    if (bnsh) {
      c.present_key = kb;
      c.present_value = vb;
    } else {  // 3-D [B, C, kv_hidden]
      c.present_key = Buffer(DType::kFloat32, {3, C, 2 * 32});
      c.present_value = Buffer(DType::kFloat32, {3, C, 2 * 32});
      for (int b = 0; b < 3; ++b)
        for (int n = 0; n < 2; ++n)
          for (std::int64_t j = 0; j < C; ++j)
            for (int e = 0; e < 32; ++e) {
              c.present_key.Set(((b * C + j) * 2 + n) * 32 + e, kb.Get(((b * 2 + n) * C + j) * 32 + e));
              c.present_value.Set(((b * C + j) * 2 + n) * 32 + e, vb.Get(((b * 2 + n) * C + j) * 32 + e));
            }
    }
    c.has_present = true;
    h.FillBsnh(c.key, c.value, 4, wi);
    c.has_key = true;
    c.write_indices = Int64Buffer(wi, {3});
    c.nonpad = Int64Buffer(np, {3});
    c.has_scatter = true;
    c.output = Buffer(DType::kFloat32, {3, 4, 8 * 32});
    for (std::int64_t i = 0; i < c.output.Size(); ++i) c.output.Set(i, std::nanf(""));  // the op writes every row
    EXPECT_EQ(DetectKvMode(c.attrs, c.Inputs(), c.Outputs()), KvMode::kStaticScatter);
    c.Run(GqaKernel::kOptimized, pool);
    // Queries of row b are the last n_b positions: re-express as per-row histories.
    for (int b = 0; b < 3; ++b) {
      History hb = h;
      hb.B = 1;
      hb.T = {h.T[static_cast<std::size_t>(b)]};
      hb.k = {h.k[static_cast<std::size_t>(b)]};
      hb.v = {h.v[static_cast<std::size_t>(b)]};
      hb.S = static_cast<int>(n_new[static_cast<std::size_t>(b)]);
      hb.q = {std::vector<float>(h.q[static_cast<std::size_t>(b)].begin(),
                                 h.q[static_cast<std::size_t>(b)].begin() + hb.S * 8 * 32)};
      const auto want = hb.Expected(c.attrs);
      const auto got = c.output.ToFloat();
      std::vector<float> got_b(got.begin() + b * 4 * 256, got.begin() + b * 4 * 256 + hb.S * 256);
      EXPECT_LT(MaxRelDiff(got_b, want), kTol) << "row " << b;
      for (std::int64_t i = hb.S * 256; i < 4 * 256; ++i)
        EXPECT_EQ(got[static_cast<std::size_t>(b * 4 * 256 + i)], 0.f);
    }
  }
}

TEST(GqaModes, StaticScatterCircularEqualsLinearWithinWindow) {
  // One row decoding token by token through a ring of capacity W + S - 1 and a
  // linear cache: outputs must agree at every step.
  const int N = 4, Nkv = 1, H = 32, W = 5, steps = 23;
  History h(1, 1, N, Nkv, H, {steps}, 17);
  std::mt19937_64 rng(18);
  Buffer ring_k(DType::kFloat32, {1, W, Nkv * H}), ring_v(DType::kFloat32, {1, W, Nkv * H});
  Buffer lin_k(DType::kFloat32, {1, steps, Nkv * H}), lin_v(DType::kFloat32, {1, steps, Nkv * H});
  for (int t = 0; t < steps; ++t) {
    Buffer q = RandomBuffer(DType::kFloat32, {1, 1, N * H}, rng);
    Buffer k, v;
    h.FillBsnh(k, v, 1, {t});
    std::vector<float> outs[2];
    for (int circ = 0; circ < 2; ++circ) {
      GqaCase c;
      c.attrs = Attrs(h, W);
      c.attrs.scatter_mode = circ ? GqaAttributes::ScatterMode::kCircular : GqaAttributes::ScatterMode::kLinear;
      c.query = q;
      c.key = k;
      c.value = v;
      c.has_key = true;
      c.write_indices = Int64Buffer({t}, {1});
      c.nonpad = Int64Buffer({t + 1}, {1});
      c.has_scatter = true;
      c.present_key = circ ? ring_k : lin_k;
      c.present_value = circ ? ring_v : lin_v;
      c.has_present = true;
      c.output = Buffer(DType::kFloat32, {1, 1, N * H});
      c.Run();
      (circ ? ring_k : lin_k) = c.present_key;
      (circ ? ring_v : lin_v) = c.present_value;
      outs[circ] = c.output.ToFloat();
    }
    EXPECT_EQ(outs[0], outs[1]) << "step " << t;
  }
}

// Issue #28318's workaround: appending an all-zero K/V row dilutes softmax by
// about 1/(past length); the omitted-K/V mode is exact.
TEST(GqaModes, ZeroKvWorkaroundDilutesOmittedKvIsExact) {
  const int N = 8, Nkv = 4, H = 32;
  for (std::int64_t P : {16, 1024}) {
    History h(1, 1, N, Nkv, H, {P}, 19 + static_cast<std::uint64_t>(P));
    // Small scores (q ~ 0.05) make every key weigh about the same, as in the issue.
    for (auto& x : h.q[0]) x *= 0.05f;
    const auto exact = h.Expected(Attrs(h));
    // Omitted K/V.
    GqaCase c;
    c.attrs = Attrs(h);
    c.query = h.Query();
    h.FillBnsh(c.past_key, c.past_value, P, h.T);
    c.has_past = true;
    h.SetSeqlens(c);
    c.output = Buffer(DType::kFloat32, {1, 1, N * H});
    c.Run();
    EXPECT_LT(MaxRelDiff(c.output.ToFloat(), exact), 1e-6);
    // Zero K/V appended as a new token (the workaround).
    GqaCase z;
    z.attrs = Attrs(h);
    z.query = h.Query();
    h.FillBnsh(z.past_key, z.past_value, P, h.T);
    z.key = Buffer(DType::kFloat32, {1, 1, Nkv * H});
    z.value = Buffer(DType::kFloat32, {1, 1, Nkv * H});
    z.has_key = z.has_past = true;
    z.seqlens_k = Int32Buffer({static_cast<std::int32_t>(P)}, {1});
    z.total_len = Int32Buffer({static_cast<std::int32_t>(P + 1)}, {1});
    z.has_seqlens = true;
    z.output = Buffer(DType::kFloat32, {1, 1, N * H});
    z.Run();
    // Relative difference in norm: the zero token takes weight ~1/(P+1).
    const auto got = z.output.ToFloat();
    double num = 0, den = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      num += (got[i] - exact[i]) * (got[i] - exact[i]);
      den += static_cast<double>(exact[i]) * exact[i];
    }
    const double rel = std::sqrt(num / den);
    const double expect = 1.0 / static_cast<double>(P + 1);
    EXPECT_GT(rel, 0.5 * expect) << "P=" << P;
    EXPECT_LT(rel, 2.0 * expect) << "P=" << P;
    if (P == 16) {
      EXPECT_GT(rel, 0.02);
    }
    if (P == 1024) {
      EXPECT_LT(rel, 0.01);
    }
  }
}

// W = 512: the query at positions 511, 512, 513 sees exactly 512 keys.
TEST(GqaModes, WindowBoundaryExactlyWKeys) {
  const int W = 512, N = 1, H = 16 * 2;
  for (std::int64_t pos : {511, 512, 513}) {
    const std::int64_t T = pos + 1;
    GqaCase c;
    c.attrs.num_heads = N;
    c.attrs.kv_num_heads = 1;
    c.attrs.local_window_size = W;
    c.query = Buffer(DType::kFloat32, {1, 1, H});  // q = 0: uniform weights
    c.past_key = Buffer(DType::kFloat32, {1, 1, T, H});
    c.past_value = Buffer(DType::kFloat32, {1, 1, T, H});
    for (std::int64_t j = 0; j < T; ++j) c.past_value.Set(j * H, 1.0f);  // v_j[0] = 1: counts keys
    for (std::int64_t j = 0; j < T; ++j) c.past_value.Set(j * H + 1, static_cast<float>(j));
    c.has_past = true;
    c.seqlens_k = Int32Buffer({static_cast<std::int32_t>(pos)}, {1});
    c.total_len = Int32Buffer({static_cast<std::int32_t>(T)}, {1});
    c.has_seqlens = true;
    c.output = Buffer(DType::kFloat32, {1, 1, H});
    c.attrs.qk_output = 2;
    c.qk = Buffer(DType::kFloat32, {1, 1, 1, T});
    c.has_qk = true;
    for (GqaKernel kernel : {GqaKernel::kReference, GqaKernel::kOptimized}) {
      c.Run(kernel);
      int visible = 0;
      std::int64_t first = -1;
      for (std::int64_t j = 0; j < T; ++j) {
        if (c.qk.Get(j) > 0) {
          ++visible;
          if (first < 0) first = j;
        }
      }
      EXPECT_EQ(visible, W) << "pos " << pos;
      EXPECT_EQ(first, pos - W + 1) << "pos " << pos;
      // Mean of visible positions j in [pos-W+1, pos].
      EXPECT_NEAR(c.output.Get(1), static_cast<double>(pos) - (W - 1) / 2.0, 1e-2) << "pos " << pos;
      EXPECT_NEAR(c.output.Get(0), 1.0, 1e-6);
    }
  }
}

}  // namespace
}  // namespace kvshare::testing

namespace kvshare::testing {
namespace {

// RoPE rotates Q and the new K at absolute positions (half and interleaved,
// full and partial); cached K is not re-rotated. Borrowed mode rotates Q only.
TEST(GqaModes, RotaryRotatesQueryAndNewKeyOnly) {
  const int N = 4, Nkv = 2, H = 32, S = 2, maxpos = 64;
  for (int interleaved : {0, 1}) {
    for (int half : {16, 8}) {
      History h(2, S, N, Nkv, H, {7, 12}, 30 + interleaved * 2 + half);
      Buffer cos(DType::kFloat32, {maxpos, half}), sin(DType::kFloat32, {maxpos, half});
      for (int p = 0; p < maxpos; ++p)
        for (int i = 0; i < half; ++i) {
          cos.Set(p * half + i, std::cos(0.1f * p * (i + 1)));
          sin.Set(p * half + i, std::sin(0.1f * p * (i + 1)));
        }
      auto rotate = [&](float* x, std::int64_t pos) {
        for (int i = 0; i < half; ++i) {
          const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
          const float c = cos.Get(pos * half + i), s = sin.Get(pos * half + i);
          const float x0 = x[a], x1 = x[b];
          x[a] = x0 * c - x1 * s;
          x[b] = x1 * c + x0 * s;
        }
      };
      GqaCase c;
      c.attrs = Attrs(h);
      c.attrs.do_rotary = 1;
      c.attrs.rotary_interleaved = interleaved;
      c.cos = cos;
      c.sin = sin;
      c.has_rope = true;
      c.query = h.Query();
      std::vector<std::int64_t> past;
      for (auto t : h.T) past.push_back(t - S);
      h.FillBnsh(c.past_key, c.past_value, 12, past);
      h.FillBsnh(c.key, c.value, S, past);
      c.has_key = c.has_past = true;
      h.SetSeqlens(c);
      c.output = Buffer(DType::kFloat32, {2, S, N * H});
      c.Run();
      // Expected: rotate q and the new K rows of the history at their positions.
      History want = h;
      for (int b = 0; b < 2; ++b)
        for (int s = 0; s < S; ++s) {
          const std::int64_t pos = h.T[static_cast<std::size_t>(b)] - S + s;
          for (int hh = 0; hh < N; ++hh)
            rotate(&want.q[static_cast<std::size_t>(b)][static_cast<std::size_t>((s * N + hh) * H)], pos);
          for (int n = 0; n < Nkv; ++n)
            rotate(&want.k[static_cast<std::size_t>(b)][static_cast<std::size_t>((pos * Nkv + n) * H)], pos);
        }
      EXPECT_LT(MaxRelDiff(c.output.ToFloat(), want.Expected(c.attrs)), kTol) << interleaved << " " << half;
      // Borrowed (omitted K/V) over the rotated cache rotates only Q.
      GqaCase bq;
      bq.attrs = c.attrs;
      bq.cos = cos;
      bq.sin = sin;
      bq.has_rope = true;
      bq.query = h.Query();
      bq.past_key = c.present_key.Size() ? c.present_key : Buffer();
      want.FillBnsh(bq.past_key, bq.past_value, 12, h.T);
      bq.has_past = true;
      h.SetSeqlens(bq);
      bq.output = Buffer(DType::kFloat32, {2, S, N * H});
      bq.Run();
      EXPECT_LT(MaxRelDiff(bq.output.ToFloat(), want.Expected(c.attrs)), kTol)
          << "borrowed " << interleaved << " " << half;
    }
  }
}

// softcap, sinks (head_sink and smooth softmax), causal = 0 and causal = 0
// with a symmetric window (|p - j| < 2: the middle queries lose keys on both
// sides) against the naive oracle.
TEST(GqaModes, SoftcapSinkAndBidirectionalMatchNaive) {
  History h(2, 3, 8, 2, 32, {6, 11}, 40);
  for (int variant = 0; variant < 5; ++variant) {
    GqaCase c;
    c.attrs = Attrs(h);
    if (variant == 0) c.attrs.softcap = 0.5f;
    if (variant == 2) c.attrs.smooth_softmax = 1;
    if (variant >= 3) c.attrs.causal = 0;
    if (variant == 4) c.attrs.local_window_size = 2;
    c.query = h.Query();
    h.FillBnsh(c.past_key, c.past_value, 11, h.T);
    c.has_past = true;
    h.SetSeqlens(c);
    std::vector<double> sink;
    if (variant == 1) {
      c.sink = Buffer(DType::kFloat32, {8});
      for (int i = 0; i < 8; ++i) {
        c.sink.Set(i, 0.5f * i - 1.0f);
        sink.push_back(0.5 * i - 1.0);
      }
      c.has_sink = true;
    }
    if (variant == 2) sink.assign(8, 0.0);
    c.output = Buffer(DType::kFloat32, {2, 3, 8 * 32});
    c.Run();
    std::vector<float> want;
    for (int b = 0; b < 2; ++b) {
      NaiveRow r;
      r.S = 3, r.N = 8, r.Nkv = 2, r.H = 32;
      r.q.assign(h.q[static_cast<std::size_t>(b)].begin(), h.q[static_cast<std::size_t>(b)].end());
      r.k.assign(h.k[static_cast<std::size_t>(b)].begin(), h.k[static_cast<std::size_t>(b)].end());
      r.v.assign(h.v[static_cast<std::size_t>(b)].begin(), h.v[static_cast<std::size_t>(b)].end());
      for (int s = 0; s < 3; ++s) r.qpos.push_back(h.T[static_cast<std::size_t>(b)] - 3 + s);
      r.causal = c.attrs.causal == 1;
      r.window = std::max(c.attrs.local_window_size, 0);
      r.scale = 1.0 / std::sqrt(32.0);
      r.softcap = c.attrs.softcap;
      r.sink = sink;
      for (double x : r.Run()) want.push_back(static_cast<float>(x));
    }
    EXPECT_LT(MaxRelDiff(c.output.ToFloat(), want), kTol) << "variant " << variant;
  }
}

}  // namespace
}  // namespace kvshare::testing
