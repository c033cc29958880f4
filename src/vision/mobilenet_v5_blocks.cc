// MobileNet-V5 blocks (mobilenet_v5_blocks.h). The order of steps is timm's
// (_efficientnet_blocks.py EdgeResidual / UniversalInvertedResidual /
// MobileAttention, attention2d.py MultiQueryAttention2d, mobilenetv5.py
// MobileNetV5MultiScaleFusionAdapter); docs/vision_mobilenet_v5.md lists them.
#include "vision/mobilenet_v5_blocks.h"

#include <cmath>

#include "common/str.h"
#include "kvshare/attention/gqa.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "model/activations.h"

namespace kvshare::detail {

namespace {

constexpr std::int64_t kPixelGrain = 64;  // pixels per pool item for per-pixel work

// All elements of a tensor as fp32: every weight type kvshare reads (rows of
// whole blocks, as GGUF stores them). The encoder keeps the copy, so the
// file's pages are released.
std::vector<float> ToFloats(const GgufFile& file, const GgufTensor& t) {
  CheckWeightType(t);
  std::vector<float> out(static_cast<std::size_t>(t.NumElements()));
  DequantizeRow(t.type, t.data, out.data(), t.NumElements());
  file.ReleasePages(t.data, t.nbytes);
  return out;
}

// y = y * s (per channel, s empty: 1) + x (x null: 0), pixel by pixel.
void ScaleAdd(FeatureMap& y, const std::vector<float>& s, const FeatureMap* x, ThreadPool* pool) {
  if (s.empty() && x == nullptr) return;
  const int C = y.c;
  ParallelForRanges(pool, y.Pixels(), kPixelGrain, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      float* r = y.data.data() + p * C;
      if (!s.empty()) {
        for (int c = 0; c < C; ++c) r[c] *= s[c];
      }
      if (x != nullptr) {
        const float* a = x->data.data() + p * C;
        for (int c = 0; c < C; ++c) r[c] += a[c];
      }
    }
  });
}

void Norm(FeatureMap& x, const std::vector<float>& w, bool gelu, ThreadPool* pool) {
  RmsNormPixels(x, w.data(), kMnv5NormEps, gelu, pool);
}

// Queries [S, heads * D] against one K/V head [T, D] each, no mask: the GQA
// op with N_kv = 1 and causal = 0 (append mode when T == S, external K/V
// otherwise). Output [S, heads * D].
FeatureMap MultiQuery(const FeatureMap& q, const FeatureMap& k, const FeatureMap& v, int heads, ThreadPool* pool) {
  const std::int64_t S = q.Pixels(), T = k.Pixels(), D = k.c;
  FeatureMap o(q.h, q.w, static_cast<int>(heads * D));
  GqaAttributes a;
  a.num_heads = heads;
  a.kv_num_heads = 1;
  a.causal = 0;
  const std::int32_t seqlen = static_cast<std::int32_t>(T - 1), total = static_cast<std::int32_t>(T);
  GqaInputs in;
  in.query = ConstTensorView{q.data.data(), DType::kFloat32, {1, S, heads * D}};
  in.key = ConstTensorView{k.data.data(), DType::kFloat32, {1, T, D}};
  in.value = ConstTensorView{v.data.data(), DType::kFloat32, {1, T, D}};
  in.seqlens_k = ConstTensorView{&seqlen, DType::kInt32, {1}};
  in.total_sequence_length = ConstTensorView{&total, DType::kInt32, {1}};
  GqaOutputs out;
  out.output = TensorView{o.data.data(), DType::kFloat32, {1, S, heads * D}};
  GroupQueryAttention(a, in, out, GqaRunOptions{.pool = pool});
  return o;
}

}  // namespace

void RmsNormPixels(FeatureMap& x, const float* w, float eps, bool gelu, ThreadPool* pool) {
  const int C = x.c;
  const std::vector<float> ones(gelu ? static_cast<std::size_t>(C) : 0, 1.0f);
  ParallelForRanges(pool, x.Pixels(), kPixelGrain, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      float* r = x.data.data() + p * C;
      const float inv = static_cast<float>(1.0 / std::sqrt(SumOfSquares(r, C) / C + eps));
      for (int c = 0; c < C; ++c) r[c] = r[c] * inv * w[c];
      if (gelu) GeluTanhMul(r, ones.data(), r, C);
    }
  });
}

// ---- weights ----

