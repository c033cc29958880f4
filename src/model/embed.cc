// Sentence embeddings (Model::Embed, embedding.h): the inputs run as rows of
// batched steps on states of their own, every token's final hidden state
// kept (no LM head), then pooling, the dense projections and L2 norms
// (EmbedInputs: also the GPU models', src/cuda_model/embed_cuda.cc). An
// encoder (gemma-embedding) runs its layers bidirectionally, so each input
// runs whole in one step on linear buffers (exact_rewind: no window ring).
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "kvshare/model/model.h"
#include "model/decoder.h"

namespace kvshare {

const char* PoolingName(Pooling pooling) {
  switch (pooling) {
    case Pooling::kNone: return "none";
    case Pooling::kMean: return "mean";
    case Pooling::kLast: return "last";
  }
  return "?";
}

Pooling PoolingFromName(const std::string& name) {
  if (name == "mean") return Pooling::kMean;
  if (name == "last") return Pooling::kLast;
  throw Error("unknown pooling '" + name + "' (expected mean or last)");
}

std::vector<float> Model::Embed(std::span<const std::vector<std::int32_t>>, const EmbedOptions&, ThreadPool*) const {
  throw Error("this model (" + config().architecture + ") does not compute embeddings (Model::Embed)");
}

namespace detail {
namespace {

// x[n] /= ||x||_2 (sum of squares in double); a zero vector stays zero.
void L2Normalize(float* x, int n) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  if (ss <= 0.0) return;
  const double inv = 1.0 / std::sqrt(ss);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * inv);
}

}  // namespace

void DecoderModel::LoadEmbeddingHead(const std::string& prefix) {
  ModelConfig& c = cfg_;
  c.causal = false;
  // The GGUF keeps the checkpoint's window W; HF's Gemma3TextConfig turns it
  // into W / 2 + 1 and shows a query the keys with |p - j| < W / 2 + 1
  // (llama.cpp: LLAMA_SWA_TYPE_SYMMETRIC, |p - j| <= W / 2): the op's
  // symmetric window of W / 2 + 1.
  if (c.sliding_window > 0) c.sliding_window = c.sliding_window / 2 + 1;
  const std::uint32_t type = file_.GetU32Or(prefix + "pooling_type", 0);
  if (type == 2 || type == 4 || type > 4) {
    throw Error(Str(prefix, "pooling_type is ", type,
                    type == 2   ? " (cls)"
                    : type == 4 ? " (rank)"
                                : "",
                    ": kvshare pools mean (1) or last (3) only"));
  }
  c.pooling = static_cast<Pooling>(type);
  const TensorLookup t(file_, pack_);
  std::int64_t width = c.n_embd;
  for (const char* name : {"dense_2", "dense_3"}) {
    const std::string w = std::string(name) + ".weight";
    if (file_.FindTensor(std::string(name) + ".bias") != nullptr) {
      throw Error(Str("tensor ", name,
                      ".bias: dense projections with a bias are not supported (llama.cpp's "
                      "converter writes none; EmbeddingGemma has none)"));
    }
    const GgufTensor* g = file_.FindTensor(w);
    if (g == nullptr) continue;
    const std::int64_t out = g->ne[1];
    const auto in = file_.GetU32Opt(prefix + name + "_feat_in");
    const auto out_key = file_.GetU32Opt(prefix + name + "_feat_out");
    if ((in && *in != width) || (out_key && *out_key != out)) {
      throw Error(Str(prefix, name, "_feat_in / _feat_out (", in.value_or(0), " / ", out_key.value_or(0),
                      ") do not match tensor ", w, " ", g->DimsString(), " after a width of ", width));
    }
    dense_.push_back(t.ForMatMul(t.Mat(w, out, width)));
    width = out;
  }
  c.embedding_dim = static_cast<int>(width);
}

ModelStateOptions EmbedStateOptions(int rows, std::int64_t longest) {
  return {.max_context = static_cast<int>(longest),
          .max_step = static_cast<int>(longest),
          .max_batch = rows,
          .exact_rewind = true};
}

