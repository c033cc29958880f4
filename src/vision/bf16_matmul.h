// A weight matrix held as bf16 for bf16 products with f32 sums: the
// encoders' reduced-precision linears (docs/vision.md "Precision"). Where
// AMX-BF16 tiles are usable (quant/bf16_tiles.h: the products, their bound and
// the packing) they run there; elsewhere through oneDNN's bf16 matmul: at
// load the matrix is converted to bf16 (round to nearest even) and packed in
// the layout oneDNN's kernel reads; a product converts the activations to
// bf16 per tile of kRows rows and runs one single-threaded oneDNN call per
// tile on kvshare's ThreadPool, the last tile zero-padded to kRows. Either
// way every output row comes from the same arithmetic whatever the thread
// count. Internal to src/vision.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "attention/bf16_support.h"  // Bf16MatMulSupported(), Bf16MatMulNative()
#include "kvshare/common/encoder_precision.h"
#include "kvshare/gguf/gguf.h"
#include "quant/bf16_tiles.h"
#include "quant/quant.h"

namespace kvshare {
class ThreadPool;
}

namespace kvshare::detail {

// What precision `auto` picks for an encoder (docs/vision.md "Precision",
// docs/audio.md "Precision"): true when the CPU has native bf16 dot products
// and the tensors of `file` that `is_matrix` selects (at least one) are all
// F16 or BF16, i.e. carry no more than bf16's bits of a bf16 checkpoint.
bool Bf16AutoPicks(const GgufFile& file, const std::function<bool(const GgufTensor&)>& is_matrix);

// kF32 or kBF16 for `requested`, this file and this CPU (`auto`:
// Bf16AutoPicks). Throws kvshare::Error "<what> precision bf16 needs ..." for
// kBF16 on a CPU without AVX-512.
EncoderPrecision ResolveEncoderPrecision(const GgufFile& file, EncoderPrecision requested, std::string_view what,
                                         const std::function<bool(const GgufTensor&)>& is_matrix);

struct Bf16MatrixOptions {
  // false: oneDNN even where the tiles are usable (benchmarks compare them).
  bool amx_tiles = true;
};

class Bf16Matrix {
 public:
  static constexpr std::int64_t kRows = 128;  // activation rows per oneDNN call

  Bf16Matrix() = default;
  // w: [rows, cols] of any type DequantizeRow reads. Throws kvshare::Error
  // when neither the tiles nor oneDNN's bf16 matmul run here
  // (Bf16MatMulSupported() false).
  explicit Bf16Matrix(const WeightMatrix& w, Bf16MatrixOptions options = {});
  // Whether the products run on the AMX tiles.
  bool amx_tiles() const;

  bool empty() const { return impl_ == nullptr; }
  std::int64_t rows() const;
  std::int64_t cols() const;
  // y[m, rows()] = bf16(x)[m, cols()] bf16(W)^T, accumulated in f32.
  void Apply(const float* x, std::int64_t m, float* y, ThreadPool* pool) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace kvshare::detail
