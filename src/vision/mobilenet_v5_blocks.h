// The blocks of Gemma 3n's MobileNet-V5 image tower (timm MobileNetV5Encoder,
// as llama.cpp's converter names them: v.blk.{stage}.{i}.*; docs/vision_mobilenet_v5.md):
// edge residual, universal inverted residual (UIR), mobile multi-query
// attention (MQA) and the multi-scale fusion adapter (MSFA). Activations are
// FeatureMaps (pixels x channels); convolutions run through oneDNN
// (conv2d.h, pointwise.h), attention through the GQA op (causal = 0). Every norm is timm's RmsNorm2d (over the channels
// of each pixel, weight as is, eps 1e-6); every activation tanh-GELU.
// Internal to src/vision.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "quant/tensor_lookup.h"
#include "vision/conv2d.h"
#include "vision/pointwise.h"

namespace kvshare::detail {

inline constexpr float kMnv5NormEps = 1e-6f;  // timm RmsNorm2d's default

// x[p, :] = rms_norm(x[p, :]) * w for every pixel p, then torch's
// GELU(approximate='tanh') if `gelu` (model/activations.h).
void RmsNormPixels(FeatureMap& x, const float* w, float eps, bool gelu, ThreadPool* pool);

// Reads the tower's tensors, checking shapes, as fp32 (oneDNN's kernels
// take fp32; every weight type kvshare reads is dequantized at load).
class Mnv5Weights {
 public:
  explicit Mnv5Weights(const GgufFile& file) : lookup_(file) {}
  const GgufFile& file() const { return lookup_.file(); }
  bool Has(const std::string& name) const { return file().FindTensor(name) != nullptr; }
  // n floats (any shape with n elements: norms [n], layer scales [1, n, 1, 1]).
  std::vector<float> Vec(const std::string& name, std::int64_t n) const;
  // A k x k convolution of `in` input channels (ggml ne {k, k, in or 1, out}):
  // depthwise when ne[2] == 1 < in. `out` = -1 accepts any count.
  Conv2d Conv(const std::string& name, int in, int stride, bool with_bias = false) const;
  // A 1x1 convolution [out, in] (ne {1, 1, in, out}, or a Linear {in, out});
  // `out` = -1 accepts any count.
  PointwiseConv Pointwise(const std::string& name, int in, int out = -1) const;

 private:
  TensorLookup lookup_;
};

struct EdgeResidual {
  Conv2d conv_exp;         // k x k, stride s, in -> mid
  std::vector<float> bn1;  // [mid], then GELU
  PointwiseConv conv_pwl;  // [out, mid]
  std::vector<float> bn2;  // [out]
  bool skip = false;       // in == out and stride 1
};

struct UniversalInvertedResidual {
  std::optional<Conv2d> dw_start;  // depthwise k x k (stride s when there is no dw_mid), no GELU
  std::vector<float> dw_start_bn;
  PointwiseConv pw_exp;  // [mid, in], norm, GELU
  std::vector<float> pw_exp_bn;
  std::optional<Conv2d> dw_mid;  // depthwise k x k, stride s, norm, GELU
  std::vector<float> dw_mid_bn;
  PointwiseConv pw_proj;  // [out, mid], norm
  std::vector<float> pw_proj_bn;
  std::vector<float> layer_scale;  // [out] or empty
  bool skip = false;
};

struct MobileAttention {
  std::vector<float> norm;  // [in]
  int heads = 0, key_dim = 0, value_dim = 0;
  PointwiseConv query;                         // [heads * key_dim, in]
  std::optional<Conv2d> key_down, value_down;  // depthwise k x k, stride 2 ("same")
  std::vector<float> key_norm, value_norm;
  PointwiseConv key, value;  // [key_dim, in], [value_dim, in]
  PointwiseConv output;      // [out, heads * value_dim]
  std::vector<float> layer_scale;
  bool skip = false;
};

using Mnv5Block = std::variant<EdgeResidual, UniversalInvertedResidual, MobileAttention>;

// The block at `prefix` ("v.blk.2.5."), taking `in` channels, with `stride`
// (2 for the first block of a stage, else 1); null if no such block exists.
// Throws kvshare::Error for a block of unknown kind or ill-shaped tensors.
std::optional<Mnv5Block> LoadMnv5Block(const Mnv5Weights& w, const std::string& prefix, int in, int stride);
int Mnv5BlockOutChannels(const Mnv5Block& b);
FeatureMap Mnv5BlockForward(const Mnv5Block& b, const FeatureMap& x, ThreadPool* pool);

// The multi-scale fusion adapter: nearest-upsample every input to the first's
// size, concatenate channels, pw_exp 1x1 + norm + GELU, pw_proj 1x1 + norm,
// average-pool by high / out_grid, norm.
struct MultiScaleFusion {
  PointwiseConv pw_exp, pw_proj;
  std::vector<float> pw_exp_bn, pw_proj_bn, norm;
  int out_grid = 16;
  int out_channels = 0;
};
MultiScaleFusion LoadMultiScaleFusion(const Mnv5Weights& w, int in_channels, int out_grid);
FeatureMap MultiScaleFusionForward(const MultiScaleFusion& m, const std::vector<const FeatureMap*>& inputs,
                                   ThreadPool* pool);

}  // namespace kvshare::detail
