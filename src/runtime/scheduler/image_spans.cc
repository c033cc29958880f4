// Images in scheduled prompts (scheduler/image_spans.h).
#include "runtime/scheduler/image_spans.h"

#include <algorithm>
#include <string>

#include "kvshare/common/error.h"

namespace kvshare::detail {

void ValidateEmbeddings(const RequestOptions& r, std::int64_t max_span) {
  if (r.embedding_keys.size() != r.embeddings.size()) {
    throw Error("embeddings: " + std::to_string(r.embeddings.size()) + " spans but " +
                std::to_string(r.embedding_keys.size()) + " keys (one per span)");
  }
  const std::int64_t n = static_cast<std::int64_t>(r.prompt.size());
  std::int64_t end = 0;
  for (std::size_t i = 0; i < r.embeddings.size(); ++i) {
    const EmbeddingSpan& e = r.embeddings[i];
    const std::string which =
        "embedding span " + std::to_string(i) + " [" + std::to_string(e.begin) + ", +" + std::to_string(e.count) + ")";
    if (e.count < 1 || e.begin < end || e.begin + e.count > n) {
      throw Error(which + " must be non-empty, sorted, disjoint and within the prompt of " + std::to_string(n) +
                  " tokens");
    }
    if (e.rows == nullptr) throw Error(which + " has no rows");
    if (e.count > max_span) {
      throw Error(which + ": a span of " + std::to_string(e.count) +
                  " tokens (an image) must run in one step, which holds at most " + std::to_string(max_span) +
                  " prompt tokens (step_tokens - slots + 1); raise step_tokens or lower the image's token budget");
    }
    end = e.begin + e.count;
  }
}

std::vector<CachedSpan> SpansOf(const RequestOptions& r) {
  std::vector<CachedSpan> out;
  for (std::size_t i = 0; i < r.embeddings.size(); ++i) {
    out.push_back({r.embeddings[i].begin, r.embeddings[i].count, r.embedding_keys[i]});
  }
  return out;
}

std::size_t ClampReuse(std::size_t reuse, std::span<const CachedSpan> cached, std::span<const CachedSpan> prompt) {
  std::int64_t limit = static_cast<std::int64_t>(reuse);
  std::size_t i = 0, j = 0;
  // Walk both sorted lists in step: equal spans pass, the first difference
  // (or a span cut by the limit) ends the reusable prefix at its start.
  while (true) {
    const CachedSpan* a = i < cached.size() && cached[i].begin < limit ? &cached[i] : nullptr;
    const CachedSpan* b = j < prompt.size() && prompt[j].begin < limit ? &prompt[j] : nullptr;
    if (a == nullptr && b == nullptr) break;
    if (a != nullptr && b != nullptr && a->begin == b->begin && a->count == b->count && a->key == b->key &&
        a->begin + a->count <= limit) {
      ++i, ++j;
      continue;
    }
    limit = std::min(a != nullptr ? a->begin : limit, b != nullptr ? b->begin : limit);
  }
  return static_cast<std::size_t>(limit);
}

void KeepSpansWithin(std::vector<CachedSpan>& spans, std::int64_t length) {
  std::erase_if(spans, [&](const CachedSpan& s) { return s.begin + s.count > length; });
}

std::int64_t ChunkTokens(const RequestOptions& r, std::int64_t at, std::int64_t want, std::vector<EmbeddingSpan>& out) {
  out.clear();
  std::int64_t n = want;
  for (const EmbeddingSpan& e : r.embeddings) {
    if (e.begin + e.count <= at) continue;
    if (e.begin >= at + n) break;
    if (e.begin + e.count > at + n) {  // would be cut: the chunk ends before it
      n = e.begin - at;
      break;
    }
  }
  for (const EmbeddingSpan& e : r.embeddings) {
    if (e.begin >= at && e.begin + e.count <= at + n) {
      EmbeddingSpan c = e;
      c.begin -= at;
      out.push_back(c);
    }
  }
  return n;
}

}  // namespace kvshare::detail
