// Helpers of the GPU model's device tests (tests/cuda_model*_test.cc): logits
// compared row by row with a diagnosis (largest absolute and relative error,
// the first wrong element), a layer-by-layer comparison of the residual
// stream of a CPU and a GPU run (DecoderState::layer_probe) that names the
// first layer that diverged, a teacher-forced run against the CPU model, and
// a batched step checked against its rows run alone.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common_record_measured.h"
#include "gguf_writer.h"
#include "kvshare/model/model.h"
#include "model/decoder.h"

namespace kvshare::testing {

// Tolerances (relative to the row's largest |want|): bf16 weights round each
// projection's input and weight to 8 significant bits (u = 2^-8) through a
// few layers; fp32 weights differ from the CPU only in summation order.
constexpr double kBf16ModelTolerance = 3e-2;
constexpr double kFp32ModelTolerance = 1e-4;

inline double ModelTolerance(DType weights) {
  return weights == DType::kFloat32 ? kFp32ModelTolerance : kBf16ModelTolerance;
}

// The device tests' states: 32 positions, chunks of 6, an fp32 cache for
// fp32 weights and a bf16 one for bf16 weights.
inline ModelStateOptions DeviceTestOptions(DType weights, int max_batch = 1) {
  return {.max_context = 32,
          .max_step = 6,
          .kv_dtype = weights == DType::kFloat32 ? DType::kFloat32 : DType::kBFloat16,
          .max_batch = max_batch};
}

// Scales every attn_q_norm / attn_k_norm weight by H^-1/4 (H: the tensor's
// length), so the scores q.k spread as with 1 / sqrt(H): the writer's random
// norms around 1 at Gemma 4's attention scale 1 make each attention row
// nearly an argmax, where bf16 rounding would flip near-ties (the same
// rescaling as docs/benchmarks.md's gemma4v_scaled encoder check).
inline void ScaleQkNorms(GgufSpec& g) {
  for (GgufTensorSpec& t : g.tensors) {
    const bool qk = t.name.ends_with("attn_q_norm.weight") || t.name.ends_with("attn_k_norm.weight");
    if (!qk) continue;
    std::vector<float> v(t.data.size() / 4);
    std::memcpy(v.data(), t.data.data(), t.data.size());
    const float f = 1.0f / std::sqrt(std::sqrt(static_cast<float>(v.size())));
    for (float& x : v) x *= f;
    std::memcpy(t.data.data(), v.data(), t.data.size());
  }
}

struct RowsDiff {
  double worst = 0.0;         // largest per-row relative error
  double max_abs = 0.0;       // largest |got - want|
  std::int64_t first = -1;    // flat index of the first element past tol (-1: none)
  std::int64_t bad_rows = 0;  // rows past tol
  std::string where;          // the first wrong element, as text
};

// got and want: [rows, width]; row r's error: max |got - want| / max |want|.
inline RowsDiff CompareRows(std::span<const float> got, std::span<const float> want, std::int64_t width, double tol) {
  RowsDiff d;
  if (got.size() != want.size()) {
    d.worst = INFINITY;
    d.where = "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
    return d;
  }
  const auto rows = static_cast<std::int64_t>(want.size()) / width;
  for (std::int64_t r = 0; r < rows; ++r) {
    double scale = 1e-30, diff = 0.0;
    for (std::int64_t i = r * width; i < (r + 1) * width; ++i)
      scale = std::max(scale, std::fabs(static_cast<double>(want[static_cast<std::size_t>(i)])));
    for (std::int64_t i = r * width; i < (r + 1) * width; ++i) {
      const double e =
          std::fabs(static_cast<double>(got[static_cast<std::size_t>(i)]) - want[static_cast<std::size_t>(i)]);
      diff = std::max(diff, e);
      if ((e / scale > tol || !std::isfinite(e)) && d.first < 0) {
        d.first = i;
        std::ostringstream s;
        s << "first wrong element: row " << r << " col " << i - r * width << ": got "
          << got[static_cast<std::size_t>(i)] << ", want " << want[static_cast<std::size_t>(i)];
        d.where = s.str();
      }
    }
    d.max_abs = std::max(d.max_abs, diff);
    d.worst = std::max(d.worst, diff / scale);
    if (diff / scale > tol || !std::isfinite(diff)) ++d.bad_rows;
  }
  return d;
}

// Whether the argmax of l leads the runner-up by more than twice tol of the
// row's largest |logit| (then runs within tol of each other pick the same).
inline bool ClearMargin(std::span<const float> l, double tol) {
  float best = -INFINITY, second = -INFINITY, scale = 1e-30f;
  for (const float x : l) {
    scale = std::max(scale, std::fabs(x));
    if (x > best) {
      second = best, best = x;
    } else if (x > second) {
      second = x;
    }
  }
  return best - second > 2 * tol * scale;
}

inline std::string Describe(const RowsDiff& d) {
  std::ostringstream s;
  s << "largest relative error " << d.worst << ", largest absolute " << d.max_abs << ", rows past tolerance "
    << d.bad_rows << (d.where.empty() ? "" : "; ") << d.where;
  return s.str();
}

// Every layer's residual rows of one Forward of `tokens` (all logits) on a
// fresh state of `m` (DecoderState::layer_probe), by layer.
inline std::map<int, std::vector<float>> LayerRows(const Model& m, const ModelStateOptions& o,
                                                   const std::vector<std::int32_t>& tokens) {
  std::map<int, std::vector<float>> rows;
  auto st = m.NewState(o);
  auto* ds = dynamic_cast<detail::DecoderState*>(st.get());
  if (ds == nullptr) return rows;
  ds->layer_probe = [&](int l, std::span<const float> x) {
    std::vector<float>& v = rows[l];
    v.insert(v.end(), x.begin(), x.end());  // chunk after chunk
  };
  m.Forward(*st, tokens, nullptr, {.num_logits = static_cast<std::int64_t>(tokens.size())});
  return rows;
}

// Where a GPU run left the CPU's: each layer's largest relative error of the
// residual rows, and the first layer past tol.
inline std::string LayerDivergence(const Model& cpu, const Model& gpu, const ModelStateOptions& o,
                                   const std::vector<std::int32_t>& tokens, double tol) {
  const auto want = LayerRows(cpu, o, tokens);
  const auto got = LayerRows(gpu, o, tokens);
  std::ostringstream s;
  s << "per-layer residual divergence (GPU vs CPU, same steps):";
  int first = -1;
  for (const auto& [l, w] : want) {
    const auto it = got.find(l);
    if (it == got.end()) {
      s << " layer " << l << ": no GPU rows;";
      continue;
    }
    const RowsDiff d = CompareRows(it->second, w, cpu.config().n_embd, tol);
    s << " L" << l << " " << d.worst;
    if (d.worst > tol && first < 0) first = l;
  }
  s << (first < 0 ? "; no layer past tolerance" : "; first layer past tolerance: " + std::to_string(first));
  return s.str();
}

// Top-1 index of a logits row, and its gap to the second largest.
inline std::pair<int, double> Top(std::span<const float> row) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(row.size()); ++i)
    if (row[static_cast<std::size_t>(i)] > row[static_cast<std::size_t>(best)]) best = i;
  double second = -INFINITY;
  for (int i = 0; i < static_cast<int>(row.size()); ++i)
    if (i != best) second = std::max(second, static_cast<double>(row[static_cast<std::size_t>(i)]));
  return {best, row[static_cast<std::size_t>(best)] - second};
}

