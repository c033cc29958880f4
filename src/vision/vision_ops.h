// The pieces the transformer-style vision encoders share (siglip.cc,
// gemma4_vision.cc, gemma4_unified.cc): linears with optional bias and clamps,
// LayerNorm / RMSNorm over rows, GELU-tanh, average pooling over the patch
// grid, patchify, bidirectional attention through the GQA op. Every function
// works row by row with a fixed order of operations, so results do not depend
// on the thread count. Internal to src/vision.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "kvshare/vision/vision_encoder.h"
#include "quant/quant.h"
#include "quant/tensor_lookup.h"
#include "vision/bf16_matmul.h"

namespace kvshare::detail {

// y = clamp(W clamp(x, in_min, in_max) + bias, out_min, out_max): a Linear,
// or HF's Gemma4ClippableLinear (the four 1-element F32 tensors
// `<base>.input_min` ... `.output_max` next to `<base>.weight`; a missing
// bound is +-inf).
struct Linear {
  WeightMatrix w;               // [out, in], prepared for MatMul
  Bf16Matrix bf16;              // the same as bf16 (precision bf16), or empty: f32 through MatMul
  const float* bias = nullptr;  // [out] or null
  float in_min = -std::numeric_limits<float>::infinity();
  float in_max = std::numeric_limits<float>::infinity();
  float out_min = -std::numeric_limits<float>::infinity();
  float out_max = std::numeric_limits<float>::infinity();
  bool clamp_in() const {
    return in_min > -std::numeric_limits<float>::infinity() || in_max < std::numeric_limits<float>::infinity();
  }
  bool clamp_out() const {
    return out_min > -std::numeric_limits<float>::infinity() || out_max < std::numeric_limits<float>::infinity();
  }
};

struct LinearOptions {
  bool bias = false;    // read `<base>.bias` [out] (required)
  bool clamps = false;  // read the clamp scalars where present
  bool bf16 = false;    // also hold the matrix as bf16 and multiply in bf16 (bf16_matmul.h)
};

// `<base>.weight` as [out, in] (GGUF ne = {in, out}), prepared for MatMul.
// kvshare::Error (TensorLookup's wording) for a missing or ill-shaped tensor.
Linear LoadLinear(const TensorLookup& t, const std::string& base, std::int64_t out, std::int64_t in,
                  const LinearOptions& options = {});

// y[m, out] = the linear of x[m, in]; `scratch` holds the clamped input.
void ApplyLinear(const Linear& l, const float* x, std::int64_t m, float* y, std::vector<float>& scratch,
                 ThreadPool* pool);

// Several linears of one input (q / k / v, gate / up): one MatMulMany pass
// when none clamps its input or is bf16, else one by one. ys[i]: [m, ls[i]->w.rows].
void ApplyLinears(std::span<const Linear* const> ls, const float* x, std::int64_t m, std::span<float* const> ys,
                  std::vector<float>& scratch, ThreadPool* pool);

// Rows of n: x = (x - mean) / sqrt(var + eps) * w + b (b may be null), in
// place; mean and variance in double.
void LayerNormRows(float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps,
                   ThreadPool* pool);
// Rows of n: x = x / sqrt(mean(x^2) + eps) * w (w null: no weight), in place;
// the mean square in double.
void RmsNormRows(float* x, std::int64_t rows, std::int64_t n, const float* w, float eps, ThreadPool* pool);

// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with the
// model's vectorized kernel (model/activations.h: Highway's tanh, a few ulp;
// the same arithmetic for every element whatever the split).
// x[i] = gelu_tanh(x[i]), in place.
void GeluTanhRows(float* x, std::int64_t n, ThreadPool* pool);
// g[i] = gelu_tanh(g[i]) * u[i] (GeGLU), in place.
void GeluTanhMulRows(float* g, const float* u, std::int64_t n, ThreadPool* pool);

// Adds b to a elementwise (n values).
void AddRows(float* a, const float* b, std::int64_t n, ThreadPool* pool);

// x: [gh * gw, c] (a grid of gh rows of gw cells, row-major); out: the means
// of each k x k block, [(gh / k) * (gw / k), c] row-major. gh, gw multiples of k.
std::vector<float> AvgPoolGrid(const float* x, int gh, int gw, std::int64_t c, int k);

// The p x p patches of a CHW tensor [3, h, w] (h, w multiples of p), row-major
// over the (h / p) x (w / p) grid; each patch flattened channel, row, column:
// column c * p * p + y * p + x, the order of a conv kernel {p, p, 3, out} in
// GGUF (ggml's im2col), which is how llama.cpp's converter stores the patch
// embeddings of all three encoders. [n_patches, 3 * p * p].
std::vector<float> PatchifyChw(const PixelTensor& pixels, int p);

// out[S, heads * hd] = softmax(scale q k^T) v per head, every query seeing
// every key (the encoders' bidirectional attention), through the GQA op
// (causal = 0); with `bf16` its bf16 products (GqaMatMulPrecision::kBf16,
// kvshare/attention/gqa.h).
// q, k, v: [S, heads * hd].
void BidirectionalAttention(const float* q, const float* k, const float* v, std::int64_t S, int heads, int hd,
                            float scale, float* out, ThreadPool* pool, bool bf16 = false);

// Gemma 4's two learned position tables (`v.position_embd.weight`, F32
// GGUF ne {d, n_pos, 2}: the x table, then the y table).
struct PositionTables {
  const float* x = nullptr;  // [n_pos, d]
  const float* y = nullptr;
  std::int64_t n_pos = 0;
  std::int64_t d = 0;

  // kvshare::Error for a missing tensor or another type or shape.
  static PositionTables Load(const GgufFile& file, std::int64_t d);
  // Throws kvshare::Error, naming `encoder`, when a side of a gh x gw patch
  // grid is over n_pos.
  void CheckGrid(int gh, int gw, const char* encoder) const;
  // rows[s] += x[col] + y[row] for the patches s of a gh x gw grid
  // (row-major), after CheckGrid.
  void Add(float* rows, int gh, int gw, const char* encoder) const;
};

// The file's 4-D conv kernel {p, p, c, out} (a patch embedding) as the matrix
// [out, c * p * p] over PatchifyChw's columns, prepared for MatMul.
WeightMatrix PatchKernel(const TensorLookup& t, const std::string& name, int p, int c, std::int64_t out);

}  // namespace kvshare::detail
