// Test helpers: tiny random gemma4v / gemma4uv mmproj files and their float64
// references (see vision_tiny_mmproj.h).
#pragma once

#include "vision_tiny_mmproj.h"

namespace kvshare::testing {

inline double Clamp(double x, double lo, double hi) { return std::min(std::max(x, lo), hi); }

// ---- Gemma 4 (Gemma4VisionModel + Gemma4MultimodalEmbedder) ----

struct TinyGemma4V {
  int patch = 4, pool = 3, d = 64, heads = 4, ff = 96, layers = 2, text = 48, n_pos = 16;
  GgmlType mat = GgmlType::kF32;
  bool clamps = false;       // Gemma4ClippableLinear bounds on the blocks' linears (E-models)
  bool standardize = false;  // v.std_bias / v.std_scale (26B / 31B)
  std::uint64_t seed = 2;
  std::function<void(GgufSpec&)> edit;

  struct Lin {
    Vec w;
    double in_min = -INFINITY, in_max = INFINITY, out_min = -INFINITY, out_max = INFINITY;
  };
  struct Layer {
    Vec ln1, post_attn, ln2, post_ffn, q_norm, k_norm;
    Lin q, k, v, o, gate, up, down;
  };
  Vec patch_w;  // HF input_proj [d][p p 3] over HWC-flattened patches
  Vec table;    // [2][n_pos][d]: x table, then y table
  Vec std_bias, std_scale, proj;
  std::vector<Layer> L;

  Lin Linear(MmprojBuilder& b, const std::string& base, int out, int in, int which) {
    Lin l;
    l.w = b.Linear(base + ".weight", out, in, mat);
    if (!clamps) return l;
    // Bounds that bind for some values; `which` leaves some out (a missing bound is +-inf).
    const auto put = [&](const char* suffix, double v, double& dst) {
      dst = static_cast<float>(v);
      b.Add(base + suffix, {1}, {dst});
    };
    if (which % 3 != 2) put(".input_min", -1.2 - 0.1 * which, l.in_min);
    put(".input_max", 1.1 + 0.1 * which, l.in_max);
    put(".output_min", -0.9 - 0.05 * which, l.out_min);
    if (which % 3 != 1) put(".output_max", 0.8 + 0.05 * which, l.out_max);
    return l;
  }

