// 2-D convolution through oneDNN in fixed row chunks (conv2d.h); threads as
// onednn.h says.
#include "vision/conv2d.h"

#include <algorithm>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>

#include "attention/onednn.h"
#include "common/str.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::detail {

namespace {

using dnnl::memory;

// Output rows per chunk: at most kMaxChunks chunks per convolution, enough to
// keep 16 cores busy, few enough that one chunk amortizes a oneDNN call.
constexpr int kMaxChunks = 32;

}  // namespace

SamePad ComputeSamePad(int n, int kernel, int stride) {
  SamePad p;
  p.out = (n + stride - 1) / stride;
  const int total = std::max((p.out - 1) * stride + kernel - n, 0);
  p.begin = total / 2;
  p.end = total - p.begin;
  return p;
}

struct Conv2d::Prim {
  dnnl::convolution_forward conv;
  memory::desc src_md, dst_md, scratch_md;
  memory weights;  // in the layout the primitive chose
  memory bias;     // empty without bias
};

Conv2d::Conv2d(const Conv2dSpec& spec, std::vector<float> weights, std::vector<float> bias)
    : spec_(spec), weights_(std::move(weights)), bias_(std::move(bias)) {
  const std::size_t per_out =
      static_cast<std::size_t>(spec.depthwise ? 1 : spec.in_channels) * spec.kernel * spec.kernel;
  if (spec.kernel < 1 || spec.stride < 1 || spec.in_channels < 1 || spec.out_channels < 1 ||
      (spec.depthwise && spec.in_channels != spec.out_channels) ||
      weights_.size() != per_out * static_cast<std::size_t>(spec.out_channels) ||
      (!bias_.empty() && bias_.size() != static_cast<std::size_t>(spec.out_channels))) {
    throw Error(Str("convolution: inconsistent spec (in ", spec.in_channels, ", out ", spec.out_channels, ", kernel ",
                    spec.kernel, ", stride ", spec.stride, ", depthwise ", spec.depthwise, ") for ", weights_.size(),
                    " weights and ", bias_.size(), " biases"));
  }
}

Conv2d::~Conv2d() = default;
Conv2d::Conv2d(Conv2d&& o) noexcept
    : spec_(o.spec_), weights_(std::move(o.weights_)), bias_(std::move(o.bias_)), prims_(std::move(o.prims_)) {}
Conv2d& Conv2d::operator=(Conv2d&& o) noexcept {
  spec_ = o.spec_;
  weights_ = std::move(o.weights_);
  bias_ = std::move(o.bias_);
  prims_ = std::move(o.prims_);
  return *this;
}

const Conv2d::Prim& Conv2d::PrimitiveFor(const Key& key, int pad_left, int pad_right, int out_w) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = prims_.find(key);
  if (it != prims_.end()) return *it->second;
  const auto [in_h, pad_top, pad_bottom, out_h, in_w] = key;
  const memory::dim C = spec_.in_channels, O = spec_.out_channels, K = spec_.kernel, S = spec_.stride;
  auto prim = std::make_unique<Prim>();
  try {
    const dnnl::engine& eng = CpuEngine();
    prim->src_md = memory::desc({1, C, in_h, in_w}, memory::data_type::f32, memory::format_tag::nhwc);
    prim->dst_md = memory::desc({1, O, out_h, out_w}, memory::data_type::f32, memory::format_tag::nhwc);
    const memory::dims wdims = spec_.depthwise ? memory::dims{O, 1, 1, K, K} : memory::dims{O, C, K, K};
    const memory::desc w_any(wdims, memory::data_type::f32, memory::format_tag::any);
    const memory::desc w_user(wdims, memory::data_type::f32,
                              spec_.depthwise ? memory::format_tag::goihw : memory::format_tag::oihw);
    const memory::desc b_md({O}, memory::data_type::f32, memory::format_tag::x);
    const memory::dims strides{S, S}, pad_l{pad_top, pad_left}, pad_r{pad_bottom, pad_right};
    const auto desc =
        bias_.empty()
            ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                              prim->src_md, w_any, prim->dst_md, strides, pad_l, pad_r)
            : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                              prim->src_md, w_any, b_md, prim->dst_md, strides, pad_l, pad_r);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::convolution_forward::primitive_desc pd(desc, attr, eng);
    prim->conv = dnnl::convolution_forward(pd);
    prim->scratch_md = pd.scratchpad_desc();
    // Weights in the primitive's preferred layout, reordered once.
    memory user(w_user, eng, const_cast<float*>(weights_.data()));
    prim->weights = memory(pd.weights_desc(), eng);
    dnnl::stream stream(eng);
    dnnl::reorder(user, prim->weights).execute(stream, user, prim->weights);
    stream.wait();
    if (!bias_.empty()) {
      prim->bias = memory(b_md, eng);
      std::memcpy(prim->bias.get_data_handle(), bias_.data(), bias_.size() * sizeof(float));
    }
  } catch (const dnnl::error& e) {
    throw Error(Str("convolution ", spec_.kernel, "x", spec_.kernel, " stride ", spec_.stride, " (", C, " -> ", O,
                    " channels, input ", in_h, "x", in_w, "): oneDNN failed: ", e.what()));
  }
  return *prims_.emplace(key, std::move(prim)).first->second;
}

FeatureMap Conv2d::Forward(const FeatureMap& x, ThreadPool* pool) const {
  if (x.c != spec_.in_channels) {
    throw Error(Str("convolution expects ", spec_.in_channels, " input channels, got ", x.c));
  }
  const int K = spec_.kernel, S = spec_.stride;
  const SamePad ph = ComputeSamePad(x.h, K, S), pw = ComputeSamePad(x.w, K, S);
  FeatureMap y(ph.out, pw.out, spec_.out_channels);
  const int rows = (ph.out + kMaxChunks - 1) / kMaxChunks;
  const int chunks = (ph.out + rows - 1) / rows;
  const std::size_t in_row = static_cast<std::size_t>(x.w) * x.c, out_row = static_cast<std::size_t>(y.w) * y.c;
  ParallelFor(pool, chunks, [&](std::int64_t ci) {
    OmpOneThread one;
    const int r0 = static_cast<int>(ci) * rows, r1 = std::min(ph.out, r0 + rows);
    // Input rows [first, last) this chunk reads, before clipping to the image.
    const int first = r0 * S - ph.begin, last = (r1 - 1) * S - ph.begin + K;
    const int lo = std::max(first, 0), hi = std::min(last, x.h);
    const Prim& p = PrimitiveFor(Key{hi - lo, lo - first, last - hi, r1 - r0, x.w}, pw.begin, pw.end, y.w);
    const dnnl::engine& eng = CpuEngine();
    thread_local std::vector<std::uint8_t> scratch;
    scratch.resize(p.scratch_md.get_size());
    memory src(p.src_md, eng, const_cast<float*>(x.data.data() + static_cast<std::size_t>(lo) * in_row));
    memory dst(p.dst_md, eng, y.data.data() + static_cast<std::size_t>(r0) * out_row);
    memory scr(p.scratch_md, eng, scratch.data());
    dnnl::stream stream(eng);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, p.weights}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scr}};
    if (!bias_.empty()) args.emplace(DNNL_ARG_BIAS, p.bias);
    try {
      p.conv.execute(stream, args);
      stream.wait();
    } catch (const dnnl::error& e) {
      throw Error(Str("convolution ", K, "x", K, " stride ", S, ": oneDNN failed: ", e.what()));
    }
  });
  return y;
}

}  // namespace kvshare::detail
