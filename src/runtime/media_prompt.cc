// Images and audio clips in a prompt (kvshare/runtime/media_prompt.h).
#include "kvshare/runtime/media_prompt.h"

#include <algorithm>
#include <numeric>

#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare {

MediaPrompt SpliceMedia(std::span<const std::int32_t> ids, std::span<const MediaInsert> inserts) {
  std::vector<std::size_t> order(inserts.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return inserts[a].slot < inserts[b].slot; });
  MediaPrompt p;
  std::size_t from = 0;
  for (std::size_t i : order) {
    const MediaInsert& m = inserts[i];
    if (m.slot > ids.size()) {
      throw Error(detail::Str("media slot ", m.slot, " is past the end of the prompt's ", ids.size(), " tokens"));
    }
    if (m.spans.size() != m.keys.size()) {
      throw Error(detail::Str("media insert ", i, ": ", m.spans.size(), " spans but ", m.keys.size(), " keys"));
    }
    p.tokens.insert(p.tokens.end(), ids.begin() + static_cast<std::ptrdiff_t>(from),
                    ids.begin() + static_cast<std::ptrdiff_t>(m.slot));
    from = m.slot;
    const std::int64_t base = static_cast<std::int64_t>(p.tokens.size());
    for (std::size_t s = 0; s < m.spans.size(); ++s) {
      EmbeddingSpan e = m.spans[s];
      if (e.begin < 0 || e.count < 1 || e.begin + e.count > static_cast<std::int64_t>(m.tokens.size())) {
        throw Error(detail::Str("media insert ", i, ": span [", e.begin, ", +", e.count, ") lies outside its ",
                                m.tokens.size(), " tokens"));
      }
      e.begin += base;
      p.embeddings.push_back(e);
      p.keys.push_back(m.keys[s]);
    }
    p.tokens.insert(p.tokens.end(), m.tokens.begin(), m.tokens.end());
  }
  p.tokens.insert(p.tokens.end(), ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
  return p;
}

}  // namespace kvshare