  GgufSpec Build() {
    MmprojBuilder b(seed);
    b.Keys("clip.vision.projector_type", "gemma4v");
    const auto u = [](int v) { return static_cast<std::uint64_t>(v); };
    b.spec.kvs.push_back(GgufKv::U32("clip.vision.image_size", 224));  // a dummy, as the converter writes it
    b.spec.kvs.push_back(GgufKv::U32("clip.vision.patch_size", u(patch)));
    b.spec.kvs.push_back(GgufKv::U32("clip.vision.attention.head_count", u(heads)));
    b.spec.kvs.push_back(GgufKv::F32Array("clip.vision.image_mean", {0.f, 0.f, 0.f}));
    b.spec.kvs.push_back(GgufKv::F32Array("clip.vision.image_std", {1.f, 1.f, 1.f}));
    const int pp = patch * patch, in = 3 * pp;
    // The converter's re-layout: HF [d, p, p, 3] -> conv kernel [d, 3, p, p].
    const Vec hf = b.Normal(static_cast<std::size_t>(d) * in, 1.0 / std::sqrt(in));
    Vec file(hf.size());
    const auto at = [&](int o, int c, int y, int x) {
      return std::pair<std::size_t, std::size_t>{static_cast<std::size_t>(o) * in + c * pp + y * patch + x,
                                                 static_cast<std::size_t>(o) * in + (y * patch + x) * 3 + c};
    };
    for (int o = 0; o < d; ++o)
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < patch; ++y)
          for (int x = 0; x < patch; ++x) file[at(o, c, y, x).first] = hf[at(o, c, y, x).second];
    const Vec stored = b.Add("v.patch_embd.weight", {u(patch), u(patch), 3, u(d)}, file, GgmlType::kF16);
    patch_w.assign(hf.size(), 0.0);
    for (int o = 0; o < d; ++o)
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < patch; ++y)
          for (int x = 0; x < patch; ++x) patch_w[at(o, c, y, x).second] = stored[at(o, c, y, x).first];
    table = b.Random("v.position_embd.weight", {u(d), u(n_pos), 2}, 0.5);
    L.assign(static_cast<std::size_t>(layers), {});
    for (int l = 0; l < layers; ++l) {
      Layer& y = L[static_cast<std::size_t>(l)];
      const std::string p = "v.blk." + std::to_string(l) + ".";
      const int hd = d / heads;
      y.ln1 = b.Random(p + "ln1.weight", {u(d)}, 0.1, GgmlType::kF32, 1.0);
      y.q = Linear(b, p + "attn_q", d, d, 0);
      y.k = Linear(b, p + "attn_k", d, d, 1);
      y.v = Linear(b, p + "attn_v", d, d, 2);
      y.o = Linear(b, p + "attn_out", d, d, 3);
      y.q_norm = b.Random(p + "attn_q_norm.weight", {u(hd)}, 0.1, GgmlType::kF32, 1.0);
      y.k_norm = b.Random(p + "attn_k_norm.weight", {u(hd)}, 0.1, GgmlType::kF32, 1.0);
      y.post_attn = b.Random(p + "attn_post_norm.weight", {u(d)}, 0.1, GgmlType::kF32, 1.0);
      y.ln2 = b.Random(p + "ln2.weight", {u(d)}, 0.1, GgmlType::kF32, 1.0);
      y.gate = Linear(b, p + "ffn_gate", ff, d, 4);
      y.up = Linear(b, p + "ffn_up", ff, d, 5);
      y.down = Linear(b, p + "ffn_down", d, ff, 6);
      y.post_ffn = b.Random(p + "ffn_post_norm.weight", {u(d)}, 0.1, GgmlType::kF32, 1.0);
    }
    if (standardize) {
      std_bias = b.Random("v.std_bias", {u(d)}, 0.3);
      std_scale = b.Random("v.std_scale", {u(d)}, 0.2, GgmlType::kF32, 1.0);
    }
    proj = b.Linear("mm.input_projection.weight", text, d, mat);
    if (edit) edit(b.spec);
    return b.spec;
  }

  static std::vector<Vec> ApplyClip(const std::vector<Vec>& x, const Lin& l, int out, int in) {
    std::vector<Vec> y;
    for (Vec r : x) {
      for (double& e : r) e = Clamp(e, l.in_min, l.in_max);
      Vec o = MatVec(l.w, out, in, r.data());
      for (double& e : o) e = Clamp(e, l.out_min, l.out_max);
      y.push_back(o);
    }
    return y;
  }
  // HF apply_multidimensional_rope: half 0 by the column, half 1 by the row;
  // each half x cos + rotate_half(x) sin, inv_freq_i = 100^(-2i / (hd / 2)).
  void Rope(std::vector<Vec>& x, int gw) const {
    const int hd = d / heads, m = hd / 2;
    for (std::size_t s = 0; s < x.size(); ++s) {
      const double pos[2] = {static_cast<double>(s % gw), static_cast<double>(s / gw)};
      for (int h = 0; h < heads; ++h) {
        for (int half = 0; half < 2; ++half) {
          double* v = x[s].data() + h * hd + half * m;
          Vec rot(static_cast<std::size_t>(m)), orig(v, v + m);
          for (int i = 0; i < m; ++i) rot[i] = i < m / 2 ? -orig[i + m / 2] : orig[i - m / 2];
          for (int i = 0; i < m; ++i) {
            const double ang = pos[half] * std::pow(100.0, -2.0 * (i % (m / 2)) / m);
            v[i] = orig[i] * std::cos(ang) + rot[i] * std::sin(ang);
          }
        }
      }
    }
  }

  std::vector<double> Reference(const PixelTensor& px) const {
    const int gh = px.height / patch, gw = px.width / patch, S = gh * gw, hd = d / heads, in = 3 * patch * patch;
    std::vector<Vec> x;
    for (int s = 0; s < S; ++s) {
      Vec hwc(static_cast<std::size_t>(in));
      for (int y = 0; y < patch; ++y)
        for (int xx = 0; xx < patch; ++xx)
          for (int c = 0; c < 3; ++c)
            hwc[(y * patch + xx) * 3 + c] = 2.0 * Pix(px, c, (s / gw) * patch + y, (s % gw) * patch + xx) - 1.0;
      Vec e = MatVec(patch_w, d, in, hwc.data());
      for (int i = 0; i < d; ++i) {
        e[i] +=
            table[static_cast<std::size_t>(s % gw) * d + i] + table[(static_cast<std::size_t>(n_pos) + s / gw) * d + i];
      }
      x.push_back(e);
    }
    const auto norm_rows = [&](std::vector<Vec>& r, const Vec* w, int n) {
      for (Vec& row : r) {
        for (std::size_t o = 0; o < row.size(); o += static_cast<std::size_t>(n)) RmsNorm(row.data() + o, n, w, 1e-6);
      }
    };
    for (const Layer& y : L) {
      std::vector<Vec> h = x;
      norm_rows(h, &y.ln1, d);
      std::vector<Vec> q = ApplyClip(h, y.q, d, d), k = ApplyClip(h, y.k, d, d), v = ApplyClip(h, y.v, d, d);
      norm_rows(q, &y.q_norm, hd);
      norm_rows(k, &y.k_norm, hd);
      norm_rows(v, nullptr, hd);
      Rope(q, gw);
      Rope(k, gw);
      std::vector<Vec> a = ApplyClip(Mha(q, k, v, heads, hd, 1.0), y.o, d, d);
      norm_rows(a, &y.post_attn, d);
      for (int s = 0; s < S; ++s)
        for (int i = 0; i < d; ++i) x[s][i] += a[s][i];
      h = x;
      norm_rows(h, &y.ln2, d);
      std::vector<Vec> g = ApplyClip(h, y.gate, ff, d), up = ApplyClip(h, y.up, ff, d);
      for (std::size_t s = 0; s < g.size(); ++s)
        for (int i = 0; i < ff; ++i) g[s][i] = Gelu(g[s][i]) * up[s][i];
      std::vector<Vec> m = ApplyClip(g, y.down, d, ff);
      norm_rows(m, &y.post_ffn, d);
      for (int s = 0; s < S; ++s)
        for (int i = 0; i < d; ++i) x[s][i] += m[s][i];
    }
    std::vector<Vec> t = Pool(x, gh, gw, pool);
    for (Vec& r : t) {
      for (int i = 0; i < d; ++i) {
        r[i] *= std::sqrt(static_cast<double>(d));
        if (standardize) r[i] = (r[i] - std_bias[i]) * std_scale[i];
      }
      RmsNorm(r.data(), d, nullptr, 1e-6);
    }
    return Flatten(Apply(t, proj, text, d));
  }
};