struct FollowOptions {
  double tolerance = kBf16ModelTolerance;
  double bad_rows_allowed = 0.0;  // the fraction of logits rows that may exceed the tolerance
  bool greedy = true;             // check greedy tokens where the CPU's top-2 margin > 2 * tolerance
  std::string what;               // named in every failure
};

// Teacher-forced on fresh CPU and GPU states of `o`: the first 13 tokens as
// one prefill (all logits, in chunks of o.max_step), the rest decoded one at
// a time, then both rewound to 15 and token 15 decoded again (tokens: >= 16);
// then on fresh states the prefill keeping its last 2 logits (the prefill
// cut) and one decode step.
// Every logits row within f.tolerance of the CPU's (relative to the row's
// largest value), up to f.bad_rows_allowed of them; greedy tokens equal where
// the margin is clear. On failure: the largest errors, the first wrong
// element and the per-layer divergence of the prefill.
inline void ExpectFollowsCpu(const Model& cpu, const Model& gpu, const ModelStateOptions& o,
                             const std::vector<std::int32_t>& tokens, const FollowOptions& f) {
  const std::int64_t V = cpu.config().n_vocab, P = 13;
  auto cs = cpu.NewState(o);
  auto gs = gpu.NewState(o);
  std::vector<float> want, got;      // [positions, V]
  std::vector<float> want_h, got_h;  // [positions, E]: hidden(), the rows the LM head reads
  const auto run = [&](std::span<const std::int32_t> t, std::int64_t num_logits) {
    const std::span<const float> w = cpu.Forward(*cs, t, nullptr, {.num_logits = num_logits});
    want.insert(want.end(), w.begin(), w.end());
    want_h.insert(want_h.end(), cs->hidden().begin(), cs->hidden().end());
    const std::span<const float> g = gpu.Forward(*gs, t, nullptr, {.num_logits = num_logits});
    got.insert(got.end(), g.begin(), g.end());
    got_h.insert(got_h.end(), gs->hidden().begin(), gs->hidden().end());
  };
  run(std::span<const std::int32_t>(tokens.data(), P), P);
  for (std::size_t t = P; t < tokens.size(); ++t) run(std::span<const std::int32_t>(&tokens[t], 1), 1);
  EXPECT_EQ(gs->length(), static_cast<std::int64_t>(tokens.size())) << f.what;
  cs->Rewind(0, 15);
  gs->Rewind(0, 15);
  run(std::span<const std::int32_t>(&tokens[15], 1), 1);
  EXPECT_EQ(gs->length(), 16) << f.what;
  // The prefill cut: a prefill that keeps 2 logits runs the layers after the
  // last KV-writing one on those rows only (query offsets on KV-shared
  // layers), then a decode step over the cache it wrote.
  cs = cpu.NewState(o);
  gs = gpu.NewState(o);
  run(std::span<const std::int32_t>(tokens.data(), P), 2);
  run(std::span<const std::int32_t>(&tokens[P], 1), 1);

  const RowsDiff d = CompareRows(got, want, V, f.tolerance);
  // hidden() within tolerance but not the logits: the LM head (output norm
  // aside), its weights or the softcap diverged, not the layers.
  const RowsDiff dh = CompareRows(got_h, want_h, cpu.config().n_embd, f.tolerance);
  const std::int64_t rows = static_cast<std::int64_t>(want.size()) / V;
  const auto allowed = static_cast<std::int64_t>(f.bad_rows_allowed * static_cast<double>(rows));
  if (d.bad_rows > allowed) {
    ADD_FAILURE() << f.what << ": " << Describe(d) << " (" << allowed << " allowed of " << rows << ")\n"
                  << "hidden() (the normed rows the LM head reads): " << Describe(dh) << "\n"
                  << LayerDivergence(cpu, gpu, o, std::vector<std::int32_t>(tokens.begin(), tokens.begin() + P),
                                     f.tolerance);
  }
  int greedy_checked = 0;
  for (std::int64_t r = 0; r < rows && f.greedy; ++r) {
    const auto w = std::span<const float>(want).subspan(static_cast<std::size_t>(r * V), static_cast<std::size_t>(V));
    const auto g = std::span<const float>(got).subspan(static_cast<std::size_t>(r * V), static_cast<std::size_t>(V));
    const auto [top, margin] = Top(w);
    double scale = 0.0;
    for (float x : w) scale = std::max(scale, std::fabs(static_cast<double>(x)));
    if (margin <= 2 * f.tolerance * scale) continue;
    ++greedy_checked;
    EXPECT_EQ(Top(g).first, top) << f.what << ": greedy token of logits row " << r << " (CPU margin " << margin << ")";
  }
  RecordMeasured("%s: largest relative logits error %.3g (hidden() %.3g) over %lld rows, %d greedy tokens checked",
                 f.what.c_str(), d.worst, dh.worst, static_cast<long long>(rows), greedy_checked);
}

