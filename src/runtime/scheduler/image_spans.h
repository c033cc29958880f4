// Images in scheduled prompts (RequestOptions::embeddings): Submit's checks,
// the prompt cache's rule (a prefix is reused only where the image keys in
// it match, never resuming inside a span) and prompt chunks that never cut a
// span (a bidirectional span must run in one step, Model::ForwardBatch).
// Stepping thread, except ValidateEmbeddings (Submit's). Internal to
// src/runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvshare/model/model.h"
#include "kvshare/runtime/scheduler.h"

namespace kvshare::detail {

// An image span a slot's cache holds: its place in the row and its key.
struct CachedSpan {
  std::int64_t begin = 0;
  std::int64_t count = 0;
  std::uint64_t key = 0;
};

// Throws kvshare::Error for the first bad span of r: unsorted or
// overlapping, outside the prompt, no rows, a missing key, or a span over
// `max_span` tokens (chunks never cut a span: ChunkTokens).
void ValidateEmbeddings(const RequestOptions& r, std::int64_t max_span);

// The spans of a request as a slot records them.
std::vector<CachedSpan> SpansOf(const RequestOptions& r);

// `reuse` (a common token prefix of a slot's cached tokens and the prompt)
// cut back so that every span starting before it matches in place, length
// and key on both sides and lies wholly inside it (else it ends at that
// span's start).
std::size_t ClampReuse(std::size_t reuse, std::span<const CachedSpan> cached, std::span<const CachedSpan> prompt);

// Drops the spans that no longer lie wholly within the first `length` tokens.
void KeepSpansWithin(std::vector<CachedSpan>& spans, std::int64_t length);

// How many of the `want` prompt tokens from `at` a chunk takes: all, or,
// when they would end inside a span, those before it (0 when the span
// starts at `at` and does not fit). The chunk's spans, relative to its
// start, go to `out` (pointing into the request's rows).
std::int64_t ChunkTokens(const RequestOptions& r, std::int64_t at, std::int64_t want, std::vector<EmbeddingSpan>& out);

}  // namespace kvshare::detail