std::vector<float> EmbedInputs(const ModelConfig& c, const float* out_norm, std::span<const WeightMatrix> dense,
                               std::span<const std::vector<std::int32_t>> inputs, const EmbedOptions& o,
                               ThreadPool* pool, const EmbedStepRunner& run) {
  const int E = c.n_embd;
  const int D = c.embedding_dim > 0 ? c.embedding_dim : E;
  const Pooling pooling = o.pooling.value_or(c.pooling);
  if (pooling == Pooling::kNone) {
    throw Error(Str("model ", c.architecture, " names no pooling type", c.causal ? " (a text generation model)" : "",
                    ": choose one (--pooling mean|last, EmbedOptions::pooling) to embed with it"));
  }
  if (pooling != Pooling::kMean && pooling != Pooling::kLast) throw Error("pooling must be mean or last");
  if (o.dimensions < 0 || o.dimensions > D) {
    throw Error(Str("dimensions ", o.dimensions, " is out of range [1, ", D, "] (0: all ", D, ")"));
  }
  if (inputs.empty()) throw Error("no inputs to embed");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<std::int32_t>& in = inputs[i];
    if (in.empty()) throw Error(Str("input ", i, " is empty (no tokens)"));
    if (static_cast<std::int64_t>(in.size()) > c.context_length) {
      throw Error(Str("input ", i, " has ", in.size(), " tokens, more than the model's context of ", c.context_length));
    }
    for (std::int32_t id : in) {
      if (id < 0 || id >= c.n_vocab) {
        throw Error(Str("input ", i, ": token id ", id, " out of range [0, ", c.n_vocab, ")"));
      }
    }
  }
  const int d = o.dimensions > 0 ? o.dimensions : D;
  std::vector<float> out(inputs.size() * static_cast<std::size_t>(d));
  std::vector<float> pooled, projected;
  for (std::size_t first = 0; first < inputs.size();) {
    // A group: consecutive inputs while rows x longest fits the budget (the
    // state holds that many positions, and attention pads rows to the longest).
    std::size_t last = first + 1;
    std::int64_t tokens = static_cast<std::int64_t>(inputs[first].size());
    std::int64_t longest = tokens;
    while (last < inputs.size()) {
      const auto n = static_cast<std::int64_t>(inputs[last].size());
      if (static_cast<std::int64_t>(last - first + 1) * std::max(longest, n) > o.step_tokens) break;
      tokens += n;
      longest = std::max(longest, n);
      ++last;
    }
    const int rows = static_cast<int>(last - first);
    Step step;
    for (int r = 0; r < rows; ++r) {
      const std::vector<std::int32_t>& in = inputs[first + static_cast<std::size_t>(r)];
      const auto n = static_cast<std::int64_t>(in.size());
      step.rows.push_back(StepRow{.row = r, .begin = static_cast<std::int64_t>(step.tokens.size()), .n = n, .keep = n});
      step.tokens.insert(step.tokens.end(), in.begin(), in.end());
    }
    const float* h = run(step, EmbedStateOptions(rows, longest));  // [tokens, E], step.rows order
    std::vector<float> normed(h, h + tokens * E);
    RmsNorm(normed.data(), tokens, E, out_norm, c.rms_eps, pool);
    pooled.assign(static_cast<std::size_t>(rows) * E, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const StepRow& sr = step.rows[static_cast<std::size_t>(r)];
      float* dst = pooled.data() + static_cast<std::size_t>(r) * E;
      if (pooling == Pooling::kLast) {
        const float* src = normed.data() + (sr.begin + sr.n - 1) * E;
        std::copy(src, src + E, dst);
        continue;
      }
      for (int e = 0; e < E; ++e) {  // mean in double
        double s = 0.0;
        for (std::int64_t t = 0; t < sr.n; ++t) s += normed[static_cast<std::size_t>((sr.begin + t) * E + e)];
        dst[e] = static_cast<float>(s / static_cast<double>(sr.n));
      }
    }
    int width = E;
    for (const WeightMatrix& w : dense) {
      projected.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(w.rows));
      MatMulRows(w, pooled.data(), rows, projected.data(), pool);
      pooled.swap(projected);
      width = static_cast<int>(w.rows);
    }
    for (int r = 0; r < rows; ++r) {
      float* v = pooled.data() + static_cast<std::size_t>(r) * width;
      L2Normalize(v, width);
      if (d < width) L2Normalize(v, d);  // Matryoshka: the first d values, renormalized
      std::copy(v, v + d, out.begin() + static_cast<std::ptrdiff_t>((first + static_cast<std::size_t>(r)) * d));
    }
    first = last;
  }
  return out;
}

std::vector<float> DecoderModel::Embed(std::span<const std::vector<std::int32_t>> inputs, const EmbedOptions& o,
                                       ThreadPool* pool) const {
  std::unique_ptr<ModelState> state;  // the current group's, alive while its rows are read
  return EmbedInputs(cfg_, out_norm_, dense_, inputs, o, pool,
                     [&](const Step& step, const ModelStateOptions& so) -> const float* {
                       state = NewState(so);
                       return RunStep(static_cast<DecoderState&>(*state), step, pool);
                     });
}

}  // namespace detail
}  // namespace kvshare
