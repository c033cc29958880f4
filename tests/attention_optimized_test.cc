// detail::AttendOptimized against a plain double-precision twin of the
// AttendParams semantics (attend.h), plus block-size and thread-count
// invariance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attention/attend.h"
#include "common/float_convert.h"
#include "common/q8_0.h"
#include "common_record_measured.h"
#include "hwy/targets.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::detail {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Tolerance (relative to max |reference|) by output dtype: fp32 compute
// error, or the half-ulp rounding of the stored 16-bit result plus margin.
double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return 1e-3;   // 2^-11 rounding
    case DType::kBFloat16: return 4e-3;  // 2^-9 rounding
    default: return 1e-5;
  }
}

struct Case {
  int B = 1, S = 1, T = 1, N = 1, Nkv = 1, H = 32;
  bool causal = true;
  int window = 0;
  float scale = 0.1f;
  float softcap = 0.0f;
  bool bias = false;
  bool bias_bcast_b = false, bias_bcast_n = false;
  DType bias_dtype = DType::kFloat32;
  bool sink = false;
  int qk_mode = 0;
  DType kv_dtype = DType::kFloat32, out_dtype = DType::kFloat32, qk_dtype = DType::kFloat32;
  bool bsnh = false;
  int ring = 0;
  int slack = 0;  // extra cache rows beyond T (unusual strides)
  std::vector<std::int64_t> kv_len, q_offset, valid_q;
  int block = 0;
  std::uint64_t seed = 1;

  std::string Describe() const {
    std::string s = "B=" + std::to_string(B) + " S=" + std::to_string(S) + " T=" + std::to_string(T) +
                    " N=" + std::to_string(N) + " Nkv=" + std::to_string(Nkv) + " H=" + std::to_string(H) +
                    " causal=" + std::to_string(causal) + " window=" + std::to_string(window) +
                    " softcap=" + std::to_string(softcap) + " bias=" + std::to_string(bias) +
                    " sink=" + std::to_string(sink) + " qk=" + std::to_string(qk_mode) + " kv=" + DTypeName(kv_dtype) +
                    " out=" + DTypeName(out_dtype) + " bsnh=" + std::to_string(bsnh) + " ring=" + std::to_string(ring) +
                    " block=" + std::to_string(block) + " rows:";
    for (int b = 0; b < B; ++b) {
      s +=
          " (" + std::to_string(kv_len[b]) + "," + std::to_string(q_offset[b]) + "," + std::to_string(valid_q[b]) + ")";
    }
    return s;
  }
};

// Owns every buffer of one problem and the AttendParams pointing into them.
struct Problem {
  std::vector<float> q, sink;
  std::vector<unsigned char> k, v, bias, out, qk;
  Case c;
  AttendParams p;