std::vector<float> Mnv5Weights::Vec(const std::string& name, std::int64_t n) const {
  const GgufTensor& t = file().Tensor(name);
  if (t.NumElements() != n) throw Error(Str("tensor '", name, "' is ", t.DimsString(), ", expected ", n, " elements"));
  return ToFloats(file(), t);
}

Conv2d Mnv5Weights::Conv(const std::string& name, int in, int stride, bool with_bias) const {
  const GgufTensor& t = file().Tensor(name);
  const bool depthwise = t.ne[2] == 1 && in > 1;
  if (t.n_dims != 4 || t.ne[0] != t.ne[1] || (t.ne[2] != in && !depthwise) || (depthwise && t.ne[3] != in)) {
    throw Error(Str("tensor '", name, "' is ", t.DimsString(), ", expected a square convolution kernel [k, k, ", in,
                    ", out] or a depthwise one [k, k, 1, ", in, "]"));
  }
  Conv2dSpec spec{.in_channels = in,
                  .out_channels = static_cast<int>(t.ne[3]),
                  .kernel = static_cast<int>(t.ne[0]),
                  .stride = stride,
                  .depthwise = depthwise};
  std::vector<float> bias;
  if (with_bias) {
    const std::string bname = name.substr(0, name.size() - std::string("weight").size()) + "bias";
    if (Has(bname)) bias = Vec(bname, spec.out_channels);
  }
  return Conv2d(spec, ToFloats(file(), t), std::move(bias));
}

PointwiseConv Mnv5Weights::Pointwise(const std::string& name, int in, int out) const {
  const GgufTensor& t = file().Tensor(name);
  const bool as4d = t.n_dims == 4 && t.ne[0] == 1 && t.ne[1] == 1 && t.ne[3] >= 1;
  const std::int64_t cols = as4d ? t.ne[2] : t.ne[0], rows = as4d ? t.ne[3] : t.ne[1];
  if (!(as4d || t.n_dims == 2) || cols != in || (out >= 0 && rows != out)) {
    throw Error(Str("tensor '", name, "' is ", t.DimsString(), ", expected a 1x1 convolution [1, 1, ", in, ", ",
                    out >= 0 ? Str(out) : std::string("out"), "]"));
  }
  return PointwiseConv(in, static_cast<int>(rows), ToFloats(file(), t));
}

// ---- blocks ----

