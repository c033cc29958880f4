// A tiny random-projection "model" that exercises a stack of attention layers
// through the KV cache, and the same stack recomputed from scratch without a
// cache (naive double attention) as the oracle.
//
// Layer l: a = rmsnorm(h); q = a Wq, k = a Wk, v = a Wv (owning layers only);
// RoPE on q and k (NeoX half split, the layer's base, absolute positions);
// o = attention; h += o Wo. Shared layers use their source layer's K/V.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "attention_gqa_case.h"
#include "common_test_util.h"
#include "kvshare/cache/kv_cache.h"

namespace kvshare::testing {

class TinyModel {
 public:
  // Rows of activations: x[t * D + d].
  using Acts = std::vector<float>;

  TinyModel(ModelKvSpec spec, int num_heads, int width, int max_pos, std::uint64_t seed)
      : spec_(std::move(spec)), plan_(BuildLayerPlan(spec_)), N_(num_heads), D_(width) {
    std::mt19937_64 rng(seed);
    auto mat = [&](int rows, int cols, float stddev) {
      std::vector<float> m(static_cast<std::size_t>(rows) * cols);
      std::normal_distribution<float> d(0.f, stddev);
      for (auto& e : m) e = d(rng);
      return m;
    };
    for (const LayerSpec& l : spec_.layers) {
      Layer w;
      const int qd = N_ * l.head_size, kd = l.kv_heads * l.head_size;
      w.wq = mat(D_, qd, 1.0f / std::sqrt(static_cast<float>(D_)));
      w.wk = mat(D_, kd, 1.0f / std::sqrt(static_cast<float>(D_)));
      w.wv = mat(D_, kd, 1.0f / std::sqrt(static_cast<float>(D_)));
      w.wo = mat(qd, D_, 0.5f / std::sqrt(static_cast<float>(qd)));
      // RoPE tables (max_pos, H/2): theta_i = base^(-2i/H).
      const int half = l.head_size / 2;
      w.cos = Buffer(DType::kFloat32, {max_pos, half});
      w.sin = Buffer(DType::kFloat32, {max_pos, half});
      for (int p = 0; p < max_pos; ++p) {
        for (int i = 0; i < half; ++i) {
          const double ang = p * std::pow(static_cast<double>(l.rope_base), -2.0 * i / l.head_size);
          w.cos.Set(static_cast<std::int64_t>(p) * half + i, static_cast<float>(std::cos(ang)));
          w.sin.Set(static_cast<std::int64_t>(p) * half + i, static_cast<float>(std::sin(ang)));
        }
      }
      layers_.push_back(std::move(w));
    }
  }

  int Width() const { return D_; }

  Acts RandomTokens(int count, std::mt19937_64& rng) const {
    Acts x(static_cast<std::size_t>(count) * D_);
    std::normal_distribution<float> d(0.f, 1.f);
    for (auto& e : x) e = d(rng);
    return x;
  }

