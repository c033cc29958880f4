// Bidirectional attention through oneDNN bf16 matmuls (bf16_attention.h).
#include "vision/bf16_attention.h"

#include <algorithm>
#include <vector>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "vision/bf16_matmul.h"
#include "vision/bf16_rows.h"
#include "attention/onednn.h"

namespace kvshare::detail {

namespace {

using dnnl::memory;
using dt = memory::data_type;

struct Plan {
  dnnl::matmul::primitive_desc qk, pv;
  dnnl::matmul qk_mm, pv_mm;
};

Plan MakePlan(std::int64_t S, int hd) {
  const dnnl::engine& eng = CpuEngine();
  const memory::dim M = kQueryRows, D = hd;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  Plan p;
  // scores [M, S] = Q [M, hd] x K^T [hd, S]; O [M, hd] = P [M, S] x V [S, hd].
  p.qk = dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(memory::desc({M, D}, dt::bf16, memory::format_tag::ab),
                         memory::desc({D, S}, dt::bf16, memory::format_tag::any),
                         memory::desc({M, S}, dt::f32, memory::format_tag::ab)),
      attr, eng);
  p.pv = dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(memory::desc({M, S}, dt::bf16, memory::format_tag::ab),
                         memory::desc({S, D}, dt::bf16, memory::format_tag::any),
                         memory::desc({M, D}, dt::f32, memory::format_tag::ab)),
      attr, eng);
  p.qk_mm = dnnl::matmul(p.qk);
  p.pv_mm = dnnl::matmul(p.pv);
  return p;
}

void Run(const dnnl::matmul& mm, const dnnl::matmul::primitive_desc& pd, void* src, const memory& w, float* dst) {
  const dnnl::engine& eng = CpuEngine();
  thread_local std::vector<std::uint8_t> scratch;
  scratch.resize(pd.scratchpad_desc().get_size());
  memory s(pd.src_desc(), eng, src), d(pd.dst_desc(), eng, dst), scr(pd.scratchpad_desc(), eng, scratch.data());
  dnnl::stream stream(eng);
  mm.execute(stream, {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, d}, {DNNL_ARG_SCRATCHPAD, scr}});
  stream.wait();
}

}  // namespace

void Bf16Attention(const float* q, const float* k, const float* v, std::int64_t S, int heads, int hd, float scale,
                   float* out, ThreadPool* pool) {
  if (!Bf16MatMulSupported()) {
    throw Error("bf16 vision precision needs a CPU with AVX-512 (oneDNN's bf16 matmul); use f32 precision");
  }
  const std::int64_t qd = static_cast<std::int64_t>(heads) * hd;
  const std::int64_t blocks = (S + kQueryRows - 1) / kQueryRows;
  const dnnl::engine& eng = CpuEngine();
  try {
    const Plan plan = MakePlan(S, hd);
    // Per head: K^T [hd, S] (element (d, s) at s * qd + d) and V [S, hd]
    // (row stride qd), converted to bf16 and packed by one reorder each.
    std::vector<memory> kp(static_cast<std::size_t>(heads)), vp(static_cast<std::size_t>(heads));
    ParallelFor(pool, heads, [&](std::int64_t h) {
      OmpOneThread one;
      dnnl::stream stream(eng);
      memory kf(memory::desc({hd, S}, dt::f32, memory::dims{1, qd}), eng, const_cast<float*>(k + h * hd));
      memory vf(memory::desc({S, hd}, dt::f32, memory::dims{qd, 1}), eng, const_cast<float*>(v + h * hd));
      const auto hu = static_cast<std::size_t>(h);
      kp[hu] = memory(plan.qk.weights_desc(), eng);
      vp[hu] = memory(plan.pv.weights_desc(), eng);
      dnnl::reorder(kf, kp[hu]).execute(stream, kf, kp[hu]);
      dnnl::reorder(vf, vp[hu]).execute(stream, vf, vp[hu]);
      stream.wait();
    });
    ParallelFor(pool, heads * blocks, [&](std::int64_t task) {
      OmpOneThread one;
      const std::int64_t h = task / blocks, r0 = task % blocks * kQueryRows;
      const std::int64_t rows = std::min(kQueryRows, S - r0);
      thread_local std::vector<std::uint16_t> qb, pb;
      thread_local std::vector<float> scores, o;
      thread_local std::vector<float> sums;
      qb.assign(static_cast<std::size_t>(kQueryRows * hd), 0);  // padding rows stay zero
      for (std::int64_t r = 0; r < rows; ++r) F32ToBf16Rows(q + (r0 + r) * qd + h * hd, hd, qb.data() + r * hd);
      scores.resize(static_cast<std::size_t>(kQueryRows * S));
      pb.resize(scores.size());
      o.resize(static_cast<std::size_t>(kQueryRows * hd));
      sums.resize(static_cast<std::size_t>(kQueryRows));
      const auto hu = static_cast<std::size_t>(h);
      Run(plan.qk_mm, plan.qk, qb.data(), kp[hu], scores.data());
      for (std::int64_t r = 0; r < kQueryRows; ++r) {
        sums[static_cast<std::size_t>(r)] = ExpShiftedToBf16(scores.data() + r * S, S, scale, pb.data() + r * S);
      }
      Run(plan.pv_mm, plan.pv, pb.data(), vp[hu], o.data());
      for (std::int64_t r = 0; r < rows; ++r) {
        const float inv = 1.0f / sums[static_cast<std::size_t>(r)];
        float* dst = out + (r0 + r) * qd + h * hd;
        for (int i = 0; i < hd; ++i) dst[i] = o[static_cast<std::size_t>(r * hd + i)] * inv;
      }
    });
  } catch (const dnnl::error& e) {
    throw Error(Str("bf16 attention (", S, " tokens, ", heads, " heads of ", hd, "): oneDNN failed: ", e.what()));
  }
}

}  // namespace kvshare::detail
