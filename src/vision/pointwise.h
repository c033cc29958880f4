// A 1x1 convolution (a matrix product over pixels) through oneDNN's matmul,
// in fixed tiles of pixels x output channels on kvshare's ThreadPool, so the
// results do not depend on the thread count (as conv2d.h). Internal to
// src/vision.
//
// Why not quant/'s MatMul: its float kernels are dot products per output,
// built for decode-sized m; the encoders' products have m in the thousands,
// where oneDNN's blocked sgemm is several times faster (docs/vision_mobilenet_v5.md).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "vision/conv2d.h"

namespace kvshare::detail {

class PointwiseConv {
 public:
  PointwiseConv();  // empty: in() == out() == 0
  // weights fp32 [out, in] (torch's [out, in, 1, 1]).
  PointwiseConv(int in, int out, std::vector<float> weights);
  ~PointwiseConv();
  PointwiseConv(PointwiseConv&&) noexcept;
  PointwiseConv& operator=(PointwiseConv&&) noexcept;

  int in() const { return in_; }
  int out() const { return out_; }
  // y[p, :] = W x[p, :] for every pixel. Throws kvshare::Error when x.c !=
  // in() or oneDNN fails.
  FeatureMap Forward(const FeatureMap& x, ThreadPool* pool) const;
  // The same over `m` rows of `in` floats at x into y [m, out].
  void Rows(const float* x, std::int64_t m, float* y, ThreadPool* pool) const;

 private:
  struct Prim;
  const Prim& PrimitiveFor(std::int64_t rows, std::int64_t cols) const;

  int in_ = 0, out_ = 0;
  std::vector<float> weights_;  // [out, in]
  mutable std::mutex mu_;
  mutable std::map<std::pair<std::int64_t, std::int64_t>, std::unique_ptr<Prim>> prims_;
};

}  // namespace kvshare::detail
