// The shared pieces of the vision encoders (vision_ops.h).
#include "vision/vision_ops.h"

#include <algorithm>
#include <cmath>

#include "common/str.h"
#include "kvshare/attention/gqa.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "model/activations.h"

namespace kvshare::detail {

namespace {

float ClampScalar(const TensorLookup& t, const std::string& name, float def) {
  const float* p = t.VecOpt(name, 1);
  return p != nullptr ? *p : def;
}

void ClampInto(const float* x, std::int64_t n, float lo, float hi, float* y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(x[i], lo), hi);
}

// Bias and output clamp of rows of l.w.rows values.
void Finish(const Linear& l, float* y, std::int64_t m, ThreadPool* pool) {
  if (l.bias == nullptr && !l.clamp_out()) return;
  const std::int64_t n = l.w.rows;
  ParallelForRanges(pool, m, RowGrain(pool, m, n), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* row = y + r * n;
      if (l.bias != nullptr) {
        for (std::int64_t i = 0; i < n; ++i) row[i] += l.bias[i];
      }
      if (l.clamp_out()) ClampInto(row, n, l.out_min, l.out_max, row);
    }
  });
}

}  // namespace

Linear LoadLinear(const TensorLookup& t, const std::string& base, std::int64_t out, std::int64_t in,
                  const LinearOptions& options) {
  Linear l;
  l.w = t.ForMatMul(t.Mat(base + ".weight", out, in));
  if (options.bias) l.bias = t.Vec(base + ".bias", out);
  if (options.bf16) l.bf16 = Bf16Matrix(l.w);
  if (options.clamps) {
    l.in_min = ClampScalar(t, base + ".input_min", l.in_min);
    l.in_max = ClampScalar(t, base + ".input_max", l.in_max);
    l.out_min = ClampScalar(t, base + ".output_min", l.out_min);
    l.out_max = ClampScalar(t, base + ".output_max", l.out_max);
  }
  return l;
}

void ApplyLinear(const Linear& l, const float* x, std::int64_t m, float* y, std::vector<float>& scratch,
                 ThreadPool* pool) {
  const Linear* ls[] = {&l};
  float* ys[] = {y};
  ApplyLinears(ls, x, m, ys, scratch, pool);
}

void ApplyLinears(std::span<const Linear* const> ls, const float* x, std::int64_t m, std::span<float* const> ys,
                  std::vector<float>& scratch, ThreadPool* pool) {
  bool one_by_one = false;
  for (const Linear* l : ls) one_by_one = one_by_one || l->clamp_in() || !l->bf16.empty();
  if (!one_by_one) {
    std::vector<MatMulTarget> targets;
    for (std::size_t i = 0; i < ls.size(); ++i) targets.push_back({.w = ls[i]->w, .y = ys[i]});
    MatMulMany({.x = x, .m = m, .targets = targets, .pool = pool});
  } else {
    for (std::size_t i = 0; i < ls.size(); ++i) {
      const Linear& l = *ls[i];
      const float* in = x;
      if (l.clamp_in()) {
        const std::int64_t n = m * l.w.cols;
        if (scratch.size() < static_cast<std::size_t>(n)) scratch.resize(static_cast<std::size_t>(n));
        ClampInto(x, n, l.in_min, l.in_max, scratch.data());
        in = scratch.data();
      }
      if (!l.bf16.empty()) {
        l.bf16.Apply(in, m, ys[i], pool);
      } else {
        MatMul(l.w, {.x = in, .m = m, .y = ys[i], .pool = pool});
      }
    }
  }
  for (std::size_t i = 0; i < ls.size(); ++i) Finish(*ls[i], ys[i], m, pool);
}

void LayerNormRows(float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps,
                   ThreadPool* pool) {
  ParallelForRanges(pool, rows, RowGrain(pool, rows, n), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* row = x + r * n;
      double sum = 0.0;
      for (std::int64_t i = 0; i < n; ++i) sum += row[i];
      const double mean = sum / static_cast<double>(n);
      double var = 0.0;
      for (std::int64_t i = 0; i < n; ++i) var += (row[i] - mean) * (row[i] - mean);
      const double inv = 1.0 / std::sqrt(var / static_cast<double>(n) + eps);
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = static_cast<float>((row[i] - mean) * inv) * w[i];
        row[i] = b != nullptr ? v + b[i] : v;
      }
    }
  });
}

void RmsNormRows(float* x, std::int64_t rows, std::int64_t n, const float* w, float eps, ThreadPool* pool) {
  ParallelForRanges(pool, rows, RowGrain(pool, rows, n), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* row = x + r * n;
      const double ss = SumOfSquares(row, n);  // vectorized, in double
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
      for (std::int64_t i = 0; i < n; ++i) row[i] = w != nullptr ? row[i] * inv * w[i] : row[i] * inv;
    }
  });
}

void GeluTanhRows(float* x, std::int64_t n, ThreadPool* pool) {
  // The model's GeGLU kernel against ones: one vectorized GELU for both.
  constexpr std::int64_t kChunk = 1024;
  static const std::vector<float> ones(kChunk, 1.0f);
  ParallelForRanges(pool, n, kParallelGrainValues, [&](std::int64_t a, std::int64_t b) {
    for (std::int64_t i = a; i < b; i += kChunk) GeluTanhMul(x + i, ones.data(), x + i, std::min(kChunk, b - i));
  });
}

void GeluTanhMulRows(float* g, const float* u, std::int64_t n, ThreadPool* pool) {
  ParallelForRanges(pool, n, kParallelGrainValues,
                    [&](std::int64_t a, std::int64_t b) { GeluTanhMul(g + a, u + a, g + a, b - a); });
}

