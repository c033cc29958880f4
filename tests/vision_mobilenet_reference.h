// Test helper: a plain float64 forward pass of the tiny MobileNet-V5 tower and
// Gemma 3n vision embedder, written from the description in
// docs/vision_mobilenet_v5.md (timm MobileNetV5Encoder, HF
// Gemma3nMultimodalEmbedder) with loops over a [C][H][W] layout: no oneDNN, no MatMul, no GQA op. Its Variant switches
// plant the mistakes a port can make, so the tests can show that the
// comparison would catch them.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "vision_mobilenet_fixture.h"

namespace kvshare::testing {

struct Mnv5RefVariant {
  bool erf_gelu = false;       // exact GELU instead of the tanh form
  bool symmetric_pad = false;  // pad (k - 1) / 2 on both sides instead of TF "same"
  bool no_kv_down = false;     // skip the K/V down-sampling
  bool no_layer_scale = false;
};

class Mnv5Reference {
 public:
  Mnv5Reference(const TinyMnv5& m, const std::map<std::string, Mnv5Tensor>& w, Mnv5RefVariant v = {})
      : m_(m), w_(w), v_(v) {}

  // pixels [3, S, S] -> [tokens, n_text].
  std::vector<double> Encode(const std::vector<float>& chw) const {
    const int S = m_.image_size;
    Map x{3, S, S, std::vector<double>(chw.begin(), chw.end())};
    x = Conv(x, "v.conv_stem.conv.weight", 2);
    const std::vector<double>& b = W("v.conv_stem.conv.bias");
    for (int c = 0; c < x.c; ++c) {
      for (int i = 0; i < x.h * x.w; ++i) x.v[static_cast<std::size_t>(c) * x.h * x.w + i] += b[c];
    }
    Norm(x, "v.conv_stem.bn.weight", true);
    std::vector<Map> ends;
    for (std::size_t s = 0; s < m_.stages.size(); ++s) {
      for (std::size_t i = 0; i < m_.stages[s].size(); ++i) {
        x = Block(x, "v.blk." + std::to_string(s) + "." + std::to_string(i) + ".", m_.stages[s][i], i == 0 ? 2 : 1);
      }
      ends.push_back(x);
    }
    const Map f = Fusion(ends[ends.size() - 2], ends.back());
    // Embedder: tokens in row-major grid order.
    const int T = f.h * f.w, D = f.c;
    const std::vector<double>& soft = W("mm.soft_emb_norm.weight");
    const std::vector<double>& proj = W("mm.input_projection.weight");  // [n_text][D]
    std::vector<double> out(static_cast<std::size_t>(T) * m_.n_text);
    const double scale = std::sqrt(static_cast<double>(D));
    for (int t = 0; t < T; ++t) {
      std::vector<double> e(static_cast<std::size_t>(D));
      for (int c = 0; c < D; ++c) e[c] = f.v[static_cast<std::size_t>(c) * T + t] * scale;
      RmsNorm(e, &soft);
      std::vector<double> o(static_cast<std::size_t>(m_.n_text), 0.0);
      for (int r = 0; r < m_.n_text; ++r) {
        for (int c = 0; c < D; ++c) o[r] += proj[static_cast<std::size_t>(r) * D + c] * e[c];
      }
      RmsNorm(o, nullptr);
      std::copy(o.begin(), o.end(), out.begin() + static_cast<std::ptrdiff_t>(t) * m_.n_text);
    }
    return out;
  }

 private:
  struct Map {
    int c = 0, h = 0, w = 0;
    std::vector<double> v;  // [c][h][w]
    double& at(int ci, int y, int x) { return v[(static_cast<std::size_t>(ci) * h + y) * w + x]; }
    double at(int ci, int y, int x) const { return v[(static_cast<std::size_t>(ci) * h + y) * w + x]; }
  };

  const std::vector<double>& W(const std::string& name) const { return w_.at(name).v; }

  double Gelu(double x) const {
    if (v_.erf_gelu) return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }

  static void RmsNorm(std::vector<double>& x, const std::vector<double>* w) {
    double ss = 0.0;
    for (double a : x) ss += a * a;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-6);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] *= inv * (w ? (*w)[i] : 1.0);
  }

  // RMSNorm over channels at every pixel, then GELU if `gelu`.
  void Norm(Map& x, const std::string& name, bool gelu) const {
    const std::vector<double>& w = W(name);
    for (int y = 0; y < x.h; ++y) {
      for (int xx = 0; xx < x.w; ++xx) {
        double ss = 0.0;
        for (int c = 0; c < x.c; ++c) ss += x.at(c, y, xx) * x.at(c, y, xx);
        const double inv = 1.0 / std::sqrt(ss / x.c + 1e-6);
        for (int c = 0; c < x.c; ++c) {
          const double r = x.at(c, y, xx) * inv * w[c];
          x.at(c, y, xx) = gelu ? Gelu(r) : r;
        }
      }
    }
  }

  // Convolution with kernel ne {k, k, in or 1, out} (depthwise when ne[2] is
  // 1 and x has more channels), TF "same" padding (or the symmetric variant).
  Map Conv(const Map& x, const std::string& name, int stride) const {
    const Mnv5Tensor& t = w_.at(name);
    const int k = static_cast<int>(t.ne[0]), ipg = static_cast<int>(t.ne[2]), O = static_cast<int>(t.ne[3]);
    const bool dw = ipg == 1 && x.c > 1;
    auto pad = [&](int n, int* out, int* begin) {
      *out = (n + stride - 1) / stride;
      const int total = std::max((*out - 1) * stride + k - n, 0);
      *begin = total / 2;
      if (v_.symmetric_pad) {
        *begin = (k - 1) / 2;
        *out = (n + 2 * *begin - k) / stride + 1;
      }
    };
    int oh, ow, pt, pl;
    pad(x.h, &oh, &pt);
    pad(x.w, &ow, &pl);
    Map y{O, oh, ow, std::vector<double>(static_cast<std::size_t>(O) * oh * ow, 0.0)};
    for (int o = 0; o < O; ++o) {
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          double acc = 0.0;
          for (int i = 0; i < (dw ? 1 : x.c); ++i) {
            const int ic = dw ? o : i;
            for (int ky = 0; ky < k; ++ky) {
              const int iy = oy * stride - pt + ky;
              if (iy < 0 || iy >= x.h) continue;
              for (int kx = 0; kx < k; ++kx) {
                const int ix = ox * stride - pl + kx;
                if (ix < 0 || ix >= x.w) continue;
                acc += t.v[((static_cast<std::size_t>(o) * ipg + (dw ? 0 : i)) * k + ky) * k + kx] * x.at(ic, iy, ix);
              }
            }
          }
          y.at(o, oy, ox) = acc;
        }
      }
    }
    return y;
  }

  void LayerScale(Map& y, const std::string& name) const {
    if (v_.no_layer_scale || !w_.count(name)) return;
    const std::vector<double>& g = W(name);
    for (int c = 0; c < y.c; ++c) {
      for (int i = 0; i < y.h * y.w; ++i) y.v[static_cast<std::size_t>(c) * y.h * y.w + i] *= g[c];
    }
  }

  static void Residual(Map& y, const Map& x, int stride) {
    if (stride != 1 || y.c != x.c) return;
    for (std::size_t i = 0; i < y.v.size(); ++i) y.v[i] += x.v[i];
  }

  Map Block(const Map& x, const std::string& p, const Mnv5BlockSpec& b, int stride) const {
    Map y;
    switch (b.kind) {
      case Mnv5BlockSpec::kEdge: {
        y = Conv(x, p + "conv_exp.weight", stride);
        Norm(y, p + "bn1.weight", true);
        y = Conv(y, p + "conv_pwl.weight", 1);
        Norm(y, p + "bn2.weight", false);
        break;
      }
      case Mnv5BlockSpec::kUir: {
        y = x;
        if (b.k_start) {
          y = Conv(y, p + "dw_start.conv.weight", b.k_mid ? 1 : stride);
          Norm(y, p + "dw_start.bn.weight", false);
        }
        y = Conv(y, p + "pw_exp.conv.weight", 1);
        Norm(y, p + "pw_exp.bn.weight", true);
        if (b.k_mid) {
          y = Conv(y, p + "dw_mid.conv.weight", stride);
          Norm(y, p + "dw_mid.bn.weight", true);
        }
        y = Conv(y, p + "pw_proj.conv.weight", 1);
        Norm(y, p + "pw_proj.bn.weight", false);
        LayerScale(y, p + "layer_scale.gamma");
        break;
      }
      case Mnv5BlockSpec::kMqa: y = Attention(x, p, b); break;
    }
    Residual(y, x, stride);
    return y;
  }

  // Multi-query attention: heads of Q (channel h * D + d) against one K / V head.
  Map Attention(const Map& x, const std::string& p, const Mnv5BlockSpec& b) const {
    Map xn = x;
    Norm(xn, p + "norm.weight", false);
    const Map q = Conv(xn, p + "attn.query.proj.weight", 1);
    auto kv = [&](const char* which) {
      const std::string a = p + "attn." + which + ".";
      Map d = xn;
      if (b.kv_down && !v_.no_kv_down) {
        d = Conv(xn, a + "down_conv.weight", 2);
        Norm(d, a + "norm.weight", false);
      }
      return Conv(d, a + "proj.weight", 1);
    };
    const Map k = kv("key"), v = kv("value");
    const int N = x.h * x.w, M = k.h * k.w, D = b.head_dim;
    Map o{b.heads * D, x.h, x.w, std::vector<double>(static_cast<std::size_t>(b.heads) * D * N)};
    for (int h = 0; h < b.heads; ++h) {
      for (int n = 0; n < N; ++n) {
        std::vector<double> s(static_cast<std::size_t>(M));
        double mx = -1e300;
        for (int m = 0; m < M; ++m) {
          double dot = 0.0;
          for (int d = 0; d < D; ++d)
            dot += q.v[static_cast<std::size_t>(h * D + d) * N + n] * k.v[static_cast<std::size_t>(d) * M + m];
          s[m] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[m]);
        }
        double sum = 0.0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int m = 0; m < M; ++m) acc += s[m] / sum * v.v[static_cast<std::size_t>(d) * M + m];
          o.v[static_cast<std::size_t>(h * D + d) * N + n] = acc;
        }
      }
    }
    Map y = Conv(o, p + "attn.output.proj.weight", 1);
    LayerScale(y, p + "layer_scale.gamma");
    return y;
  }

  // Upsample `lo` to `hi`'s size (nearest), concat channels, pw_exp + norm +
  // GELU, pw_proj + norm, average pool to the token grid, norm.
  Map Fusion(const Map& hi, const Map& lo) const {
    Map cat{hi.c + lo.c, hi.h, hi.w, {}};
    cat.v = hi.v;
    for (int c = 0; c < lo.c; ++c) {
      for (int y = 0; y < hi.h; ++y) {
        for (int x = 0; x < hi.w; ++x) cat.v.push_back(lo.at(c, y * lo.h / hi.h, x * lo.w / hi.w));
      }
    }
    Map f = Conv(cat, "v.msfa.ffn.pw_exp.conv.weight", 1);
    Norm(f, "v.msfa.ffn.pw_exp.bn.weight", true);
    f = Conv(f, "v.msfa.ffn.pw_proj.conv.weight", 1);
    Norm(f, "v.msfa.ffn.pw_proj.bn.weight", false);
    const int G = static_cast<int>(std::lround(std::sqrt(m_.image_size / m_.patch_size))), s = f.h / G;
    Map g{f.c, G, G, std::vector<double>(static_cast<std::size_t>(f.c) * G * G, 0.0)};
    for (int c = 0; c < f.c; ++c) {
      for (int y = 0; y < f.h; ++y) {
        for (int x = 0; x < f.w; ++x) g.at(c, y / s, x / s) += f.at(c, y, x) / (s * s);
      }
    }
    Norm(g, "v.msfa.norm.weight", false);
    return g;
  }

  TinyMnv5 m_;
  const std::map<std::string, Mnv5Tensor>& w_;
  Mnv5RefVariant v_;
};

}  // namespace kvshare::testing