  explicit Problem(const Case& cs) : c(cs) {
    std::mt19937_64 rng(c.seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const std::int64_t cap = c.ring > 0 ? c.ring : c.T + c.slack;
    q.resize(static_cast<std::size_t>(c.B) * c.S * c.N * c.H);
    for (float& x : q) x = u(rng);
    const std::size_t kv_elems = static_cast<std::size_t>(c.B) * c.Nkv * cap * c.H;
    std::vector<float> kf(kv_elems), vf(kv_elems);
    for (std::size_t i = 0; i < kv_elems; ++i) {
      kf[i] = u(rng);
      vf[i] = u(rng);
    }
    k.resize(DTypeBytes(c.kv_dtype, static_cast<std::int64_t>(kv_elems)));
    v.resize(k.size());
    if (c.kv_dtype == DType::kQ8_0) {  // rows of H (a multiple of 32) quantized per block
      QuantizeRowQ8_0(kf.data(), static_cast<std::int64_t>(kv_elems), k.data());
      QuantizeRowQ8_0(vf.data(), static_cast<std::int64_t>(kv_elems), v.data());
    } else {
      for (std::size_t i = 0; i < kv_elems; ++i) {
        StoreFromFloat(k.data(), c.kv_dtype, static_cast<std::int64_t>(i), kf[i]);
        StoreFromFloat(v.data(), c.kv_dtype, static_cast<std::int64_t>(i), vf[i]);
      }
    }
    p.batch = c.B;
    p.q_len = c.S;
    p.num_heads = c.N;
    p.kv_heads = c.Nkv;
    p.head_size = c.H;
    p.q = q.data();
    for (KvSource* src : {&p.k, &p.v}) {
      src->dtype = c.kv_dtype;
      src->ring_capacity = c.ring;
      if (c.bsnh) {
        src->batch_stride = cap * c.Nkv * c.H;
        src->head_stride = c.H;
        src->row_stride = static_cast<std::int64_t>(c.Nkv) * c.H;
      } else {
        src->batch_stride = cap * c.Nkv * c.H;
        src->head_stride = cap * c.H;
        src->row_stride = c.H;
      }
    }
    p.k.data = k.data();
    p.v.data = v.data();
    p.kv_len = c.kv_len.data();
    p.q_offset = c.q_offset.data();
    p.valid_q = c.valid_q.data();
    p.causal = c.causal;
    p.window = c.window;
    p.scale = c.scale;
    p.softcap = c.softcap;
    if (c.bias) {
      const int bb = c.bias_bcast_b ? 1 : c.B, bn = c.bias_bcast_n ? 1 : c.N;
      const std::size_t n = static_cast<std::size_t>(bb) * bn * c.S * c.T;
      bias.resize(n * DTypeSize(c.bias_dtype));
      std::uniform_real_distribution<float> ub(-2.0f, 2.0f);
      for (std::size_t i = 0; i < n; ++i)
        StoreFromFloat(bias.data(), c.bias_dtype, static_cast<std::int64_t>(i), ub(rng));
      p.bias.data = bias.data();
      p.bias.dtype = c.bias_dtype;
      p.bias.s_stride = c.T;
      p.bias.h_stride = c.bias_bcast_n ? 0 : static_cast<std::int64_t>(c.S) * c.T;
      p.bias.b_stride = c.bias_bcast_b ? 0 : static_cast<std::int64_t>(bn) * c.S * c.T;
    }
    if (c.sink) {
      std::uniform_real_distribution<float> us(-2.0f, 3.0f);
      sink.resize(static_cast<std::size_t>(c.N));
      for (float& x : sink) x = us(rng);
      p.sink = sink.data();
    }
    out.assign(q.size() * DTypeSize(c.out_dtype), 0xAB);  // garbage: every byte must be written
    p.out = out.data();
    p.out_dtype = c.out_dtype;
    if (c.qk_mode != 0) {
      qk.assign(static_cast<std::size_t>(c.B) * c.N * c.S * c.T * DTypeSize(c.qk_dtype), 0xAB);
      p.qk = qk.data();
      p.qk_dtype = c.qk_dtype;
      p.qk_mode = c.qk_mode;
      p.qk_cols = c.T;
    }
    p.kv_block_size = c.block;
  }

  float Out(std::size_t i) const { return LoadAsFloat(out.data(), c.out_dtype, static_cast<std::int64_t>(i)); }
  float Qk(std::size_t i) const { return LoadAsFloat(qk.data(), c.qk_dtype, static_cast<std::int64_t>(i)); }
};

// The double-precision twin: out [B,S,N,H]; qk [B,N,S,T] with a visibility mask.
struct RefResult {
  std::vector<double> out, qk;
  std::vector<char> qk_visible;
};

RefResult Reference(const AttendParams& p, std::int64_t qk_cols) {
  const int B = p.batch, S = p.q_len, N = p.num_heads, H = p.head_size, G = p.num_heads / p.kv_heads;
  RefResult r;
  r.out.assign(static_cast<std::size_t>(B) * S * N * H, 0.0);
  r.qk.assign(static_cast<std::size_t>(B) * N * S * qk_cols, 0.0);
  r.qk_visible.assign(r.qk.size(), 0);
  auto kv_at = [&](const KvSource& src, int b, int n, std::int64_t j, int h) {
    const std::int64_t slot = src.ring_capacity > 0 ? j % src.ring_capacity : j;
    return static_cast<double>(
        LoadAsFloat(src.data, src.dtype, b * src.batch_stride + n * src.head_stride + slot * src.row_stride + h));
  };
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < N; ++h) {
      const int n = h / G;
      for (int s = 0; s < S && s < p.valid_q[b]; ++s) {
        const std::int64_t pos = p.q_offset[b] + s;
        std::vector<double> x;
        std::vector<std::int64_t> js;
        for (std::int64_t j = 0; j < p.kv_len[b]; ++j) {
          if (p.causal && j > pos) continue;
          if (p.window > 0 && pos - j >= p.window) continue;
          if (!p.causal && p.window > 0 && j - pos >= p.window) continue;
          const float* q = p.q + ((static_cast<std::int64_t>(b) * S + s) * N + h) * H;
          double dot = 0.0;
          for (int i = 0; i < H; ++i) dot += static_cast<double>(q[i]) * kv_at(p.k, b, n, j, i);
          double xv = static_cast<double>(p.scale) * dot;
          if (p.softcap > 0.0f) xv = p.softcap * std::tanh(xv / p.softcap);
          if (p.bias.data != nullptr) {
            xv += LoadAsFloat(p.bias.data, p.bias.dtype,
                              b * p.bias.b_stride + h * p.bias.h_stride + s * p.bias.s_stride + j);
          }
          x.push_back(xv);
          js.push_back(j);
        }
        if (x.empty()) continue;
        double m = *std::max_element(x.begin(), x.end());
        if (p.sink != nullptr) m = std::max(m, static_cast<double>(p.sink[h]));
        double den = p.sink != nullptr ? std::exp(p.sink[h] - m) : 0.0;
        for (double xv : x) den += std::exp(xv - m);
        double* o = &r.out[((static_cast<std::size_t>(b) * S + s) * N + h) * H];
        const std::size_t qrow = ((static_cast<std::size_t>(b) * N + h) * S + s) * qk_cols;
        for (std::size_t t = 0; t < x.size(); ++t) {
          const double pj = std::exp(x[t] - m) / den;
          for (int i = 0; i < H; ++i) o[i] += pj * kv_at(p.v, b, n, js[t], i);
          if (js[t] < qk_cols) {
            r.qk[qrow + js[t]] = p.qk_mode == 1 ? x[t] : pj;
            r.qk_visible[qrow + js[t]] = 1;
          }
        }
      }
    }
  }
  return r;
}