// The logits of each entry of one ForwardBatch on `batched` ([num_logits,
// V] each) against the same entries run one at a time on `alone` states (one
// per row, each with the row's history replayed first). history[r]: tokens
// the row already holds.
inline void ExpectBatchEqualsAlone(const Model& m, const ModelStateOptions& o,
                                   const std::vector<std::vector<std::int32_t>>& history,
                                   const std::vector<BatchEntry>& entries, double tol, const std::string& what) {
  const std::int64_t V = m.config().n_vocab;
  auto batched = m.NewState(o);
  for (std::size_t r = 0; r < history.size(); ++r) {
    if (history[r].empty()) continue;
    m.ForwardBatch(*batched, std::vector<BatchEntry>{{.row = static_cast<int>(r), .tokens = history[r]}}, nullptr);
  }
  const std::span<const float> all = m.ForwardBatch(*batched, entries, nullptr);
  const std::vector<float> got(all.begin(), all.end());
  std::int64_t at = 0;
  for (const BatchEntry& e : entries) {
    auto alone = m.NewState(o);
    const std::vector<std::int32_t>& h = history[static_cast<std::size_t>(e.row)];
    if (!h.empty()) m.ForwardBatch(*alone, std::vector<BatchEntry>{{.row = e.row, .tokens = h}}, nullptr);
    const std::span<const float> want = m.ForwardBatch(*alone, std::vector<BatchEntry>{e}, nullptr);
    const RowsDiff d =
        CompareRows(std::span<const float>(got).subspan(static_cast<std::size_t>(at * V), want.size()), want, V, tol);
    EXPECT_LE(d.worst, tol) << what << ": row " << e.row << " (" << e.tokens.size() << " tokens, " << e.num_logits
                            << " logits) in the batch vs alone: " << Describe(d);
    EXPECT_EQ(batched->length(e.row), alone->length(e.row)) << what << ": row " << e.row;
    at += e.num_logits;
  }
}

}  // namespace kvshare::testing
