// A 2-D convolution over NHWC activations (batch 1) through oneDNN, with
// TensorFlow / timm "same" padding, run in fixed row chunks on kvshare's
// ThreadPool so results do not depend on the thread count
// (docs/vision_mobilenet_v5.md, "Kernels and threads"). Internal to src/vision.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

namespace kvshare {
class ThreadPool;
}

namespace kvshare::detail {

// Activations of one image: [h, w, c] row-major (channels fastest), so a
// pixel is a row of c floats and a 1x1 convolution is a matrix product.
struct FeatureMap {
  int h = 0;
  int w = 0;
  int c = 0;
  std::vector<float> data;  // [h * w, c]

  FeatureMap() = default;
  FeatureMap(int h_, int w_, int c_) : h(h_), w(w_), c(c_), data(static_cast<std::size_t>(h_) * w_ * c_) {}
  std::int64_t Pixels() const { return static_cast<std::int64_t>(h) * w; }
};

// "same" padding of one side length n (TensorFlow's rule, timm's pad_same):
// total = max((ceil(n / s) - 1) * s + k - n, 0), the top / left side gets
// total / 2 (the floor half), the bottom / right the rest.
struct SamePad {
  int out = 0;    // ceil(n / s)
  int begin = 0;  // top / left
  int end = 0;    // bottom / right
};
SamePad ComputeSamePad(int n, int kernel, int stride);

struct Conv2dSpec {
  int in_channels = 0;
  int out_channels = 0;
  int kernel = 0;  // square kernel side
  int stride = 1;
  bool depthwise = false;  // groups == in_channels == out_channels
};

// Weights fp32 [out][in / groups][k][k] (torch's OIHW, ggml ne {k, k, in /
// groups, out}); bias [out] or empty.
class Conv2d {
 public:
  Conv2d(const Conv2dSpec& spec, std::vector<float> weights, std::vector<float> bias);
  ~Conv2d();
  Conv2d(Conv2d&&) noexcept;
  Conv2d& operator=(Conv2d&&) noexcept;

  const Conv2dSpec& spec() const { return spec_; }
  // y = conv(x) with "same" padding; x.c must be in_channels. Output
  // [ceil(h / s), ceil(w / s), out_channels]. Throws kvshare::Error on a
  // channel mismatch or a oneDNN failure (naming the shapes).
  FeatureMap Forward(const FeatureMap& x, ThreadPool* pool) const;

 private:
  struct Prim;  // one oneDNN primitive for one chunk geometry, with its weights
  // (chunk input rows, pad top, pad bottom, chunk output rows, input width)
  using Key = std::tuple<int, int, int, int, int>;
  const Prim& PrimitiveFor(const Key& key, int pad_left, int pad_right, int out_w) const;

  Conv2dSpec spec_;
  std::vector<float> weights_;
  std::vector<float> bias_;
  mutable std::mutex mu_;
  mutable std::map<Key, std::unique_ptr<Prim>> prims_;
};

}  // namespace kvshare::detail