void ExpectMatches(const Problem& pr, const RefResult& ref) {
  const Case& c = pr.c;
  double max_ref = 0.0, max_err = 0.0;
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(ref.out[i]));
    max_err = std::max(max_err, std::abs(static_cast<double>(pr.Out(i)) - ref.out[i]));
  }
  EXPECT_LE(max_err, Tolerance(c.out_dtype) * std::max(max_ref, 1e-30)) << c.Describe();
  // Padding queries are exactly zero.
  const std::size_t row = static_cast<std::size_t>(c.N) * c.H;
  for (int b = 0; b < c.B; ++b) {
    for (int s = static_cast<int>(std::max<std::int64_t>(c.valid_q[b], 0)); s < c.S; ++s) {
      for (std::size_t i = 0; i < row; ++i) {
        ASSERT_EQ(pr.Out((static_cast<std::size_t>(b) * c.S + s) * row + i), 0.0f) << c.Describe();
      }
    }
  }
  if (c.qk_mode == 0) return;
  double max_qk = 0.0, qk_err = 0.0;
  for (std::size_t i = 0; i < ref.qk.size(); ++i) {
    if (!ref.qk_visible[i]) {
      ASSERT_EQ(pr.Qk(i), 0.0f) << "invisible qk entry " << i << " " << c.Describe();
      continue;
    }
    max_qk = std::max(max_qk, std::abs(ref.qk[i]));
    qk_err = std::max(qk_err, std::abs(static_cast<double>(pr.Qk(i)) - ref.qk[i]));
  }
  EXPECT_LE(qk_err, Tolerance(c.qk_dtype) * std::max(max_qk, 1e-30)) << "qk " << c.Describe();
}

template <typename T>
T Pick(std::mt19937_64& rng, std::initializer_list<T> items) {
  std::uniform_int_distribution<std::size_t> u(0, items.size() - 1);
  return *(items.begin() + u(rng));
}

