// A self-contained GQA test case: owns every input and output buffer, runs the
// public op, and offers an independent naive oracle (double) over explicit
// full K/V sequences.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include "common_test_util.h"
#include "kvshare/attention/gqa.h"

namespace kvshare::testing {

struct GqaCase {
  GqaAttributes attrs;
  Buffer query, key, value, past_key, past_value, seqlens_k, total_len, cos, sin, position_ids, bias, sink,
      write_indices, nonpad, spans;
  bool has_key = false, has_past = false, has_seqlens = false, has_rope = false, has_pos = false, has_bias = false,
       has_sink = false, has_scatter = false, has_spans = false;
  // Outputs.
  Buffer output, present_key, present_value, qk;
  bool has_present = false, alias_present = false, has_qk = false;
  // Drop one half of a pair (to test the "both or neither" checks).
  bool drop_value = false, drop_past_value = false, drop_present_value = false, drop_sin = false, drop_nonpad = false;
  bool alias_key_only = false;

  GqaInputs Inputs() const {
    GqaInputs in;
    in.query = query.View();
    if (has_key) {
      in.key = key.View();
      in.value = value.View();
    }
    if (has_past) {
      in.past_key = past_key.View();
      in.past_value = past_value.View();
    }
    if (has_seqlens) {
      in.seqlens_k = seqlens_k.View();
      in.total_sequence_length = total_len.View();
    }
    if (has_rope) {
      in.cos_cache = cos.View();
      in.sin_cache = sin.View();
    }
    if (has_pos) in.position_ids = position_ids.View();
    if (has_bias) in.attention_bias = bias.View();
    if (has_sink) in.head_sink = sink.View();
    if (has_scatter) {
      in.write_indices = write_indices.View();
      in.nonpad_kv_seqlen = nonpad.View();
    }
    if (has_spans) in.bidirectional_spans = spans.View();
    if (drop_value) in.value.reset();
    if (drop_past_value) in.past_value.reset();
    if (drop_sin) in.sin_cache.reset();
    if (drop_nonpad) in.nonpad_kv_seqlen.reset();
    return in;
  }

  GqaOutputs Outputs() {
    GqaOutputs out;
    out.output = output.Mut();
    if (alias_present) {
      // Share buffer: present is past (pointer equality).
      out.present_key = TensorView{past_key.bytes.data(), past_key.dtype, past_key.shape};
      out.present_value = TensorView{past_value.bytes.data(), past_value.dtype, past_value.shape};
    } else if (has_present) {
      out.present_key = present_key.Mut();
      out.present_value = present_value.Mut();
    }
    if (alias_key_only) {
      out.present_key = TensorView{past_key.bytes.data(), past_key.dtype, past_key.shape};
      out.present_value = present_value.Mut();
    }
    if (drop_present_value) out.present_value.reset();
    if (has_qk) out.output_qk = qk.Mut();
    return out;
  }

  // Static scatter inputs: row b writes n[b] rows ending at end[b]
  // (write_indices max(0, end - n), nonpad_kv_seqlen write_indices + n).
  void SetScatter(const std::vector<std::int64_t>& n, const std::vector<std::int64_t>& end) {
    std::vector<std::int64_t> wi, np;
    for (std::size_t b = 0; b < n.size(); ++b) {
      wi.push_back(std::max<std::int64_t>(0, end[b] - n[b]));
      np.push_back(wi.back() + n[b]);
    }
    const auto B = static_cast<std::int64_t>(n.size());
    write_indices = Int64Buffer(wi, {B});
    nonpad = Int64Buffer(np, {B});
    has_scatter = true;
  }

  // seqlens_k = T[b] - 1 and total_sequence_length = total.
  void SetSeqlens(const std::vector<std::int64_t>& T, std::int64_t total) {
    std::vector<std::int32_t> sl;
    for (auto t : T) sl.push_back(static_cast<std::int32_t>(t - 1));
    seqlens_k = Int32Buffer(sl, {static_cast<std::int64_t>(T.size())});
    total_len = Int32Buffer({static_cast<std::int32_t>(total)}, {1});
    has_seqlens = true;
  }

  void Run(GqaKernel kernel = GqaKernel::kAuto, ThreadPool* pool = nullptr) {
    GqaRunOptions opt;
    opt.kernel = kernel;
    opt.pool = pool;
    GroupQueryAttention(attrs, Inputs(), Outputs(), opt);
  }
};

// Naive attention for one row: q [S][N][H] (already rotated), keys/values
// [T][N_kv][H] as absolute positions 0..T-1, query s at absolute position
// qpos[s]. Returns [S][N][H].
struct NaiveRow {
  int S = 0, N = 0, Nkv = 0, H = 0;
  std::vector<double> q, k, v;  // q: S*N*H, k/v: T*Nkv*H
  std::vector<std::int64_t> qpos;
  bool causal = true;
  int window = 0;
  double scale = 1.0, softcap = 0.0;
  std::vector<double> sink;  // empty or N

  std::vector<double> Run() const {
    const std::int64_t T = static_cast<std::int64_t>(k.size()) / (Nkv * H);
    std::vector<double> out(static_cast<std::size_t>(S) * N * H, 0.0);
    for (int s = 0; s < S; ++s) {
      for (int h = 0; h < N; ++h) {
        const int n = h / (N / Nkv);
        std::vector<double> x;
        std::vector<std::int64_t> js;
        for (std::int64_t j = 0; j < T; ++j) {
          if (causal && j > qpos[static_cast<std::size_t>(s)]) continue;
          if (window > 0 && qpos[static_cast<std::size_t>(s)] - j >= window) continue;
          if (!causal && window > 0 && j - qpos[static_cast<std::size_t>(s)] >= window) continue;
          double d = 0;
          for (int e = 0; e < H; ++e) d += q[(static_cast<std::size_t>(s) * N + h) * H + e] * k[(j * Nkv + n) * H + e];
          d *= scale;
          if (softcap > 0) d = softcap * std::tanh(d / softcap);
          x.push_back(d);
          js.push_back(j);
        }
        if (x.empty()) continue;
        double m = *std::max_element(x.begin(), x.end());
        if (!sink.empty()) m = std::max(m, sink[static_cast<std::size_t>(h)]);
        double den = sink.empty() ? 0.0 : std::exp(sink[static_cast<std::size_t>(h)] - m);
        for (double xi : x) den += std::exp(xi - m);
        for (std::size_t i = 0; i < x.size(); ++i) {
          const double w = std::exp(x[i] - m) / den;
          for (int e = 0; e < H; ++e) {
            out[(static_cast<std::size_t>(s) * N + h) * H + e] += w * v[(js[i] * Nkv + n) * H + e];
          }
        }
      }
    }
    return out;
  }
};

}  // namespace kvshare::testing
