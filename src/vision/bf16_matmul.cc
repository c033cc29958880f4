// bf16 weight matrices through oneDNN's matmul (bf16_matmul.h).
#include "vision/bf16_matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "attention/onednn.h"
#include "common/str.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "vision/bf16_rows.h"

namespace kvshare::detail {

using dnnl::memory;

bool Bf16AutoPicks(const GgufFile& file, const std::function<bool(const GgufTensor&)>& is_matrix) {
  if (!Bf16MatMulNative()) return false;
  bool any = false;
  for (const GgufTensor& t : file.tensors()) {
    if (!is_matrix(t)) continue;
    if (t.type != GgmlType::kF16 && t.type != GgmlType::kBF16) return false;
    any = true;
  }
  return any;
}

EncoderPrecision ResolveEncoderPrecision(const GgufFile& file, EncoderPrecision requested, std::string_view what,
                                         const std::function<bool(const GgufTensor&)>& is_matrix) {
  if (requested == EncoderPrecision::kF32) return requested;
  if (requested == EncoderPrecision::kBF16) {
    if (!Bf16MatMulSupported()) {
      throw Error(Str(what, " precision bf16 needs a CPU with AVX-512 (oneDNN's bf16 matmul); use f32 or auto"));
    }
    return requested;
  }
  return Bf16AutoPicks(file, is_matrix) ? EncoderPrecision::kBF16 : EncoderPrecision::kF32;
}

struct Bf16Matrix::Impl {
  std::int64_t n = 0, k = 0;  // W [n, k]
  AmxBf16Weights tiles;       // with use_tiles: the products; else oneDNN's below
  bool use_tiles = false;
  dnnl::matmul mm;
  memory::desc src_md, dst_md, scratch_md;
  memory weights;  // packed bf16, owned by oneDNN's memory object
};

Bf16Matrix::Bf16Matrix(const WeightMatrix& w, Bf16MatrixOptions options) {
  auto impl = std::make_shared<Impl>();
  const memory::dim N = w.rows, K = w.cols;
  impl->n = N;
  impl->k = K;
  if (options.amx_tiles && AmxBf16Usable()) {
    impl->tiles = AmxBf16Weights(w);
    impl->use_tiles = true;
    impl_ = std::move(impl);
    return;
  }
  if (!Bf16MatMulSupported()) {
    throw Error("bf16 encoder precision needs a CPU with AVX-512 (oneDNN's bf16 matmul); use f32 precision");
  }
  const dnnl::engine& eng = CpuEngine();
  try {
    impl->src_md = memory::desc({kRows, K}, memory::data_type::bf16, memory::format_tag::ab);
    impl->dst_md = memory::desc({kRows, N}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc w_any({K, N}, memory::data_type::bf16, memory::format_tag::any);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(impl->src_md, w_any, impl->dst_md), attr, eng);
    impl->mm = dnnl::matmul(pd);
    impl->scratch_md = pd.scratchpad_desc();
    // W^T [K, N] read from W [N, K] as f32 (element (k, n) at n * K + k),
    // converted and packed by one reorder.
    std::vector<float> wf(static_cast<std::size_t>(N * K));
    for (std::int64_t r = 0; r < N; ++r) {
      DequantizeRow(w.type, static_cast<const std::uint8_t*>(w.data) + r * w.row_bytes, wf.data() + r * K, K);
    }
    memory plain(memory::desc({K, N}, memory::data_type::f32, memory::format_tag::ba), eng, wf.data());
    impl->weights = memory(pd.weights_desc(), eng);
    OmpOneThread one;
    dnnl::stream stream(eng);
    dnnl::reorder(plain, impl->weights).execute(stream, plain, impl->weights);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(Str("bf16 matrix [", N, ", ", K, "]: oneDNN failed: ", e.what()));
  }
  impl_ = std::move(impl);
}

std::int64_t Bf16Matrix::rows() const { return impl_->n; }
std::int64_t Bf16Matrix::cols() const { return impl_->k; }
bool Bf16Matrix::amx_tiles() const { return impl_->use_tiles; }

void Bf16Matrix::Apply(const float* x, std::int64_t m, float* y, ThreadPool* pool) const {
  const Impl& p = *impl_;
  if (p.use_tiles) {
    p.tiles.Apply(x, m, y, pool);
    return;
  }
  const std::int64_t tiles = (m + kRows - 1) / kRows;
  ParallelFor(pool, tiles, [&](std::int64_t t) {
    OmpOneThread one;
    const std::int64_t r0 = t * kRows, rows = std::min(kRows, m - r0);
    thread_local std::vector<std::uint16_t> xb;
    thread_local std::vector<float> yt;
    thread_local std::vector<std::uint8_t> scratch;
    xb.resize(static_cast<std::size_t>(kRows * p.k));
    F32ToBf16Rows(x + r0 * p.k, rows * p.k, xb.data());
    // The last tile's missing rows are zeros; their outputs go to yt.
    std::fill(xb.begin() + rows * p.k, xb.end(), std::uint16_t{0});
    float* out = y + r0 * p.n;
    if (rows < kRows) {
      yt.resize(static_cast<std::size_t>(kRows * p.n));
      out = yt.data();
    }
    scratch.resize(p.scratch_md.get_size());
    const dnnl::engine& eng = CpuEngine();
    memory src(p.src_md, eng, xb.data()), dst(p.dst_md, eng, out), scr(p.scratch_md, eng, scratch.data());
    dnnl::stream stream(eng);
    try {
      p.mm.execute(stream, {{DNNL_ARG_SRC, src},
                            {DNNL_ARG_WEIGHTS, p.weights},
                            {DNNL_ARG_DST, dst},
                            {DNNL_ARG_SCRATCHPAD, scr}});
      stream.wait();
    } catch (const dnnl::error& e) {
      throw Error(Str("bf16 matmul [", p.n, ", ", p.k, "]: oneDNN failed: ", e.what()));
    }
    if (rows < kRows) std::memcpy(y + r0 * p.n, yt.data(), static_cast<std::size_t>(rows * p.n) * sizeof(float));
  });
}

}  // namespace kvshare::detail
