// kvshare/runtime/perplexity.h — perplexity of a model over a token sequence (runtime
// layer; `kvshare perplexity`), as llama.cpp's llama-perplexity
// computes it: the tokens are cut into chunks of n_ctx; each chunk runs from an
// empty cache with its first token replaced by <bos> (when the vocabulary adds
// one), and the tokens of its second half are scored: for positions j in
// [n_ctx/2, n_ctx - 1), -log p(token j+1 | tokens <= j) from a softmax in
// double. PPL = exp(mean), its standard error exp(mean) * sqrt(var / (count-1)).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "kvshare/model/model.h"

namespace kvshare {

class ThreadPool;

struct PerplexityOptions {
  int n_ctx = 512;          // tokens per chunk, >= 4 (even)
  int max_chunks = -1;      // < 0: all whole chunks
  std::int32_t bos = -1;    // replaces each chunk's first token when >= 0
  ModelStateOptions state;  // max_context is set to n_ctx
};

struct PerplexityResult {
  int chunks = 0;
  std::int64_t scored = 0;  // tokens scored
  double nll = 0;           // mean negative log-likelihood (nats)
  double ppl = 0;           // exp(nll)
  double ppl_stderr = 0;    // standard error of ppl
};

// Called after every chunk with the chunks done and the perplexity so far.
using PerplexityProgress = std::function<void(int done, int total, double ppl)>;

// Throws kvshare::Error when n_ctx is odd or < 4, or tokens holds fewer than
// 2 * n_ctx tokens (llama.cpp's rule; the message says how many are needed).
PerplexityResult ComputePerplexity(const Model& model, std::span<const std::int32_t> tokens,
                                   const PerplexityOptions& options, ThreadPool* pool,
                                   const PerplexityProgress& progress = {});

}  // namespace kvshare
