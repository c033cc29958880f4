// Test helpers: owning tensors of any float dtype, seeded random fill.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/float_convert.h"
#include "common/q8_0.h"
#include "kvshare/common/tensor.h"

namespace kvshare::testing {

// An owning buffer with a dtype and a shape; hands out views.
struct Buffer {
  std::vector<unsigned char> bytes;
  DType dtype = DType::kFloat32;
  Shape shape;

  Buffer() = default;
  Buffer(DType dt, Shape s) : dtype(dt), shape(s) { bytes.assign(DTypeBytes(dt, shape.NumElements()) + 1, 0); }
  ConstTensorView View() const { return ConstTensorView{bytes.data(), dtype, shape}; }
  TensorView Mut() { return TensorView{bytes.data(), dtype, shape}; }
  std::int64_t Size() const { return shape.NumElements(); }
  std::int64_t As64(std::int64_t i) const { return reinterpret_cast<const std::int64_t*>(bytes.data())[i]; }
  float Get(std::int64_t i) const { return detail::LoadAsFloat(bytes.data(), dtype, i); }
  void Set(std::int64_t i, float v) { detail::StoreFromFloat(bytes.data(), dtype, i, v); }
  std::vector<float> ToFloat() const {
    std::vector<float> v(static_cast<std::size_t>(Size()));
    for (std::int64_t i = 0; i < Size(); ++i) v[static_cast<std::size_t>(i)] = Get(i);
    return v;
  }
};

inline Buffer QuantizedQ8_0(const Buffer& f);

// Normal(0, stddev) values in dt (q8_0: drawn in float32, then quantized).
inline Buffer RandomBuffer(DType dt, Shape s, std::mt19937_64& rng, float stddev = 1.0f) {
  if (dt == DType::kQ8_0) return QuantizedQ8_0(RandomBuffer(DType::kFloat32, s, rng, stddev));
  Buffer b(dt, s);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (std::int64_t i = 0; i < b.Size(); ++i) b.Set(i, dist(rng));
  return b;
}

// The q8_0 quantization of a float buffer (same shape; last dim a multiple of 32).
inline Buffer QuantizedQ8_0(const Buffer& f) {
  Buffer q(DType::kQ8_0, f.shape);
  const std::vector<float> x = f.ToFloat();
  detail::QuantizeRowQ8_0(x.data(), f.Size(), q.bytes.data());
  return q;
}

inline Buffer Int32Buffer(const std::vector<std::int32_t>& v, Shape s) {
  Buffer b(DType::kInt32, s);
  if (!v.empty()) std::memcpy(b.bytes.data(), v.data(), v.size() * 4);
  return b;
}

inline Buffer Int64Buffer(const std::vector<std::int64_t>& v, Shape s) {
  Buffer b(DType::kInt64, s);
  if (!v.empty()) std::memcpy(b.bytes.data(), v.data(), v.size() * 8);
  return b;
}

// max |a - b| / max(1, max |b|)
inline double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 1.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// Tolerance table per dtype (ORT's GQA suites; CTranslate2 uses the same):
// fp32 1e-5, fp16 / bf16 1e-2 — the dtype with the coarsest rounding wins.
inline double Tolerance(DType a, DType b) {
  auto t = [](DType d) { return d == DType::kFloat32 ? 1e-5 : 1e-2; };
  return std::max(t(a), t(b));
}

}  // namespace kvshare::testing
