// Caller-given input rows (EmbeddingSpan, model.h) in a batched forward: their
// checks, the chunk cuts that keep a bidirectional span in one step, the
// step's embedding rows and op spans, and the rows that replace a step's
// token embeddings (decoder.h).
#include <algorithm>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "model/decoder.h"

namespace kvshare {

const char* ImageAttentionName(ImageAttention mode) {
  switch (mode) {
    case ImageAttention::kCausal: return "causal";
    case ImageAttention::kAllLayers: return "all";
    case ImageAttention::kSlidingLayers: return "sliding";
  }
  return "causal";
}

ImageAttention ImageAttentionFromName(const std::string& name) {
  for (ImageAttention m : {ImageAttention::kCausal, ImageAttention::kAllLayers, ImageAttention::kSlidingLayers}) {
    if (name == ImageAttentionName(m)) return m;
  }
  throw Error(detail::Str("image attention '", name, "' is not one of causal, all, sliding"));
}

namespace detail {

std::vector<bool> BidirectionalLayers(const ModelConfig& config, ImageAttention mode) {
  std::vector<bool> out(static_cast<std::size_t>(config.n_layer), false);
  for (int l = 0; l < config.n_layer; ++l) {
    const bool sliding = config.is_sliding[static_cast<std::size_t>(l)];
    out[static_cast<std::size_t>(l)] =
        mode == ImageAttention::kAllLayers || (mode == ImageAttention::kSlidingLayers && sliding);
  }
  return out;
}

void CheckEmbeddings(const BatchEntry& e, int max_step, bool bidirectional_applies) {
  const std::int64_t S = static_cast<std::int64_t>(e.tokens.size());
  std::int64_t prev_end = 0;
  for (std::size_t k = 0; k < e.embeddings.size(); ++k) {
    const EmbeddingSpan& sp = e.embeddings[k];
    const std::string where =
        Str("Forward: row ", e.row, ": embedding span ", k, " [", sp.begin, ", ", sp.begin + sp.count, ")");
    if (sp.count < 1) throw Error(Str(where, " is empty (count must be >= 1)"));
    if (sp.begin < 0 || sp.begin + sp.count > S) {
      throw Error(Str(where, " lies outside the ", S, " tokens of the call"));
    }
    if (sp.begin < prev_end) {
      throw Error(Str(where, " starts before the previous span ends at ", prev_end, " (spans must be sorted and ",
                      "disjoint)"));
    }
    if (sp.rows == nullptr) throw Error(Str(where, " has no rows"));
    if (sp.bidirectional && bidirectional_applies && sp.count > max_step) {
      throw Error(Str(where, " holds ", sp.count, " tokens of one image, which see each other and so must run in ",
                      "one step, but max_step is ", max_step, "; raise max_step to at least ", sp.count));
    }
    prev_end = sp.begin + sp.count;
  }
}

std::int64_t ChunkLength(const BatchEntry& e, std::int64_t pos, int max_step, bool bidirectional_applies) {
  const std::int64_t S = static_cast<std::int64_t>(e.tokens.size());
  std::int64_t end = std::min<std::int64_t>(pos + max_step, S);
  if (bidirectional_applies) {
    for (const EmbeddingSpan& sp : e.embeddings) {
      // Cut before a span that would straddle the cut (CheckEmbeddings: it
      // fits in one step, so it never starts at pos and straddles).
      if (sp.bidirectional && sp.begin > pos && sp.begin < end && sp.begin + sp.count > end) end = sp.begin;
    }
  }
  return end - pos;
}

void AddStepInputs(const BatchEntry& e, std::int64_t pos, std::int64_t n, std::int64_t start, int n_embd,
                   bool bidirectional_applies, Step& step, std::vector<std::int64_t>& row_spans) {
  const std::int64_t at0 = static_cast<std::int64_t>(step.tokens.size());
  step.tokens.insert(step.tokens.end(), e.tokens.begin() + pos, e.tokens.begin() + pos + n);
  row_spans.clear();
  for (const EmbeddingSpan& sp : e.embeddings) {
    const std::int64_t lo = std::max(sp.begin, pos), hi = std::min(sp.begin + sp.count, pos + n);
    if (lo >= hi) continue;
    step.embeddings.push_back(
        StepEmbedding{.at = at0 + lo - pos, .count = hi - lo, .rows = sp.rows + (lo - sp.begin) * n_embd});
    // Placeholder ids become 0: the per-layer embeddings' token part of a
    // media position (HF: ids outside the text vocabulary map to 0).
    std::fill(step.tokens.begin() + at0 + lo - pos, step.tokens.begin() + at0 + hi - pos, 0);
    if (sp.bidirectional && bidirectional_applies) {
      row_spans.push_back(start + sp.begin);
      row_spans.push_back(start + sp.begin + sp.count);
    }
  }
}

StepInputRows GivenStepRows(const Step& step, const std::vector<HardTokenRows>* hard, int n_embd,
                            std::vector<std::int32_t>* ple_ids) {
  const std::int64_t E = n_embd;
  std::vector<const float*> row(step.tokens.size(), nullptr);  // per step token; null: its table row
  if (ple_ids != nullptr) ple_ids->assign(step.tokens.begin(), step.tokens.end());
  if (hard != nullptr) {
    for (std::size_t s = 0; s < step.tokens.size(); ++s) {
      // HF (Gemma 3n): torch.where(mask, embedder(ids), scaled text embedding).
      row[s] = HardRow(*hard, step.tokens[s], n_embd);
      if (row[s] != nullptr && ple_ids != nullptr) (*ple_ids)[s] = 0;
    }
  }
  for (const StepEmbedding& m : step.embeddings) {
    for (std::int64_t i = 0; i < m.count; ++i) row[static_cast<std::size_t>(m.at + i)] = m.rows + i * E;
  }
  StepInputRows out;
  for (std::size_t s = 0; s < row.size(); ++s) {
    if (row[s] == nullptr) continue;
    out.at.push_back(static_cast<std::int64_t>(s));
    out.rows.push_back(row[s]);
  }
  return out;
}

}  // namespace detail
}  // namespace kvshare