void AddRows(float* a, const float* b, std::int64_t n, ThreadPool* pool) {
  ParallelForRanges(pool, n, kParallelGrainValues, [&](std::int64_t s, std::int64_t e) {
    for (std::int64_t i = s; i < e; ++i) a[i] += b[i];
  });
}

std::vector<float> AvgPoolGrid(const float* x, int gh, int gw, std::int64_t c, int k) {
  const int oh = gh / k, ow = gw / k;
  std::vector<float> out(static_cast<std::size_t>(oh) * ow * c, 0.0f);
  const float inv = 1.0f / static_cast<float>(k * k);
  for (int ty = 0; ty < oh; ++ty) {
    for (int tx = 0; tx < ow; ++tx) {
      float* o = out.data() + (static_cast<std::int64_t>(ty) * ow + tx) * c;
      for (int dy = 0; dy < k; ++dy) {
        for (int dx = 0; dx < k; ++dx) {
          const float* in = x + (static_cast<std::int64_t>(ty * k + dy) * gw + tx * k + dx) * c;
          for (std::int64_t i = 0; i < c; ++i) o[i] += in[i];
        }
      }
      for (std::int64_t i = 0; i < c; ++i) o[i] *= inv;
    }
  }
  return out;
}

std::vector<float> PatchifyChw(const PixelTensor& pixels, int p) {
  const int gh = pixels.height / p, gw = pixels.width / p;
  const std::int64_t cols = 3LL * p * p;
  std::vector<float> out(static_cast<std::size_t>(gh) * gw * cols);
  for (int py = 0; py < gh; ++py) {
    for (int px = 0; px < gw; ++px) {
      float* o = out.data() + (static_cast<std::int64_t>(py) * gw + px) * cols;
      for (int c = 0; c < 3; ++c) {
        for (int y = 0; y < p; ++y) {
          const float* src =
              pixels.chw.data() + (static_cast<std::int64_t>(c) * pixels.height + py * p + y) * pixels.width + px * p;
          std::copy(src, src + p, o + (static_cast<std::int64_t>(c) * p + y) * p);
        }
      }
    }
  }
  return out;
}

void BidirectionalAttention(const float* q, const float* k, const float* v, std::int64_t S, int heads, int hd,
                            float scale, float* out, ThreadPool* pool, bool bf16) {
  const std::int64_t qd = static_cast<std::int64_t>(heads) * hd;
  const std::int32_t seqlen = static_cast<std::int32_t>(S - 1), total = static_cast<std::int32_t>(S);
  GqaAttributes attrs;
  attrs.num_heads = heads;
  attrs.kv_num_heads = heads;
  attrs.causal = 0;
  attrs.scale = scale;
  GqaInputs in;
  in.query = ConstTensorView{q, DType::kFloat32, {1, S, qd}};
  in.key = ConstTensorView{k, DType::kFloat32, {1, S, qd}};
  in.value = ConstTensorView{v, DType::kFloat32, {1, S, qd}};
  in.seqlens_k = ConstTensorView{&seqlen, DType::kInt32, {1}};
  in.total_sequence_length = ConstTensorView{&total, DType::kInt32, {1}};
  GqaOutputs o;
  o.output = TensorView{out, DType::kFloat32, {1, S, qd}};
  GroupQueryAttention(
      attrs, in, o,
      GqaRunOptions{.pool = pool, .matmul_precision = bf16 ? GqaMatMulPrecision::kBf16 : GqaMatMulPrecision::kF32});
}

PositionTables PositionTables::Load(const GgufFile& file, std::int64_t d) {
  const GgufTensor& pos = file.Tensor("v.position_embd.weight");
  if (pos.type != GgmlType::kF32 || pos.n_dims != 3 || pos.ne[0] != d || pos.ne[2] != 2) {
    throw Error(Str("tensor 'v.position_embd.weight' must be F32 [", d, ", n_pos, 2], got ", GgmlTypeName(pos.type),
                    " ", pos.DimsString()));
  }
  PositionTables t;
  t.n_pos = pos.ne[1];
  t.d = d;
  t.x = reinterpret_cast<const float*>(pos.data);
  t.y = t.x + t.n_pos * d;
  return t;
}

void PositionTables::CheckGrid(int gh, int gw, const char* encoder) const {
  if (gh > n_pos || gw > n_pos) {
    throw Error(Str(encoder, " encoder: the image has ", gh, " x ", gw,
                    " patches, more per side than the position table's ", n_pos));
  }
}

void PositionTables::Add(float* rows, int gh, int gw, const char* encoder) const {
  CheckGrid(gh, gw, encoder);
  for (std::int64_t s = 0; s < static_cast<std::int64_t>(gh) * gw; ++s) {
    const float* tx = x + (s % gw) * d;
    const float* ty = y + (s / gw) * d;
    for (std::int64_t i = 0; i < d; ++i) rows[s * d + i] += tx[i] + ty[i];
  }
}

WeightMatrix PatchKernel(const TensorLookup& t, const std::string& name, int p, int c, std::int64_t out) {
  const GgufTensor& k = t.file().Tensor(name);
  if (k.ne[0] != p || k.ne[1] != p || k.ne[2] != c || k.ne[3] != out) {
    throw Error(Str("tensor '", name, "' is ", k.DimsString(), ", expected [", p, ", ", p, ", ", c, ", ", out, "]"));
  }
  CheckWeightType(k);
  const std::int64_t cols = static_cast<std::int64_t>(c) * p * p;
  if (cols % GgmlBlockSize(k.type) != 0) {
    throw Error(Str("tensor '", name, "' has type ", GgmlTypeName(k.type), ", whose blocks do not divide its rows of ",
                    cols, " (use F32, F16 or BF16)"));
  }
  return t.ForMatMul(WeightMatrix::Make(k.data, k.type, out, cols));
}

}  // namespace kvshare::detail
