// 1x1 convolution through oneDNN's matmul in fixed tiles (pointwise.h).
#include "vision/pointwise.h"

#include <algorithm>

#include "attention/onednn.h"
#include "common/str.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::detail {

namespace {

using dnnl::memory;

// Tile: kTileRows pixels x kTileCols output channels. Big enough that
// oneDNN's packing of the weight slice is a small part of a tile's work,
// small enough to give 16 threads work at 24 x 24 pixels.
constexpr std::int64_t kTileRows = 256;
constexpr std::int64_t kTileCols = 256;

}  // namespace

struct PointwiseConv::Prim {
  dnnl::matmul mm;
  memory::desc src_md, w_md, dst_md, scratch_md;
};

PointwiseConv::PointwiseConv(int in, int out, std::vector<float> weights)
    : in_(in), out_(out), weights_(std::move(weights)) {
  if (in < 1 || out < 1 || weights_.size() != static_cast<std::size_t>(in) * out) {
    throw Error(Str("1x1 convolution: ", weights_.size(), " weights for ", in, " -> ", out, " channels"));
  }
}

PointwiseConv::PointwiseConv() = default;
PointwiseConv::~PointwiseConv() = default;
PointwiseConv::PointwiseConv(PointwiseConv&& o) noexcept
    : in_(o.in_), out_(o.out_), weights_(std::move(o.weights_)), prims_(std::move(o.prims_)) {}
PointwiseConv& PointwiseConv::operator=(PointwiseConv&& o) noexcept {
  in_ = o.in_;
  out_ = o.out_;
  weights_ = std::move(o.weights_);
  prims_ = std::move(o.prims_);
  return *this;
}

const PointwiseConv::Prim& PointwiseConv::PrimitiveFor(std::int64_t rows, std::int64_t cols) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = prims_.find({rows, cols});
  if (it != prims_.end()) return *it->second;
  auto prim = std::make_unique<Prim>();
  const memory::dim K = in_, N = out_;
  try {
    // x tile [rows, K] (row stride K); W^T tile [K, cols] read from W [N, K]
    // (element (k, n) at n * K + k); y tile [rows, cols] with row stride N.
    prim->src_md = memory::desc({rows, K}, memory::data_type::f32, memory::dims{K, 1});
    prim->w_md = memory::desc({K, cols}, memory::data_type::f32, memory::dims{1, K});
    prim->dst_md = memory::desc({rows, cols}, memory::data_type::f32, memory::dims{N, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(prim->src_md, prim->w_md, prim->dst_md), attr,
                                          CpuEngine());
    prim->mm = dnnl::matmul(pd);
    prim->scratch_md = pd.scratchpad_desc();
  } catch (const dnnl::error& e) {
    throw Error(
        Str("1x1 convolution ", K, " -> ", N, " channels (tile ", rows, " x ", cols, "): oneDNN failed: ", e.what()));
  }
  return *prims_.emplace(std::pair{rows, cols}, std::move(prim)).first->second;
}

void PointwiseConv::Rows(const float* x, std::int64_t m, float* y, ThreadPool* pool) const {
  const std::int64_t row_tiles = (m + kTileRows - 1) / kTileRows, col_tiles = (out_ + kTileCols - 1) / kTileCols;
  ParallelFor(pool, row_tiles * col_tiles, [&](std::int64_t t) {
    OmpOneThread one;
    const std::int64_t r0 = t / col_tiles * kTileRows, c0 = t % col_tiles * kTileCols;
    const std::int64_t rows = std::min(kTileRows, m - r0), cols = std::min<std::int64_t>(kTileCols, out_ - c0);
    const Prim& p = PrimitiveFor(rows, cols);
    const dnnl::engine& eng = CpuEngine();
    thread_local std::vector<std::uint8_t> scratch;
    scratch.resize(p.scratch_md.get_size());
    memory src(p.src_md, eng, const_cast<float*>(x + r0 * in_));
    memory wts(p.w_md, eng, const_cast<float*>(weights_.data() + c0 * in_));
    memory dst(p.dst_md, eng, y + r0 * out_ + c0);
    memory scr(p.scratch_md, eng, scratch.data());
    dnnl::stream stream(eng);
    try {
      p.mm.execute(stream,
                   {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scr}});
      stream.wait();
    } catch (const dnnl::error& e) {
      throw Error(Str("1x1 convolution ", in_, " -> ", out_, " channels: oneDNN failed: ", e.what()));
    }
  });
}

FeatureMap PointwiseConv::Forward(const FeatureMap& x, ThreadPool* pool) const {
  if (x.c != in_) throw Error(Str("1x1 convolution expects ", in_, " input channels, got ", x.c));
  FeatureMap y(x.h, x.w, out_);
  Rows(x.data.data(), x.Pixels(), y.data.data(), pool);
  return y;
}

}  // namespace kvshare::detail
