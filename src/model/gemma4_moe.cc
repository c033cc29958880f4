// Gemma 4 mixture-of-experts block (gemma4_moe.h).
#include "model/gemma4_moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "model/activations.h"

namespace kvshare::detail {

Gemma4Moe LoadGemma4Moe(const TensorLookup& t, const std::string& p, const std::string& a, std::int64_t E) {
  const GgufFile& f = t.file();
  Gemma4Moe m;
  m.n_expert = static_cast<int>(f.GetU32(a + "expert_count"));
  m.n_used = static_cast<int>(f.GetU32(a + "expert_used_count"));
  m.n_ff = static_cast<int>(f.GetU32(a + "expert_feed_forward_length"));
  if (m.n_expert < 1 || m.n_used < 1 || m.n_used > m.n_expert || m.n_ff < 1) {
    throw Error(Str(a, "expert_count = ", m.n_expert, ", expert_used_count = ", m.n_used,
                    ", expert_feed_forward_length = ", m.n_ff, ": expected 1 <= used <= count and a width >= 1"));
  }
  m.router = t.Mat(p + "ffn_gate_inp.weight", m.n_expert, E);
  m.router_scale = t.Vec(p + "ffn_gate_inp.scale", E);
  m.expert_scale = t.VecOpt(p + "ffn_down_exps.scale", m.n_expert);
  if (f.FindTensor(p + "ffn_gate_up_exps.weight") != nullptr) {
    m.gate_up = t.MatStack(p + "ffn_gate_up_exps.weight", 2 * static_cast<std::int64_t>(m.n_ff), E, m.n_expert);
  } else {
    m.gate = t.MatStack(p + "ffn_gate_exps.weight", m.n_ff, E, m.n_expert);
    m.up = t.MatStack(p + "ffn_up_exps.weight", m.n_ff, E, m.n_expert);
  }
  m.down = t.MatStack(p + "ffn_down_exps.weight", E, m.n_ff, m.n_expert);
  m.pre_ffw_norm_2 = t.Vec(p + "pre_ffw_norm_2.weight", E);
  m.post_ffw_norm_1 = t.Vec(p + "post_ffw_norm_1.weight", E);
  m.post_ffw_norm_2 = t.Vec(p + "post_ffw_norm_2.weight", E);
  return m;
}

void RouteGemma4Moe(const Gemma4Moe& m, float* logits, std::int64_t S, MoeScratch& s) {
  const int K = m.n_used, NE = m.n_expert;
  s.chosen.resize(static_cast<std::size_t>(S) * K);
  s.chosen_w.resize(s.chosen.size());
  std::vector<int> order(static_cast<std::size_t>(NE));
  for (std::int64_t t = 0; t < S; ++t) {
    float* lg = logits + t * NE;
    const float mx = *std::max_element(lg, lg + NE);
    double den = 0;
    for (int e = 0; e < NE; ++e) den += (lg[e] = std::exp(lg[e] - mx));
    for (int e = 0; e < NE; ++e) lg[e] = static_cast<float>(lg[e] / den);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int a, int b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
    float sum = 0;
    for (int k = 0; k < K; ++k) sum += lg[order[static_cast<std::size_t>(k)]];
    for (int k = 0; k < K; ++k) {
      const int e = order[static_cast<std::size_t>(k)];
      s.chosen[static_cast<std::size_t>(t * K + k)] = e;
      s.chosen_w[static_cast<std::size_t>(t * K + k)] = lg[e] / sum * (m.expert_scale ? m.expert_scale[e] : 1.0f);
    }
  }
}

void BatchExpertRows(const Gemma4Moe& m, std::int64_t S, const MoeScratch& s, ExpertBatches& out) {
  const int K = m.n_used, NE = m.n_expert;
  const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(K);
  if (s.chosen.size() < n || s.chosen_w.size() < n) {
    throw Error(Str("BatchExpertRows: routing of ", s.chosen.size() / static_cast<std::size_t>(K), " rows, expected ",
                    S, " (run RouteGemma4Moe first)"));
  }
  out.begin.assign(static_cast<std::size_t>(NE) + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const int e = s.chosen[i];
    if (e < 0 || e >= NE) throw Error(Str("BatchExpertRows: expert id ", e, " is outside [0, ", NE, ")"));
    ++out.begin[static_cast<std::size_t>(e) + 1];
  }
  for (int e = 0; e < NE; ++e) out.begin[static_cast<std::size_t>(e) + 1] += out.begin[static_cast<std::size_t>(e)];
  out.token.resize(n);
  out.weight.resize(n);
  std::vector<std::int64_t> at(out.begin.begin(), out.begin.end() - 1);
  for (std::int64_t t = 0; t < S; ++t) {  // rows ascending within each expert
    for (int k = 0; k < K; ++k) {
      const std::size_t i = static_cast<std::size_t>(t * K + k);
      const auto to = static_cast<std::size_t>(at[static_cast<std::size_t>(s.chosen[i])]++);
      out.token[to] = t;
      out.weight[to] = s.chosen_w[i];
    }
  }
}

void RunGemma4Moe(const Gemma4Moe& m, const float* h, std::int64_t S, int E, float eps, float* out, MoeScratch& s,
                  ThreadPool* pool) {
  const std::size_t SE = static_cast<std::size_t>(S) * static_cast<std::size_t>(E);
  const int NE = m.n_expert, F = m.n_ff;
  // Routing.
  s.router_in.assign(h, h + SE);
  RmsNorm(s.router_in.data(), S, E, nullptr, eps);
  const float root = 1.0f / std::sqrt(static_cast<float>(E));
  for (std::size_t i = 0; i < SE; ++i) s.router_in[i] = s.router_in[i] * root * m.router_scale[i % E];
  s.logits.resize(static_cast<std::size_t>(S) * NE);
  MatMulRows(m.router, s.router_in.data(), S, s.logits.data(), pool);
  RouteGemma4Moe(m, s.logits.data(), S, s);
  // Experts, in id order, over the rows routed to each.
  s.in.assign(h, h + SE);
  RmsNorm(s.in.data(), S, E, m.pre_ffw_norm_2, eps);
  std::fill(out, out + SE, 0.0f);
  BatchExpertRows(m, S, s, s.batches);
  for (int e = 0; e < NE; ++e) {
    const std::int64_t lo = s.batches.begin[static_cast<std::size_t>(e)];
    const std::int64_t n = s.batches.begin[static_cast<std::size_t>(e) + 1] - lo;
    if (n == 0) continue;
    const std::int64_t* token = s.batches.token.data() + lo;
    const float* weight = s.batches.weight.data() + lo;
    s.rows.resize(static_cast<std::size_t>(n) * E);
    for (std::int64_t r = 0; r < n; ++r) {
      std::copy(s.in.begin() + token[r] * E, s.in.begin() + (token[r] + 1) * E, s.rows.begin() + r * E);
    }
    s.act.resize(static_cast<std::size_t>(n) * F);
    if (!m.gate_up.empty()) {
      s.gu.resize(static_cast<std::size_t>(n) * 2 * F);
      MatMulRows(m.gate_up[static_cast<std::size_t>(e)], s.rows.data(), n, s.gu.data(), pool);
      for (std::int64_t r = 0; r < n; ++r) {
        const float* g = s.gu.data() + r * 2 * F;
        GeluTanhMul(g, g + F, s.act.data() + r * F, F);
      }
    } else {
      s.gu.resize(static_cast<std::size_t>(n) * F);
      const MatMulTarget gate_up[] = {{.w = m.gate[static_cast<std::size_t>(e)], .y = s.act.data()},
                                      {.w = m.up[static_cast<std::size_t>(e)], .y = s.gu.data()}};
      MatMulRowsMany(gate_up, s.rows.data(), n, pool);
      GeluTanhMul(s.act.data(), s.gu.data(), s.act.data(), n * F);
    }
    s.y.resize(static_cast<std::size_t>(n) * E);
    MatMulRows(m.down[static_cast<std::size_t>(e)], s.act.data(), n, s.y.data(), pool);
    for (std::int64_t r = 0; r < n; ++r) {
      float* o = out + token[r] * E;
      const float w = weight[r];
      for (int i = 0; i < E; ++i) o[i] += w * s.y[static_cast<std::size_t>(r * E + i)];
    }
  }
  RmsNorm(out, S, E, m.post_ffw_norm_2, eps);
}

}  // namespace kvshare::detail