  // Oracle: the whole sequence x (T tokens) through the stack without a cache.
  // K/V are rounded through the cache dtype, as the cache stores them.
  Acts Reference(const Acts& x, DType cache_dtype) const {
    const int T = static_cast<int>(x.size()) / D_;
    Acts h = x;
    std::vector<std::vector<double>> ks(spec_.layers.size()), vs(spec_.layers.size());
    for (std::size_t li = 0; li < spec_.layers.size(); ++li) {
      const LayerSpec& l = spec_.layers[li];
      const Layer& w = layers_[li];
      const int H = l.head_size, Nkv = l.kv_heads;
      NaiveRow r;
      r.S = T, r.N = N_, r.Nkv = Nkv, r.H = H;
      r.window = l.type == AttentionType::kSliding ? l.window : 0;
      r.scale = 1.0 / std::sqrt(static_cast<double>(H));
      for (int t = 0; t < T; ++t) {
        r.qpos.push_back(t);
        const std::vector<float> a = Norm(&h[static_cast<std::size_t>(t) * D_]);
        std::vector<float> q = MatVec(a, w.wq, N_ * H);
        for (int n = 0; n < N_; ++n) Rope(w, &q[static_cast<std::size_t>(n) * H], H, t);
        r.q.insert(r.q.end(), q.begin(), q.end());
        if (plan_.layers[li].owns_cache) {
          std::vector<float> k = MatVec(a, w.wk, Nkv * H), v = MatVec(a, w.wv, Nkv * H);
          for (int n = 0; n < Nkv; ++n) Rope(w, &k[static_cast<std::size_t>(n) * H], H, t);
          RoundRows(k, H, cache_dtype);
          RoundRows(v, H, cache_dtype);
          ks[li].insert(ks[li].end(), k.begin(), k.end());
          vs[li].insert(vs[li].end(), v.begin(), v.end());
        }
      }
      const auto src = static_cast<std::size_t>(plan_.layers[li].source_layer);
      r.k = ks[src];
      r.v = vs[src];
      const std::vector<double> o = r.Run();
      for (int t = 0; t < T; ++t) {
        std::vector<float> ot(o.begin() + static_cast<std::ptrdiff_t>(t) * N_ * H,
                              o.begin() + static_cast<std::ptrdiff_t>(t + 1) * N_ * H);
        const std::vector<float> y = MatVec(ot, w.wo, D_);
        for (int d = 0; d < D_; ++d) h[static_cast<std::size_t>(t) * D_ + d] += y[static_cast<std::size_t>(d)];
      }
    }
    return h;
  }

  // One step through the cache. x is [B, S, D]; row b's first cache.Reserved(b)
  // tokens are real, the rest padding. Returns [B, S, D] (padding rows: x).
  // The caller Reserves before and Commits after.
  Acts Step(KvCache& cache, const Acts& x, int B, int S, GqaKernel kernel = GqaKernel::kAuto,
            ThreadPool* pool = nullptr) const {
    Acts h = x;
    for (std::size_t li = 0; li < spec_.layers.size(); ++li) {
      const LayerSpec& l = spec_.layers[li];
      const Layer& w = layers_[li];
      const int H = l.head_size, kd = l.kv_heads * H;
      const bool owns = plan_.layers[li].owns_cache;
      Buffer q(DType::kFloat32, {B, S, N_ * H}), k(DType::kFloat32, {B, S, kd}), v(DType::kFloat32, {B, S, kd});
      for (int bs = 0; bs < B * S; ++bs) {
        const std::vector<float> a = Norm(&h[static_cast<std::size_t>(bs) * D_]);
        Put(q, bs, MatVec(a, w.wq, N_ * H));
        if (owns) {
          Put(k, bs, MatVec(a, w.wk, kd));
          Put(v, bs, MatVec(a, w.wv, kd));
        }
      }
      Buffer out(DType::kFloat32, {B, S, N_ * H});
      LayerAttendArgs args;
      args.query = q.View();
      if (owns) {
        args.key = k.View();
        args.value = v.View();
      }
      args.cos_cache = w.cos.View();
      args.sin_cache = w.sin.View();
      args.attrs.num_heads = N_;
      args.attrs.do_rotary = 1;
      args.output = out.Mut();
      args.run.kernel = kernel;
      args.run.pool = pool;
      AttendLayer(cache, static_cast<int>(li), args);
      for (int b = 0; b < B; ++b) {
        for (int s = 0; s < cache.Reserved(b); ++s) {
          const std::size_t bs = static_cast<std::size_t>(b) * S + static_cast<std::size_t>(s);
          std::vector<float> ot(static_cast<std::size_t>(N_) * H);
          for (std::size_t i = 0; i < ot.size(); ++i) ot[i] = out.Get(static_cast<std::int64_t>(bs * ot.size() + i));
          const std::vector<float> y = MatVec(ot, w.wo, D_);
          for (int d = 0; d < D_; ++d)
            h[bs * static_cast<std::size_t>(D_) + static_cast<std::size_t>(d)] += y[static_cast<std::size_t>(d)];
        }
      }
    }
    return h;
  }

