// Bidirectional attention through oneDNN bf16 matmuls (cpu_attend_bf16.h;
// gqa.h, GqaRunOptions::matmul_precision). Per (batch row, KV head) the keys
// (as K^T [H, T_b]) and values ([T_b, H]) are rounded to bf16 and packed once
// in the layout oneDNN's matmul reads. Then each block of kQueryRows queries
// of one query head (the last block zero-padded) is one ThreadPool task: its
// scores [kQueryRows, T_b] in f32 from one matmul, p = bf16(exp(scale (x -
// max))) per row, O = (P V) / sum(p) from a second. Every call is
// single-threaded on its pool thread (OmpOneThread) with a fixed shape, so a
// row's result does not depend on the thread count.
#include "attention/cpu_attend_bf16.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "attention/bf16_convert.h"
#include "attention/amx_attend.h"
#include "attention/bf16_support.h"
#include "attention/onednn.h"
#include "attention/store_rows.h"
#include "common/cpu_amx.h"
#include "common/float_convert.h"
#include "common/str.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::detail {

namespace {

using dnnl::memory;
using dt = memory::data_type;

constexpr std::int64_t kQueryRows = 64;  // queries per oneDNN call

[[noreturn]] void Refuse(const std::string& what) {
  throw Error(Str("GroupQueryAttention: matmul_precision bf16 (GqaMatMulPrecision::kBf16) does not support ", what,
                  "; use GqaMatMulPrecision::kF32 for this call"));
}

// What the oneDNN form lacks that the AMX tile form covers.
[[noreturn]] void RefuseWithoutTiles(const std::string& what) {
  Refuse(Str(what, " without the AMX tile form (", AmxBf16UnusableReason(), ")"));
}

struct Plan {
  dnnl::matmul::primitive_desc qk, pv;
  dnnl::matmul qk_mm, pv_mm;
};

// The two products of a query block over T keys of head size H.
Plan MakePlan(std::int64_t T, int H) {
  const dnnl::engine& eng = CpuEngine();
  const memory::dim M = kQueryRows, D = H;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  Plan p;
  // scores [M, T] = Q [M, H] x K^T [H, T]; O [M, H] = P [M, T] x V [T, H].
  p.qk = dnnl::matmul::primitive_desc(dnnl::matmul::desc(memory::desc({M, D}, dt::bf16, memory::format_tag::ab),
                                                         memory::desc({D, T}, dt::bf16, memory::format_tag::any),
                                                         memory::desc({M, T}, dt::f32, memory::format_tag::ab)),
                                      attr, eng);
  p.pv = dnnl::matmul::primitive_desc(dnnl::matmul::desc(memory::desc({M, T}, dt::bf16, memory::format_tag::ab),
                                                         memory::desc({T, D}, dt::bf16, memory::format_tag::any),
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

// Keys (transpose) or values of KV head n of row b, T rows, packed as bf16 in
// the layout `packed` describes. f32 sources are read in place through their
// strides; f16 / bf16 ones are widened to f32 first (exact), so every dtype
// rounds to bf16 the same way.
memory Pack(const KvSource& src, int b, int n, std::int64_t T, int H, bool transpose, const memory::desc& packed) {
  const dnnl::engine& eng = CpuEngine();
  const std::int64_t base = b * src.batch_stride + n * src.head_stride;
  std::vector<float> widened;
  const float* rows = nullptr;
  std::int64_t stride = src.row_stride;
  if (src.dtype == DType::kFloat32) {
    rows = static_cast<const float*>(src.data) + base;
  } else {
    widened.resize(static_cast<std::size_t>(T * H));
    for (std::int64_t j = 0; j < T; ++j) {
      for (int d = 0; d < H; ++d)
        widened[static_cast<std::size_t>(j * H + d)] = LoadAsFloat(src.data, src.dtype, base + j * stride + d);
    }
    rows = widened.data();
    stride = H;
  }
  const memory::desc from = transpose ? memory::desc({H, T}, dt::f32, memory::dims{1, stride})
                                      : memory::desc({T, H}, dt::f32, memory::dims{stride, 1});
  memory f(from, eng, const_cast<float*>(rows));
  memory to(packed, eng);
  dnnl::stream stream(eng);
  dnnl::reorder(f, to).execute(stream, f, to);
  stream.wait();
  return to;
}

}  // namespace

}  // namespace kvshare::detail

namespace kvshare {

bool GqaBf16CoversCausal() { return detail::AmxAttendUsable(); }

}  // namespace kvshare

namespace kvshare::detail {

void CheckAttendBf16(const GqaAttributes& attrs, const GqaInputs& in, const GqaOutputs& out,
                     const GqaRunOptions& options) {
  if (options.device != Device::kCpu) Refuse("device cuda (a CPU kernel; run on Device::kCpu)");
  if (options.kernel == GqaKernel::kReference) {
    Refuse("kernel kReference (the reference is f32 / double; use kAuto or kOptimized)");
  }
  if ((in.key && in.key->dtype == DType::kQ8_0) || (out.present_key && out.present_key->dtype == DType::kQ8_0) ||
      (in.past_key && in.past_key->dtype == DType::kQ8_0)) {
    Refuse("q8_0 keys and values");
  }
  if (AmxAttendUsable()) return;  // the blocked kernel's every mode, on tiles
  if (in.bidirectional_spans) RefuseWithoutTiles("input 'bidirectional_spans' (it needs causal = 1)");
  if (attrs.causal != 0) RefuseWithoutTiles(Str("causal = ", attrs.causal, " (only causal = 0, every key visible)"));
  if (attrs.local_window_size > 0) RefuseWithoutTiles(Str("local_window_size = ", attrs.local_window_size, " (only -1)"));
  if (attrs.softcap > 0.0f) RefuseWithoutTiles(Str("softcap = ", attrs.softcap, " (only 0)"));
  if (in.attention_bias) RefuseWithoutTiles("input 'attention_bias'");
  if (in.head_sink) RefuseWithoutTiles("input 'head_sink'");
  if (attrs.smooth_softmax == 1) RefuseWithoutTiles("smooth_softmax = 1 (a sink logit)");
  if (attrs.qk_output != 0 || out.output_qk) RefuseWithoutTiles("output 'output_qk' (qk_output != 0)");
  if (in.past_key || in.past_value) RefuseWithoutTiles("input 'past_key' / 'past_value' (only the call's new keys)");
  if (in.write_indices || in.nonpad_kv_seqlen) RefuseWithoutTiles("static scatter mode (input 'write_indices')");
  if (!Bf16MatMulSupported()) {
    throw Error(
        "GroupQueryAttention: matmul_precision bf16 needs a CPU with AVX-512 (oneDNN's bf16 matmul); use "
        "GqaMatMulPrecision::kF32");
  }
}

void AttendBf16(const AttendParams& p, ThreadPool* pool) {
  const int B = p.batch, N = p.num_heads, N_kv = p.kv_heads, H = p.head_size;
  const int G = N / N_kv;
  const std::int64_t S = p.q_len, qd = static_cast<std::int64_t>(N) * H;
  const std::size_t out_row_bytes = static_cast<std::size_t>(qd) * DTypeSize(p.out_dtype);
  try {
    for (int b = 0; b < B; ++b) {
      const std::int64_t T = p.kv_len[b], valid = std::clamp<std::int64_t>(p.valid_q[b], 0, S);
      char* out_b = static_cast<char*>(p.out) + static_cast<std::size_t>(b * S) * out_row_bytes;
      if (valid < S) std::memset(out_b + valid * out_row_bytes, 0, static_cast<std::size_t>(S - valid) * out_row_bytes);
      if (valid == 0) continue;
      const Plan plan = MakePlan(T, H);
      std::vector<memory> kp(static_cast<std::size_t>(N_kv)), vp(static_cast<std::size_t>(N_kv));
      ParallelFor(pool, N_kv, [&](std::int64_t n) {
        OmpOneThread one;
        const auto nu = static_cast<std::size_t>(n);
        kp[nu] = Pack(p.k, b, static_cast<int>(n), T, H, true, plan.qk.weights_desc());
        vp[nu] = Pack(p.v, b, static_cast<int>(n), T, H, false, plan.pv.weights_desc());
      });
      const std::int64_t blocks = (valid + kQueryRows - 1) / kQueryRows;
      ParallelFor(pool, N * blocks, [&](std::int64_t task) {
        OmpOneThread one;
        const std::int64_t h = task / blocks, r0 = task % blocks * kQueryRows;
        const std::int64_t rows = std::min(kQueryRows, valid - r0);
        thread_local std::vector<std::uint16_t> qb, pb;
        thread_local std::vector<float> scores, o, sums, row;
        qb.assign(static_cast<std::size_t>(kQueryRows * H), 0);  // padding rows stay zero
        const float* q = p.q + (static_cast<std::int64_t>(b) * S + r0) * qd + h * H;
        for (std::int64_t r = 0; r < rows; ++r) F32ToBf16Rows(q + r * qd, H, qb.data() + r * H);
        scores.resize(static_cast<std::size_t>(kQueryRows * T));
        pb.resize(scores.size());
        o.resize(static_cast<std::size_t>(kQueryRows * H));
        sums.resize(static_cast<std::size_t>(kQueryRows));
        row.resize(static_cast<std::size_t>(H));
        const auto n = static_cast<std::size_t>(h / G);
        Run(plan.qk_mm, plan.qk, qb.data(), kp[n], scores.data());
        for (std::int64_t r = 0; r < kQueryRows; ++r) {
          sums[static_cast<std::size_t>(r)] = ExpShiftedToBf16(scores.data() + r * T, T, p.scale, pb.data() + r * T);
        }
        Run(plan.pv_mm, plan.pv, pb.data(), vp[n], o.data());
        for (std::int64_t r = 0; r < rows; ++r) {
          const float inv = 1.0f / sums[static_cast<std::size_t>(r)];
          for (int i = 0; i < H; ++i) row[static_cast<std::size_t>(i)] = o[static_cast<std::size_t>(r * H + i)] * inv;
          StoreRowFromFloat(p.out, p.out_dtype, (static_cast<std::int64_t>(b) * S + r0 + r) * qd + h * H, row.data(),
                            H);
        }
      });
    }
  } catch (const dnnl::error& e) {
    throw Error(Str("GroupQueryAttention: matmul_precision bf16 (", S, " queries over ", p.kv_len[0], " keys, ", N,
                    " heads of ", H, "): oneDNN failed: ", e.what()));
  }
}

}  // namespace kvshare::detail