namespace {

EdgeResidual LoadEdgeResidual(const Mnv5Weights& w, const std::string& p, int in, int stride) {
  EdgeResidual b{.conv_exp = w.Conv(p + "conv_exp.weight", in, stride)};
  const int mid = b.conv_exp.spec().out_channels;
  if (b.conv_exp.spec().depthwise) throw Error(Str("tensor '", p, "conv_exp.weight' must be a full convolution"));
  b.bn1 = w.Vec(p + "bn1.weight", mid);
  b.conv_pwl = w.Pointwise(p + "conv_pwl.weight", mid);
  b.bn2 = w.Vec(p + "bn2.weight", b.conv_pwl.out());
  b.skip = in == b.conv_pwl.out() && stride == 1;
  return b;
}

UniversalInvertedResidual LoadUir(const Mnv5Weights& w, const std::string& p, int in, int stride) {
  UniversalInvertedResidual b;
  const bool has_mid = w.Has(p + "dw_mid.conv.weight");
  if (w.Has(p + "dw_start.conv.weight")) {
    b.dw_start.emplace(w.Conv(p + "dw_start.conv.weight", in, has_mid ? 1 : stride));
    b.dw_start_bn = w.Vec(p + "dw_start.bn.weight", in);
  } else if (!has_mid && stride > 1) {
    throw Error(Str("block '", p, "' starts a stage (stride 2) but has no depthwise convolution"));
  }
  b.pw_exp = w.Pointwise(p + "pw_exp.conv.weight", in);
  const int mid = b.pw_exp.out();
  b.pw_exp_bn = w.Vec(p + "pw_exp.bn.weight", mid);
  if (has_mid) {
    b.dw_mid.emplace(w.Conv(p + "dw_mid.conv.weight", mid, stride));
    b.dw_mid_bn = w.Vec(p + "dw_mid.bn.weight", mid);
  }
  b.pw_proj = w.Pointwise(p + "pw_proj.conv.weight", mid);
  const int out = b.pw_proj.out();
  b.pw_proj_bn = w.Vec(p + "pw_proj.bn.weight", out);
  if (w.Has(p + "layer_scale.gamma")) b.layer_scale = w.Vec(p + "layer_scale.gamma", out);
  b.skip = in == out && stride == 1;
  return b;
}

MobileAttention LoadMqa(const Mnv5Weights& w, const std::string& p, int in, int stride) {
  if (stride != 1) throw Error(Str("block '", p, "' starts a stage (stride 2) but is an attention block"));
  const std::string a = p + "attn.";
  MobileAttention b;
  b.norm = w.Vec(p + "norm.weight", in);
  b.key = w.Pointwise(a + "key.proj.weight", in);
  b.value = w.Pointwise(a + "value.proj.weight", in);
  b.key_dim = b.key.out();
  b.value_dim = b.value.out();
  b.query = w.Pointwise(a + "query.proj.weight", in);
  if (b.query.out() % b.key_dim != 0) {
    throw Error(Str("tensor '", a, "query.proj.weight' has ", b.query.out(),
                    " outputs, not a multiple of the key size ", b.key_dim));
  }
  b.heads = b.query.out() / b.key_dim;
  if (b.value_dim != b.key_dim) {
    throw Error(Str("block '", p, "': value size ", b.value_dim, " differs from key size ", b.key_dim,
                    " (the GQA op takes one head size)"));
  }
  // timm creates the K / V down-sampling only for kv_stride > 1; Gemma 3n's is 2.
  for (auto [name, down, norm] :
       {std::tuple{"key", &b.key_down, &b.key_norm}, std::tuple{"value", &b.value_down, &b.value_norm}}) {
    const std::string d = a + name + ".down_conv.weight";
    if (!w.Has(d)) continue;
    down->emplace(w.Conv(d, in, 2));
    if (!(*down)->spec().depthwise) throw Error(Str("tensor '", d, "' must be a depthwise convolution"));
    *norm = w.Vec(a + name + ".norm.weight", in);
  }
  b.output = w.Pointwise(a + "output.proj.weight", b.heads * b.value_dim);
  if (w.Has(p + "layer_scale.gamma")) b.layer_scale = w.Vec(p + "layer_scale.gamma", b.output.out());
  b.skip = in == b.output.out();
  return b;
}

FeatureMap Forward(const EdgeResidual& b, const FeatureMap& x, ThreadPool* pool) {
  FeatureMap h = b.conv_exp.Forward(x, pool);
  Norm(h, b.bn1, true, pool);
  FeatureMap y = b.conv_pwl.Forward(h, pool);
  Norm(y, b.bn2, false, pool);
  ScaleAdd(y, {}, b.skip ? &x : nullptr, pool);
  return y;
}

FeatureMap Forward(const UniversalInvertedResidual& b, const FeatureMap& x, ThreadPool* pool) {
  const FeatureMap* cur = &x;
  FeatureMap start;
  if (b.dw_start) {
    start = b.dw_start->Forward(x, pool);
    Norm(start, b.dw_start_bn, false, pool);
    cur = &start;
  }
  FeatureMap h = b.pw_exp.Forward(*cur, pool);
  Norm(h, b.pw_exp_bn, true, pool);
  if (b.dw_mid) {
    h = b.dw_mid->Forward(h, pool);
    Norm(h, b.dw_mid_bn, true, pool);
  }
  FeatureMap y = b.pw_proj.Forward(h, pool);
  Norm(y, b.pw_proj_bn, false, pool);
  ScaleAdd(y, b.layer_scale, b.skip ? &x : nullptr, pool);
  return y;
}

FeatureMap Forward(const MobileAttention& b, const FeatureMap& x, ThreadPool* pool) {
  FeatureMap xn = x;
  Norm(xn, b.norm, false, pool);
  const FeatureMap q = b.query.Forward(xn, pool);
  auto project = [&](const std::optional<Conv2d>& down, const std::vector<float>& norm, const PointwiseConv& proj) {
    if (!down) return proj.Forward(xn, pool);
    FeatureMap d = down->Forward(xn, pool);
    Norm(d, norm, false, pool);
    return proj.Forward(d, pool);
  };
  const FeatureMap k = project(b.key_down, b.key_norm, b.key);
  const FeatureMap v = project(b.value_down, b.value_norm, b.value);
  const FeatureMap o = MultiQuery(q, k, v, b.heads, pool);
  FeatureMap y = b.output.Forward(o, pool);
  ScaleAdd(y, b.layer_scale, b.skip ? &x : nullptr, pool);
  return y;
}

}  // namespace