  // Runs `n` tokens of one row's sequence x (starting at token `from`) through
  // the cache in one step (row `row` of a cache with Reserved == 0 elsewhere).
  Acts StepRow(KvCache& cache, int row, const Acts& x, int from, int n, GqaKernel kernel = GqaKernel::kAuto) const {
    const int B = cache.Options().max_batch;
    Acts in(static_cast<std::size_t>(B) * n * D_, 0.f);
    std::copy(x.begin() + static_cast<std::ptrdiff_t>(from) * D_,
              x.begin() + static_cast<std::ptrdiff_t>(from + n) * D_,
              in.begin() + static_cast<std::ptrdiff_t>(row) * n * D_);
    cache.Reserve(row, n);
    const Acts out = Step(cache, in, B, n, kernel);
    cache.Commit(row);
    return Acts(out.begin() + static_cast<std::ptrdiff_t>(row) * n * D_,
                out.begin() + static_cast<std::ptrdiff_t>(row + 1) * n * D_);
  }

 private:
  struct Layer {
    std::vector<float> wq, wk, wv, wo;
    Buffer cos, sin;
  };

  std::vector<float> Norm(const float* x) const {
    double ss = 0;
    for (int d = 0; d < D_; ++d) ss += static_cast<double>(x[d]) * x[d];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / D_ + 1e-6));
    std::vector<float> a(static_cast<std::size_t>(D_));
    for (int d = 0; d < D_; ++d) a[static_cast<std::size_t>(d)] = x[d] * inv;
    return a;
  }
  static std::vector<float> MatVec(const std::vector<float>& a, const std::vector<float>& m, int cols) {
    std::vector<float> y(static_cast<std::size_t>(cols), 0.f);
    for (std::size_t i = 0; i < a.size(); ++i)
      for (int c = 0; c < cols; ++c)
        y[static_cast<std::size_t>(c)] += a[i] * m[i * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)];
    return y;
  }
  // Same float formula and table as the op's RoPE.
  static void Rope(const Layer& w, float* x, int H, int pos) {
    const int half = H / 2;
    for (int i = 0; i < half; ++i) {
      const float c = w.cos.Get(static_cast<std::int64_t>(pos) * half + i);
      const float s = w.sin.Get(static_cast<std::int64_t>(pos) * half + i);
      const float x0 = x[i], x1 = x[i + half];
      x[i] = x0 * c - x1 * s;
      x[i + half] = x1 * c + x0 * s;
    }
  }
  // x (heads of H values) as the cache stores it: each element rounded to dt,
  // or, for q8_0, each head's row quantized per block of 32 and dequantized.
  static void RoundRows(std::vector<float>& x, int H, DType dt) {
    if (dt == DType::kQ8_0) {
      std::vector<unsigned char> blocks(DTypeBytes(dt, H));
      for (std::size_t at = 0; at < x.size(); at += static_cast<std::size_t>(H)) {
        detail::QuantizeRowQ8_0(&x[at], H, blocks.data());
        detail::DequantizeRowQ8_0(blocks.data(), H, &x[at]);
      }
      return;
    }
    for (float& e : x) {
      std::uint32_t buf = 0;
      detail::StoreFromFloat(&buf, dt, 0, e);
      e = detail::LoadAsFloat(&buf, dt, 0);
    }
  }
  static void Put(Buffer& b, int row, const std::vector<float>& v) {
    for (std::size_t i = 0; i < v.size(); ++i)
      b.Set(static_cast<std::int64_t>(row) * static_cast<std::int64_t>(v.size()) + static_cast<std::int64_t>(i), v[i]);
  }

  ModelKvSpec spec_;
  LayerPlan plan_;
  int N_, D_;
  std::vector<Layer> layers_;
};

// Test stack: sliding (H 16, N_kv 2, W 5) and full (H 32, N_kv 1) layers, the
// last three KV-shared: 0 S, 1 F, 2 S, 3 S, 4 F | 5 S->3, 6 F->4, 7 S->3.
// (Head sizes are parameters: q8_0 caches need multiples of 32.)
inline ModelKvSpec MixedStackSpec(int sliding_h = 16, int full_h = 32) {
  const LayerSpec s{AttentionType::kSliding, 5, 2, sliding_h, 1e4f};
  const LayerSpec f{AttentionType::kFull, 0, 1, full_h, 1e6f};
  return ModelKvSpec{{s, f, s, s, f, s, f, s}, 3};
}

}  // namespace kvshare::testing
