// Test helpers: tiny random mmproj GGUFs for the transformer-style vision
// encoders (gemma3, gemma4v, gemma4uv), written as llama.cpp's converter
// writes them (key and tensor names, layouts, the Gemma 3 norm's +1, the
// Gemma 4 patch kernel's HWC -> CHW re-layout, the unified model's column
// permutation; docs/vision.md), and plain float64 references of each
// encoder written from the HF model's steps over the HF-layout weights.
// The references use no kvshare op: loops only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gguf_writer.h"
#include "kvshare/vision/vision_encoder.h"
#include "model_tiny_gemma.h"  // EncodeRow
#include "quant/quant.h"

namespace kvshare::testing {

using Vec = std::vector<double>;

// Collects keys and tensors; Add returns the values as stored (rounded to the
// tensor's type), in the file's (GGUF) order.
struct MmprojBuilder {
  GgufSpec spec;
  std::mt19937_64 rng;
  explicit MmprojBuilder(std::uint64_t seed) : rng(seed) {}

  Vec Add(const std::string& name, std::vector<std::uint64_t> ne, const Vec& v, GgmlType type = GgmlType::kF32) {
    const int row = static_cast<int>(ne[0]);
    const std::size_t rows = v.size() / static_cast<std::size_t>(row);
    std::vector<float> f(v.begin(), v.end());
    std::vector<std::uint8_t> bytes;
    Vec stored(v.size());
    std::vector<float> back(static_cast<std::size_t>(row));
    for (std::size_t r = 0; r < rows; ++r) {
      const std::vector<std::uint8_t> b = EncodeRow(type, f.data() + r * row, row);
      DequantizeRow(type, b.data(), back.data(), row);
      std::copy(back.begin(), back.end(), stored.begin() + static_cast<std::ptrdiff_t>(r * row));
      bytes.insert(bytes.end(), b.begin(), b.end());
    }
    spec.tensors.push_back({name, std::move(ne), static_cast<std::uint32_t>(type), std::move(bytes), std::nullopt});
    return stored;
  }
  Vec Normal(std::size_t n, double scale, double mean = 0.0) {
    std::normal_distribution<double> nd(mean, scale);
    Vec v(n);
    for (double& x : v) x = nd(rng);
    return v;
  }
  // A random tensor of ne (GGUF order), stored as `type`.
  Vec Random(const std::string& name, std::vector<std::uint64_t> ne, double scale, GgmlType type = GgmlType::kF32,
             double mean = 0.0) {
    std::size_t n = 1;
    for (auto d : ne) n *= d;
    return Add(name, std::move(ne), Normal(n, scale, mean), type);
  }
  // A Linear [out, in] (HF layout == GGUF rows), std 1/sqrt(in).
  Vec Linear(const std::string& name, int out, int in, GgmlType type) {
    return Random(name, {static_cast<std::uint64_t>(in), static_cast<std::uint64_t>(out)}, 1.0 / std::sqrt(in), type);
  }
  void Keys(const std::string& projector_key, const std::string& projector) {
    spec.kvs.push_back(GgufKv::Str("general.architecture", "clip"));
    spec.kvs.push_back(GgufKv::Str("general.type", "mmproj"));
    spec.kvs.push_back(GgufKv::Bool("clip.has_vision_encoder", true));
    spec.kvs.push_back(GgufKv::Str(projector_key, projector));
    spec.kvs.push_back(GgufKv::F32("clip.vision.attention.layer_norm_epsilon", 1e-6f));
  }
};

// ---- float64 pieces of the references ----

inline Vec MatVec(const Vec& w, int out, int in, const double* x) {  // w [out, in]
  Vec y(static_cast<std::size_t>(out), 0.0);
  for (int o = 0; o < out; ++o) {
    for (int i = 0; i < in; ++i) y[o] += w[static_cast<std::size_t>(o) * in + i] * x[i];
  }
  return y;
}
inline void LayerNorm(double* x, int n, const Vec& w, const Vec& b, double eps) {
  double mean = 0, var = 0;
  for (int i = 0; i < n; ++i) mean += x[i];
  mean /= n;
  for (int i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  for (int i = 0; i < n; ++i) x[i] = (x[i] - mean) / std::sqrt(var + eps) * w[i] + (b.empty() ? 0.0 : b[i]);
}
inline void RmsNorm(double* x, int n, const Vec* w, double eps) {  // w null: no weight
  double ms = 0;
  for (int i = 0; i < n; ++i) ms += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(ms / n + eps);
  for (int i = 0; i < n; ++i) x[i] = x[i] * inv * (w != nullptr ? (*w)[i] : 1.0);
}
inline double Gelu(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
// softmax(scale q k^T) v per head, every query seeing every key; rows [S][heads*hd].
inline std::vector<Vec> Mha(const std::vector<Vec>& q, const std::vector<Vec>& k, const std::vector<Vec>& v, int heads,
                            int hd, double scale) {
  const std::size_t S = q.size();
  std::vector<Vec> out(S, Vec(static_cast<std::size_t>(heads) * hd, 0.0));
  for (int h = 0; h < heads; ++h) {
    for (std::size_t i = 0; i < S; ++i) {
      Vec s(S);
      double mx = -1e300, sum = 0;
      for (std::size_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int e = 0; e < hd; ++e) dot += q[i][h * hd + e] * k[j][h * hd + e];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (std::size_t j = 0; j < S; ++j) {
        for (int e = 0; e < hd; ++e) out[i][h * hd + e] += s[j] / sum * v[j][h * hd + e];
      }
    }
  }
  return out;
}
inline std::vector<Vec> Apply(const std::vector<Vec>& x, const Vec& w, int out, int in, const Vec& bias = {}) {
  std::vector<Vec> y;
  for (const Vec& r : x) {
    Vec o = MatVec(w, out, in, r.data());
    for (int i = 0; i < out && !bias.empty(); ++i) o[i] += bias[i];
    y.push_back(o);
  }
  return y;
}
// Means of k x k blocks of a gh x gw grid of rows.
inline std::vector<Vec> Pool(const std::vector<Vec>& x, int gh, int gw, int k) {
  std::vector<Vec> out;
  for (int ty = 0; ty < gh / k; ++ty) {
    for (int tx = 0; tx < gw / k; ++tx) {
      Vec m(x[0].size(), 0.0);
      for (int dy = 0; dy < k; ++dy) {
        for (int dx = 0; dx < k; ++dx) {
          const Vec& r = x[static_cast<std::size_t>((ty * k + dy) * gw + tx * k + dx)];
          for (std::size_t i = 0; i < m.size(); ++i) m[i] += r[i] / (k * k);
        }
      }
      out.push_back(m);
    }
  }
  return out;
}
inline double Pix(const PixelTensor& p, int c, int y, int x) {
  return p.chw[(static_cast<std::size_t>(c) * p.height + y) * p.width + x];
}
inline PixelTensor RandomPixels(int h, int w, double lo, double hi, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  PixelTensor p{h, w, std::vector<float>(3 * static_cast<std::size_t>(h) * w)};
  for (float& v : p.chw) v = static_cast<float>(u(rng));
  return p;
}
inline std::vector<double> Flatten(const std::vector<Vec>& rows) {
  std::vector<double> out;
  for (const Vec& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// ---- Gemma 3 (SigLIP + Gemma3MultiModalProjector) ----

struct TinySiglip {
  int patch = 7, side = 4, pool = 2, d = 64, heads = 4, ff = 96, layers = 2, text = 48;
  GgmlType mat = GgmlType::kF32;   // the blocks' linears
  GgmlType proj = GgmlType::kF32;  // mm.input_projection (F16 in converted files)
  bool swapped_ffn = false;        // fc1 / fc2 under each other's names (old converters)
  std::uint64_t seed = 1;
  std::function<void(GgufSpec&)> edit;
  struct Layer {
    Vec ln1_w, ln1_b, ln2_w, ln2_b, q, qb, k, kb, v, vb, o, ob, fc1, fc1b, fc2, fc2b;
  };
  // HF-layout weights as stored (after rounding to their types).
  Vec conv, conv_b, pos, post_w, post_b, soft_w_hf, proj_w;  // conv [d][3][p][p]; proj (in=d, out=text)
  std::vector<Layer> L;

  GgufSpec Build() {
    MmprojBuilder b(seed);
    b.Keys("clip.projector_type", "gemma3");
    b.spec.kvs.push_back(GgufKv::Bool("clip.use_gelu", true));
    b.spec.kvs.push_back(GgufKv::U32("clip.vision.image_size", static_cast<std::uint32_t>(side * patch)));
    b.spec.kvs.push_back(GgufKv::U32("clip.vision.patch_size", static_cast<std::uint32_t>(patch)));
    b.spec.kvs.push_back(GgufKv::U32("clip.vision.attention.head_count", static_cast<std::uint32_t>(heads)));
    b.spec.kvs.push_back(GgufKv::U32("clip.vision.block_count", static_cast<std::uint32_t>(layers)));
    b.spec.kvs.push_back(GgufKv::F32Array("clip.vision.image_mean", {0.5f, 0.5f, 0.5f}));
    b.spec.kvs.push_back(GgufKv::F32Array("clip.vision.image_std", {0.5f, 0.5f, 0.5f}));
    if (pool != 4)
      b.spec.kvs.push_back(GgufKv::U32("clip.vision.projector.scale_factor", static_cast<std::uint32_t>(pool)));
    const auto u = [](int v) { return static_cast<std::uint64_t>(v); };
    conv = b.Random("v.patch_embd.weight", {u(patch), u(patch), 3, u(d)}, 1.0 / std::sqrt(3.0 * patch * patch));
    conv_b = b.Random("v.patch_embd.bias", {u(d)}, 0.1);
    pos = b.Random("v.position_embd.weight", {u(d), u(side * side)}, 0.5);
    L.assign(static_cast<std::size_t>(layers), {});
    for (int l = 0; l < layers; ++l) {
      Layer& y = L[static_cast<std::size_t>(l)];
      const std::string p = "v.blk." + std::to_string(l) + ".";
      y.ln1_w = b.Random(p + "ln1.weight", {u(d)}, 0.1, GgmlType::kF32, 1.0);
      y.ln1_b = b.Random(p + "ln1.bias", {u(d)}, 0.1);
      y.q = b.Linear(p + "attn_q.weight", d, d, mat);
      y.qb = b.Random(p + "attn_q.bias", {u(d)}, 0.1);
      y.k = b.Linear(p + "attn_k.weight", d, d, mat);
      y.kb = b.Random(p + "attn_k.bias", {u(d)}, 0.1);
      y.v = b.Linear(p + "attn_v.weight", d, d, mat);
      y.vb = b.Random(p + "attn_v.bias", {u(d)}, 0.1);
      y.o = b.Linear(p + "attn_out.weight", d, d, mat);
      y.ob = b.Random(p + "attn_out.bias", {u(d)}, 0.1);
      y.ln2_w = b.Random(p + "ln2.weight", {u(d)}, 0.1, GgmlType::kF32, 1.0);
      y.ln2_b = b.Random(p + "ln2.bias", {u(d)}, 0.1);
      const std::string n1 = swapped_ffn ? "ffn_down" : "ffn_up", n2 = swapped_ffn ? "ffn_up" : "ffn_down";
      y.fc1 = b.Linear(p + n1 + ".weight", ff, d, mat);
      y.fc1b = b.Random(p + n1 + ".bias", {u(ff)}, 0.1);
      y.fc2 = b.Linear(p + n2 + ".weight", d, ff, mat);
      y.fc2b = b.Random(p + n2 + ".bias", {u(d)}, 0.1);
    }
    post_w = b.Random("v.post_ln.weight", {u(d)}, 0.1, GgmlType::kF32, 1.0);
    post_b = b.Random("v.post_ln.bias", {u(d)}, 0.1);
    soft_w_hf = b.Normal(static_cast<std::size_t>(d), 0.1);
    Vec folded = soft_w_hf;
    for (double& w : folded) w += 1.0;  // the converter's +1 (HF Gemma3RMSNorm: x (1 + w))
    b.Add("mm.soft_emb_norm.weight", {u(d)}, folded);
    proj_w = b.Random("mm.input_projection.weight", {u(text), u(d)}, 1.0 / std::sqrt(d), proj);
    if (edit) edit(b.spec);
    return b.spec;
  }

  // HF: conv + pos, pre-LN blocks, post-LN, avg pool, RMSNorm (1 + w), x P.
  std::vector<double> Reference(const PixelTensor& px) const {
    const int S = side * side, hd = d / heads;
    std::vector<Vec> x(static_cast<std::size_t>(S), Vec(static_cast<std::size_t>(d)));
    for (int s = 0; s < S; ++s) {
      const int py = s / side, pxl = s % side;
      for (int o = 0; o < d; ++o) {
        double acc = conv_b[o] + pos[static_cast<std::size_t>(s) * d + o];
        for (int c = 0; c < 3; ++c) {
          for (int y = 0; y < patch; ++y) {
            for (int xx = 0; xx < patch; ++xx) {
              acc += conv[((static_cast<std::size_t>(o) * 3 + c) * patch + y) * patch + xx] *
                     Pix(px, c, py * patch + y, pxl * patch + xx);
            }
          }
        }
        x[s][o] = acc;
      }
    }
    for (const Layer& y : L) {
      std::vector<Vec> h = x;
      for (Vec& r : h) LayerNorm(r.data(), d, y.ln1_w, y.ln1_b, 1e-6);
      const std::vector<Vec> a = Apply(Mha(Apply(h, y.q, d, d, y.qb), Apply(h, y.k, d, d, y.kb),
                                           Apply(h, y.v, d, d, y.vb), heads, hd, 1.0 / std::sqrt(hd)),
                                       y.o, d, d, y.ob);
      for (int s = 0; s < S; ++s) {
        for (int i = 0; i < d; ++i) x[s][i] += a[s][i];
      }
      h = x;
      for (Vec& r : h) LayerNorm(r.data(), d, y.ln2_w, y.ln2_b, 1e-6);
      std::vector<Vec> f = Apply(h, y.fc1, ff, d, y.fc1b);
      for (Vec& r : f) {
        for (double& e : r) e = Gelu(e);
      }
      const std::vector<Vec> m = Apply(f, y.fc2, d, ff, y.fc2b);
      for (int s = 0; s < S; ++s) {
        for (int i = 0; i < d; ++i) x[s][i] += m[s][i];
      }
    }
    for (Vec& r : x) LayerNorm(r.data(), d, post_w, post_b, 1e-6);
    std::vector<Vec> t = Pool(x, side, side, pool);
    Vec one_plus = soft_w_hf;
    for (double& w : one_plus) w += 1.0;
    std::vector<Vec> out;
    for (Vec& r : t) {
      RmsNorm(r.data(), d, &one_plus, 1e-6);
      Vec o(static_cast<std::size_t>(text), 0.0);
      for (int i = 0; i < d; ++i) {
        for (int j = 0; j < text; ++j) o[j] += r[i] * proj_w[static_cast<std::size_t>(i) * text + j];
      }
      out.push_back(o);
    }
    return Flatten(out);
  }
};

}  // namespace kvshare::testing