// ---- Gemma 4 unified (Gemma4UnifiedVisionEmbedder) ----

struct TinyGemma4UV {
  int patch = 8, d = 64, text = 48, n_pos = 8;
  GgmlType mat = GgmlType::kF32;
  std::uint64_t seed = 3;
  std::function<void(GgufSpec&)> edit;
  Vec ln1_w, ln1_b, dense, dense_b, ln2_w, ln2_b, table, ln3_w, ln3_b, proj;  // HF layout (HWC columns)

  // The converter's permutation: CHW position i holds HWC column Perm(i).
  std::size_t Perm(std::size_t i) const {
    const std::size_t pp = static_cast<std::size_t>(patch) * patch, ch = i / pp, row = (i % pp) / patch,
                      col = i % patch;
    return row * patch * 3 + col * 3 + ch;
  }

  GgufSpec Build() {
    MmprojBuilder b(seed);
    b.Keys("clip.vision.projector_type", "gemma4uv");
    const auto u = [](int v) { return static_cast<std::uint64_t>(v); };
    b.spec.kvs.push_back(GgufKv::U32("clip.vision.patch_size", u(patch / 3)));
    b.spec.kvs.push_back(GgufKv::U32("clip.vision.block_count", 0));  // dummies, as the converter writes them
    b.spec.kvs.push_back(GgufKv::U32("clip.vision.attention.head_count", 0));
    const int in = 3 * patch * patch;
    const auto permuted = [&](const std::string& name, const Vec& hf, int rows, GgmlType type) {
      Vec file(hf.size());
      for (int r = 0; r < rows; ++r)
        for (int i = 0; i < in; ++i) file[static_cast<std::size_t>(r) * in + i] = hf[r * in + Perm(i)];
      const Vec stored = b.Add(
          name, rows == 1 ? std::vector<std::uint64_t>{u(in)} : std::vector<std::uint64_t>{u(in), u(rows)}, file, type);
      Vec back(hf.size());
      for (int r = 0; r < rows; ++r)
        for (int i = 0; i < in; ++i) back[r * in + Perm(i)] = stored[static_cast<std::size_t>(r) * in + i];
      return back;
    };
    ln1_w = permuted("v.patch_norm.1.weight", b.Normal(in, 0.1, 1.0), 1, GgmlType::kF32);
    ln1_b = permuted("v.patch_norm.1.bias", b.Normal(in, 0.1), 1, GgmlType::kF32);
    dense = permuted("v.patch_embd.weight", b.Normal(static_cast<std::size_t>(in) * d, 1.0 / std::sqrt(in)), d, mat);
    dense_b = b.Random("v.patch_embd.bias", {u(d)}, 0.1);
    ln2_w = b.Random("v.patch_norm.2.weight", {u(d)}, 0.1, GgmlType::kF32, 1.0);
    ln2_b = b.Random("v.patch_norm.2.bias", {u(d)}, 0.1);
    table = b.Random("v.position_embd.weight", {u(d), u(n_pos), 2}, 0.5);
    ln3_w = b.Random("v.patch_norm.3.weight", {u(d)}, 0.1, GgmlType::kF32, 1.0);
    ln3_b = b.Random("v.patch_norm.3.bias", {u(d)}, 0.1);
    proj = b.Linear("mm.input_projection.weight", text, d, mat);
    if (edit) edit(b.spec);
    return b.spec;
  }