std::optional<Mnv5Block> LoadMnv5Block(const Mnv5Weights& w, const std::string& prefix, int in, int stride) {
  if (w.Has(prefix + "conv_exp.weight")) return LoadEdgeResidual(w, prefix, in, stride);
  if (w.Has(prefix + "pw_exp.conv.weight")) return LoadUir(w, prefix, in, stride);
  if (w.Has(prefix + "attn.query.proj.weight")) return LoadMqa(w, prefix, in, stride);
  for (const GgufTensor& t : w.file().tensors()) {
    if (t.name.rfind(prefix, 0) == 0) {
      throw Error(Str("MobileNet-V5 block '", prefix, "' is of no known kind (edge residual: conv_exp, ",
                      "inverted residual: pw_exp.conv, attention: attn.query.proj); it has '", t.name, "'"));
    }
  }
  return std::nullopt;
}

int Mnv5BlockOutChannels(const Mnv5Block& b) {
  return std::visit(
      [](const auto& blk) -> int {
        using T = std::decay_t<decltype(blk)>;
        if constexpr (std::is_same_v<T, EdgeResidual>) return blk.conv_pwl.out();
        if constexpr (std::is_same_v<T, UniversalInvertedResidual>) return blk.pw_proj.out();
        if constexpr (std::is_same_v<T, MobileAttention>) return blk.output.out();
      },
      b);
}

FeatureMap Mnv5BlockForward(const Mnv5Block& b, const FeatureMap& x, ThreadPool* pool) {
  return std::visit([&](const auto& blk) { return Forward(blk, x, pool); }, b);
}

// ---- multi-scale fusion ----

MultiScaleFusion LoadMultiScaleFusion(const Mnv5Weights& w, int in_channels, int out_grid) {
  MultiScaleFusion m;
  m.out_grid = out_grid;
  m.pw_exp = w.Pointwise("v.msfa.ffn.pw_exp.conv.weight", in_channels);
  m.pw_exp_bn = w.Vec("v.msfa.ffn.pw_exp.bn.weight", m.pw_exp.out());
  m.pw_proj = w.Pointwise("v.msfa.ffn.pw_proj.conv.weight", m.pw_exp.out());
  m.out_channels = m.pw_proj.out();
  m.pw_proj_bn = w.Vec("v.msfa.ffn.pw_proj.bn.weight", m.out_channels);
  m.norm = w.Vec("v.msfa.norm.weight", m.out_channels);
  return m;
}

FeatureMap MultiScaleFusionForward(const MultiScaleFusion& m, const std::vector<const FeatureMap*>& inputs,
                                   ThreadPool* pool) {
  const int H = inputs.front()->h, W = inputs.front()->w, G = m.out_grid;
  if (H != W || H % G != 0) {
    throw Error(Str("multi-scale fusion: the ", H, "x", W, " feature map does not pool to ", G, "x", G,
                    " (its side must be a multiple of the output grid)"));
  }
  int C = 0;
  for (const FeatureMap* f : inputs) C += f->c;
  // Nearest upsampling (torch: source index floor(dst * in / out)) and channel concatenation.
  FeatureMap cat(H, W, C);
  ParallelForRanges(pool, cat.Pixels(), kPixelGrain, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const int y = static_cast<int>(p / W), x = static_cast<int>(p % W);
      float* dst = cat.data.data() + p * C;
      for (const FeatureMap* f : inputs) {
        const int sy = y * f->h / H, sx = x * f->w / W;
        const float* src = f->data.data() + (static_cast<std::size_t>(sy) * f->w + sx) * f->c;
        dst = std::copy(src, src + f->c, dst);
      }
    }
  });
  FeatureMap h = m.pw_exp.Forward(cat, pool);
  Norm(h, m.pw_exp_bn, true, pool);
  FeatureMap y = m.pw_proj.Forward(h, pool);
  Norm(y, m.pw_proj_bn, false, pool);
  // Average pool to out_grid (timm: kernel = stride = H / out_grid).
  const int s = H / G, OC = y.c;
  FeatureMap out(G, G, OC);
  for (int gy = 0; gy < G; ++gy) {
    for (int gx = 0; gx < G; ++gx) {
      float* o = out.data.data() + (static_cast<std::size_t>(gy) * G + gx) * OC;
      for (int dy = 0; dy < s; ++dy) {
        for (int dx = 0; dx < s; ++dx) {
          const float* r = y.data.data() + (static_cast<std::size_t>(gy * s + dy) * W + gx * s + dx) * OC;
          for (int c = 0; c < OC; ++c) o[c] += r[c];
        }
      }
      for (int c = 0; c < OC; ++c) o[c] /= static_cast<float>(s * s);
    }
  }
  Norm(out, m.norm, false, pool);
  return out;
}

}  // namespace kvshare::detail