int Uniform(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

// Fills per-row lengths / offsets / valid counts.
void FillRows(std::mt19937_64& rng, Case& c) {
  c.kv_len.assign(c.B, c.T);
  c.q_offset.assign(c.B, 0);
  c.valid_q.assign(c.B, c.S);
  for (int b = 0; b < c.B; ++b) {
    if (b > 0) c.kv_len[b] = Uniform(rng, std::max(1, c.T / 2), c.T);
    if (Uniform(rng, 0, 19) == 0) c.kv_len[b] = 0;
    const int mode = Uniform(rng, 0, 3);
    if (mode <= 1) {
      c.q_offset[b] = c.kv_len[b] - c.S;  // new tokens at the end (negative when S > T_b)
    } else if (mode == 2) {
      c.q_offset[b] = Uniform(rng, -8, static_cast<int>(c.kv_len[b]));
    } else {
      c.q_offset[b] = 0;
    }
    if (Uniform(rng, 0, 3) == 0) c.valid_q[b] = Uniform(rng, 0, c.S);
  }
}

// A random configuration whose reference cost B*S*N*T*H stays within budget.
Case RandomCase(std::mt19937_64& rng, double budget) {
  Case c;
  c.seed = rng();
  const auto heads = Pick<std::pair<int, int>>(rng, {{4, 1}, {8, 1}, {8, 8}, {8, 2}, {16, 4}, {32, 8}});
  c.N = heads.first;
  c.Nkv = heads.second;
  c.H = Pick(rng, {32, 40, 64, 80, 96, 128, 256, 512});
  c.B = Uniform(rng, 1, 5);
  const int smode = Uniform(rng, 0, 9);
  c.S = smode < 4 ? 1 : smode < 6 ? Uniform(rng, 2, 17) : Uniform(rng, 18, 300);
  c.T = static_cast<int>(std::exp(std::uniform_real_distribution<double>(0.0, std::log(4096.0))(rng)));
  if (c.S > 1 && Uniform(rng, 0, 1)) c.T = std::max(c.T, c.S);  // prefill-like
  for (;;) {
    const double cost = static_cast<double>(c.B) * c.S * c.N * c.T * c.H;
    if (cost <= budget) break;
    if (c.B > 1) {
      --c.B;
    } else if (c.S > 1 && (c.S >= c.T / 8 || c.T <= 64)) {
      c.S = (c.S + 1) / 2;
    } else if (c.T > 1) {
      c.T = (c.T + 1) / 2;
    } else {
      c.H = 32;
      break;
    }
  }
  c.causal = Uniform(rng, 0, 3) != 0;
  if (Uniform(rng, 0, 2) == 0) c.window = Uniform(rng, 1, c.T + 4);
  c.scale = static_cast<float>(std::uniform_real_distribution<double>(0.5, 4.0)(rng) / std::sqrt(c.H));
  if (Uniform(rng, 0, 3) == 0) c.softcap = Pick(rng, {1.0f, 5.0f, 30.0f});
  c.bias = Uniform(rng, 0, 3) == 0;
  c.bias_bcast_b = Uniform(rng, 0, 1);
  c.bias_bcast_n = Uniform(rng, 0, 1);
  c.bias_dtype = Pick(rng, {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  c.sink = Uniform(rng, 0, 3) == 0;
  c.qk_mode = Pick(rng, {0, 0, 1, 2});
  c.kv_dtype = Pick(rng, {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kQ8_0});
  if (c.kv_dtype == DType::kQ8_0 && c.H % kQ8_0BlockSize != 0) c.kv_dtype = DType::kFloat16;
  c.out_dtype = Pick(rng, {DType::kFloat32, DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  c.qk_dtype = Pick(rng, {DType::kFloat32, DType::kFloat32, DType::kFloat16});
  c.bsnh = Uniform(rng, 0, 1);
  if (Uniform(rng, 0, 4) == 0) c.ring = Uniform(rng, std::max(1, c.T / 2), c.T + 3);
  c.slack = Uniform(rng, 0, 3);
  c.block = Pick(rng, {0, 0, 0, 1, 5, 16, 64, 100});
  FillRows(rng, c);
  return c;
}

int SweepCount() {
  if (const char* e = std::getenv("KVSHARE_SWEEP_CONFIGS")) return std::max(1, std::atoi(e));
  return kSanitized ? 40 : 260;
}

TEST(AttendOptimized, RandomSweepMatchesDoubleReference) {
  std::mt19937_64 rng(20240611);
  const int count = SweepCount();
  for (int i = 0; i < count; ++i) {
    const Case c = RandomCase(rng, kSanitized ? 2e6 : 1.5e7);
    Problem pr(c);
    AttendOptimized(pr.p, nullptr);
    ExpectMatches(pr, Reference(pr.p, c.qk_mode ? c.T : 0));
    if (HasFailure()) {
      ADD_FAILURE() << "stopping at config " << i;
      return;
    }
  }
}

// The plain twin runs against every compiled SIMD target the CPU supports
// (the generic fallback included).
TEST(AttendOptimized, EveryCompiledTarget) {
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    testing::RecordMeasured("target %s\n", hwy::TargetName(target));
    std::mt19937_64 rng(31);
    for (int i = 0; i < (kSanitized ? 4 : 25); ++i) {
      const Case c = RandomCase(rng, 1e6);
      Problem pr(c);
      AttendOptimized(pr.p, nullptr);
      ExpectMatches(pr, Reference(pr.p, c.qk_mode ? c.T : 0));
    }
    if (HasFailure()) ADD_FAILURE() << "target " << hwy::TargetName(target);
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Every head size that is a multiple of 8 (vector tails on wide targets).
TEST(AttendOptimized, AllHeadSizes) {
  std::mt19937_64 rng(7);
  for (int H : {8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 128, 160, 256, 384, 512}) {
    for (int S : {1, 19}) {
      Case c;
      c.seed = rng();
      c.B = 2;
      c.S = S;
      c.T = 97;
      c.N = 8;
      c.Nkv = 2;
      c.H = H;
      c.scale = 2.0f / std::sqrt(static_cast<float>(H));
      c.kv_dtype = S == 1 ? DType::kFloat16 : DType::kFloat32;
      c.qk_mode = 2;
      FillRows(rng, c);
      Problem pr(c);
      AttendOptimized(pr.p, nullptr);
      ExpectMatches(pr, Reference(pr.p, c.T));
      if (H % kQ8_0BlockSize == 0 && H <= 256) {  // and the same shapes on q8_0 blocks
        Case q8 = c;
        q8.kv_dtype = DType::kQ8_0;
        Problem pq(q8);
        AttendOptimized(pq.p, nullptr);
        ExpectMatches(pq, Reference(pq.p, q8.T));
      }
    }
  }
}

// Tiles of 1 to 48 query rows (rows = S x G, G up to 16): row counts that are
// and are not multiples of the row tile (zero padding rows), one and several
// row groups.
TEST(AttendOptimized, EveryRowCount) {
  std::mt19937_64 rng(11);
  for (int G : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16}) {
    for (int S : {1, 2, 3}) {
      Case c;
      c.seed = rng();
      c.B = 1;
      c.S = S;
      c.T = 70;
      c.N = G;
      c.Nkv = 1;
      c.H = 64;
      c.scale = 2.0f / std::sqrt(64.0f);
      c.kv_dtype = S == 2 ? DType::kQ8_0 : DType::kFloat16;
      c.block = 16;
      c.qk_mode = 2;
      FillRows(rng, c);
      Problem pr(c);
      AttendOptimized(pr.p, nullptr);
      ExpectMatches(pr, Reference(pr.p, c.T));
    }
  }
}

std::vector<float> OutAsFloat(const Problem& pr) {
  std::vector<float> o(pr.q.size());
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = pr.Out(i);
  return o;
}

// Cases that stress blocking: long causal + window (fully masked blocks),
// decode with split-KV, negative offsets, sinks, bias.
std::vector<Case> BlockingCases() {
  std::mt19937_64 rng(99);
  std::vector<Case> cases;
  auto add = [&](int B, int S, int T, int N, int Nkv, int H, bool causal, int window, bool sink, bool bias,
                 float softcap, DType kv) {
    Case c;
    c.seed = rng();
    c.B = B;
    c.S = S;
    c.T = T;
    c.N = N;
    c.Nkv = Nkv;
    c.H = H;
    c.causal = causal;
    c.window = window;
    c.sink = sink;
    c.bias = bias;
    c.softcap = softcap;
    c.kv_dtype = kv;
    c.scale = 3.0f / std::sqrt(static_cast<float>(H));
    FillRows(rng, c);
    cases.push_back(c);
  };
  add(1, 64, 2048, 4, 1, 64, true, 100, false, false, 0.0f, DType::kFloat32);
  add(2, 1, 4096, 8, 1, 128, true, 0, true, false, 0.0f, DType::kFloat16);
  add(1, 1, 3000, 4, 1, 256, true, 700, false, false, 30.0f, DType::kBFloat16);
  add(3, 40, 300, 8, 2, 80, true, 0, false, true, 0.0f, DType::kFloat32);
  add(2, 17, 500, 16, 4, 40, false, 33, true, true, 5.0f, DType::kFloat16);
  add(1, 300, 300, 4, 1, 32, true, 0, false, false, 0.0f, DType::kFloat32);
  cases[5].q_offset[0] = -20;  // leading queries see nothing
  add(1, 1, 4096, 8, 1, 256, true, 0, true, false, 0.0f, DType::kQ8_0);
  add(2, 9, 700, 8, 2, 64, true, 300, false, true, 30.0f, DType::kQ8_0);
  return cases;
}

TEST(AttendOptimized, BlockSizesMatchUnblocked) {
  for (const Case& base : BlockingCases()) {
    Case whole = base;
    whole.block = base.T;
    Problem pw(whole);
    AttendOptimized(pw.p, nullptr);
    const std::vector<float> want = OutAsFloat(pw);
    double max_abs = 0.0;
    for (float x : want) max_abs = std::max(max_abs, static_cast<double>(std::abs(x)));
    for (int block : {1, 7, 16, 64, 0}) {
      Case c = base;
      c.block = block;
      Problem pr(c);
      AttendOptimized(pr.p, nullptr);
      double err = 0.0;
      for (std::size_t i = 0; i < want.size(); ++i)
        err = std::max(err, static_cast<double>(std::abs(pr.Out(i) - want[i])));
      // out is a convex combination of V rows (|v| <= 1), so fp32 rounding
      // scales with max |v| = 1, not with |out| (which cancels for long T).
      EXPECT_LE(err, 1e-6 * std::max(max_abs, 1.0)) << c.Describe();
    }
  }
}

TEST(AttendOptimized, BitwiseIdenticalAcrossThreadCounts) {
  std::vector<Case> cases = BlockingCases();
  std::mt19937_64 rng(5);
  for (int i = 0; i < 8; ++i) cases.push_back(RandomCase(rng, 4e6));
  cases[1].qk_mode = 2;
  cases[3].qk_mode = 1;
  ThreadPool one(1), two(2);
  for (const Case& c : cases) {
    Problem a(c), b(c), d(c);
    AttendOptimized(a.p, nullptr);
    AttendOptimized(b.p, &one);
    AttendOptimized(d.p, &two);
    EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size())) << c.Describe();
    EXPECT_EQ(0, std::memcmp(a.out.data(), d.out.data(), a.out.size())) << c.Describe();
    if (!a.qk.empty()) {
      EXPECT_EQ(0, std::memcmp(a.qk.data(), d.qk.data(), a.qk.size())) << c.Describe();
    }
  }
}

// One query's output does not depend on the queries it shares a call with:
// the queries of a prefill run in one call, in chunks of any size, or one at a
// time (decode) give bitwise the same rows (KV blocks and splits sit at
// absolute key positions). Exact prompt caching and batching rely on it.
TEST(AttendOptimized, QueryResultIndependentOfChunking) {
  std::mt19937_64 rng(2025);
  std::vector<Case> cases;
  auto add = [&](int S, int T, int N, int Nkv, int H, int window, int ring, bool sink, bool bias, float softcap,
                 DType kv, int block) {
    Case c;
    c.seed = rng();
    c.S = S;
    c.T = T;
    c.N = N;
    c.Nkv = Nkv;
    c.H = H;
    c.window = window;
    c.ring = ring;
    c.sink = sink;
    c.bias = bias;
    c.softcap = softcap;
    c.kv_dtype = kv;
    c.block = block;
    c.scale = 3.0f / std::sqrt(static_cast<float>(H));
    c.kv_len = {T};
    c.q_offset = {T - S};
    c.valid_q = {S};
    cases.push_back(c);
  };
  add(70, 2100, 4, 1, 256, 0, 0, false, false, 0.0f, DType::kFloat32, 0);      // full layer, past two splits
  add(45, 1500, 4, 1, 256, 512, 0, false, false, 0.0f, DType::kFloat16, 0);    // sliding window
  add(45, 1500, 4, 1, 256, 512, 600, false, false, 0.0f, DType::kFloat32, 0);  // window ring
  add(33, 1300, 8, 2, 64, 97, 0, true, true, 30.0f, DType::kBFloat16, 7);      // odd block, sink, bias, softcap
  for (const Case& c : cases) {
    Problem whole(c);
    AttendOptimized(whole.p, nullptr);
    const std::size_t row = static_cast<std::size_t>(c.N) * c.H;
    for (int chunk : {1, 5, 16, 17, c.S / 2 + 3}) {
      for (int s0 = 0; s0 < c.S; s0 += chunk) {
        const int n = std::min(chunk, c.S - s0);
        AttendParams p = whole.p;
        std::vector<float> out(static_cast<std::size_t>(n) * row, -1.0f);
        const std::int64_t off = c.T - c.S + s0, valid = n;
        p.q_len = n;
        p.q = whole.q.data() + static_cast<std::size_t>(s0) * row;
        p.q_offset = &off;
        p.valid_q = &valid;
        p.out = out.data();
        p.out_dtype = DType::kFloat32;
        if (c.bias) p.bias.data = whole.bias.data() + s0 * p.bias.s_stride * DTypeSize(c.bias_dtype);
        ThreadPool pool(2);
        AttendOptimized(p, &pool);
        const float* want = reinterpret_cast<const float*>(whole.out.data()) + static_cast<std::size_t>(s0) * row;
        ASSERT_EQ(0, std::memcmp(out.data(), want, out.size() * sizeof(float)))
            << c.Describe() << " chunk " << chunk << " at query " << s0;
      }
    }
  }
}

// A query's output does not depend on the other rows of its call either: a
// batch that mixes long prefill rows (right-padded to S), decode rows and an
// empty row, as a batched server step does, gives each valid query bitwise
// the output it gets alone (B = 1, S = 1 over the same row's keys), also
// against the double reference within the fp32 tolerance.
TEST(AttendOptimized, QueryResultIndependentOfOtherRows) {
  std::mt19937_64 rng(77);
  for (const auto& [window, ring, block, kv] :
       {std::tuple{0, 0, 0, DType::kFloat32}, std::tuple{512, 0, 0, DType::kFloat16},
        std::tuple{512, 700, 0, DType::kFloat32}, std::tuple{97, 0, 7, DType::kBFloat16},
        std::tuple{512, 700, 0, DType::kQ8_0}}) {
    Case c;
    c.seed = rng();
    c.B = 4;
    c.S = 41;
    c.T = 2100;
    c.N = 4;
    c.Nkv = 1;
    c.H = 64;
    c.window = window;
    c.ring = ring;
    c.block = block;
    c.kv_dtype = kv;
    c.scale = 3.0f / std::sqrt(static_cast<float>(c.H));
    // Row 0: a prefill chunk past two 1024-key splits; 1: decode; 2: a short
    // prefill; 3: no query at all.
    c.kv_len = {2100, 1500, 260, 5};
    c.q_offset = {2100 - 41, 1499, 250, 5};
    c.valid_q = {41, 1, 10, 0};
    Problem whole(c);
    ThreadPool pool(2);
    AttendOptimized(whole.p, &pool);
    const RefResult ref = Reference(whole.p, 0);
    const std::size_t row = static_cast<std::size_t>(c.N) * c.H;
    double max_ref = 0.0, max_err = 0.0;
    for (int b = 0; b < c.B; ++b) {
      for (int s = 0; s < c.valid_q[static_cast<std::size_t>(b)]; ++s) {
        AttendParams p = whole.p;
        const std::int64_t len = c.kv_len[static_cast<std::size_t>(b)],
                           off = c.q_offset[static_cast<std::size_t>(b)] + s, valid = 1;
        std::vector<float> out(row, -1.0f);
        p.batch = 1;
        p.q_len = 1;
        p.q = whole.q.data() + (static_cast<std::size_t>(b) * c.S + static_cast<std::size_t>(s)) * row;
        p.k.data = whole.k.data() + DTypeBytes(c.kv_dtype, b * p.k.batch_stride);
        p.v.data = whole.v.data() + DTypeBytes(c.kv_dtype, b * p.v.batch_stride);
        p.kv_len = &len;
        p.q_offset = &off;
        p.valid_q = &valid;
        p.out = out.data();
        AttendOptimized(p, nullptr);
        const std::size_t at = (static_cast<std::size_t>(b) * c.S + static_cast<std::size_t>(s)) * row;
        ASSERT_EQ(0,
                  std::memcmp(out.data(), reinterpret_cast<const float*>(whole.out.data()) + at, row * sizeof(float)))
            << c.Describe() << " row " << b << " query " << s;
        for (std::size_t i = 0; i < row; ++i) {
          max_ref = std::max(max_ref, std::abs(ref.out[at + i]));
          max_err = std::max(max_err, std::abs(ref.out[at + i] - static_cast<double>(out[i])));
        }
      }
    }
    EXPECT_LE(max_err, Tolerance(DType::kFloat32) * max_ref) << c.Describe();
  }
}

}  // namespace
}  // namespace kvshare::detail