  std::vector<double> Reference(const PixelTensor& px) const {
    const int gh = px.height / patch, gw = px.width / patch, in = 3 * patch * patch;
    std::vector<Vec> out;
    for (int s = 0; s < gh * gw; ++s) {
      Vec hwc(static_cast<std::size_t>(in));
      for (int y = 0; y < patch; ++y)
        for (int x = 0; x < patch; ++x)
          for (int c = 0; c < 3; ++c)
            hwc[(y * patch + x) * 3 + c] = Pix(px, c, (s / gw) * patch + y, (s % gw) * patch + x);
      LayerNorm(hwc.data(), in, ln1_w, ln1_b, 1e-5);
      Vec e = MatVec(dense, d, in, hwc.data());
      for (int i = 0; i < d; ++i) e[i] += dense_b[i];
      LayerNorm(e.data(), d, ln2_w, ln2_b, 1e-5);
      for (int i = 0; i < d; ++i) {
        e[i] +=
            table[static_cast<std::size_t>(s % gw) * d + i] + table[(static_cast<std::size_t>(n_pos) + s / gw) * d + i];
      }
      LayerNorm(e.data(), d, ln3_w, ln3_b, 1e-5);
      RmsNorm(e.data(), d, nullptr, 1e-6);
      out.push_back(MatVec(proj, text, d, e.data()));
    }
    return Flatten(out);
  }
};

}  // namespace kvshare::testing
