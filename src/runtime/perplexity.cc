// ComputePerplexity (perplexity.h).
#include "kvshare/runtime/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kvshare/common/error.h"
#include "runtime/log_softmax.h"

namespace kvshare {
namespace {

// -log softmax(logits)[token], in double.
double NegLogProb(std::span<const float> logits, std::int32_t token) {
  return detail::LogSumExp(logits) - static_cast<double>(logits[static_cast<std::size_t>(token)]);
}

}  // namespace

PerplexityResult ComputePerplexity(const Model& model, std::span<const std::int32_t> tokens, const PerplexityOptions& o,
                                   ThreadPool* pool, const PerplexityProgress& progress) {
  if (o.n_ctx < 4 || o.n_ctx % 2 != 0) {
    throw Error("perplexity: n_ctx must be even and >= 4, got " + std::to_string(o.n_ctx));
  }
  if (static_cast<std::int64_t>(tokens.size()) < 2 * static_cast<std::int64_t>(o.n_ctx)) {
    throw Error("perplexity: the text has " + std::to_string(tokens.size()) + " tokens; a context of " +
                std::to_string(o.n_ctx) + " needs at least " + std::to_string(2 * o.n_ctx) +
                " (give a longer text or a smaller context)");
  }
  int chunks = static_cast<int>(tokens.size() / static_cast<std::size_t>(o.n_ctx));
  if (o.max_chunks >= 0) chunks = std::min(chunks, o.max_chunks);
  ModelStateOptions so = o.state;
  so.max_context = o.n_ctx;
  const std::unique_ptr<ModelState> state = model.NewState(so);
  const int first = o.n_ctx / 2, V = model.config().n_vocab;
  PerplexityResult r;
  double sum = 0, sum2 = 0;
  std::vector<std::int32_t> chunk(static_cast<std::size_t>(o.n_ctx));
  for (int c = 0; c < chunks; ++c) {
    std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(c) * o.n_ctx, o.n_ctx, chunk.begin());
    if (o.bos >= 0) chunk[0] = o.bos;
    state->Reset();
    // Logits of positions first .. n_ctx - 1 (the last one predicts nothing in the chunk).
    const std::span<const float> logits =
        model.Forward(*state, chunk, pool, {.num_logits = static_cast<std::int64_t>(o.n_ctx - first)});
    for (int j = first; j < o.n_ctx - 1; ++j) {
      const std::size_t row = static_cast<std::size_t>(j - first);
      const double v = NegLogProb(
          logits.subspan(row * static_cast<std::size_t>(V), static_cast<std::size_t>(V)),
          tokens[static_cast<std::size_t>(c) * static_cast<std::size_t>(o.n_ctx) + static_cast<std::size_t>(j) + 1]);
      sum += v;
      sum2 += v * v;
      ++r.scored;
    }
    r.chunks = c + 1;
    if (progress) progress(r.chunks, chunks, std::exp(sum / static_cast<double>(r.scored)));
  }
  r.nll = sum / static_cast<double>(r.scored);
  r.ppl = std::exp(r.nll);
  const double var = sum2 / static_cast<double>(r.scored) - r.nll * r.nll;
  r.ppl_stderr = var > 0 && r.scored > 1 ? r.ppl * std::sqrt(var / static_cast<double>(r.scored - 1)) : 0.0;
  return r;
}

}  // namespace kvshare
