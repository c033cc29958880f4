// Gemma 3n's hard tokens (Model::SetHardTokenRows, kvshare/model/model.h):
// caller-given rows for ranges of ids, applied wherever the model embeds ids.
#include <algorithm>
#include <cmath>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "model/decoder.h"

namespace kvshare {

void Model::SetHardTokenRows(std::vector<HardTokenRows> ranges) {
  if (ranges.empty()) return;
  throw Error("model " + config().architecture +
              " on this device does not take hard-token rows (Gemma 3n's multimodal vocabularies): run it on the CPU");
}

namespace detail {

const float* HardRow(const std::vector<HardTokenRows>& hard, std::int32_t id, int n_embd) {
  const auto W = static_cast<std::int64_t>(n_embd);
  for (const HardTokenRows& r : hard) {  // a few ranges (vision, audio)
    const std::int64_t i = static_cast<std::int64_t>(id) - r.first;
    if (i >= 0 && i * W < static_cast<std::int64_t>(r.rows.size())) return r.rows.data() + i * W;
  }
  return nullptr;
}

void DecoderModel::SetHardTokenRows(std::vector<HardTokenRows> ranges) {
  const std::int64_t W = cfg_.n_embd;
  std::sort(ranges.begin(), ranges.end(),
            [](const HardTokenRows& a, const HardTokenRows& b) { return a.first < b.first; });
  std::int64_t end = 0;  // past the previous range
  for (const HardTokenRows& r : ranges) {
    const auto size = static_cast<std::int64_t>(r.rows.size());
    if (size == 0 || size % W != 0) {
      throw Error(Str("hard-token rows from id ", r.first, ": ", size, " values, expected a positive multiple of ",
                      "n_embd = ", W, " (rows [n, ", W, "]): the mmproj does not fit this model"));
    }
    const std::int64_t n = size / W;
    if (r.first < 0 || r.first + n > cfg_.n_vocab) {
      throw Error(Str("hard-token rows for ids [", r.first, ", ", r.first + n, ") fall outside this model's ",
                      "vocabulary [0, ", cfg_.n_vocab, "): the mmproj does not fit this model"));
    }
    if (r.first < end) {
      throw Error(Str("hard-token ranges overlap: one starts at id ", r.first, " before the previous one ends at ",
                      end, "; give disjoint ranges"));
    }
    end = r.first + n;
  }
  if (ranges.empty()) {
    hard_.store(nullptr);
  } else {
    hard_.store(std::make_shared<const std::vector<HardTokenRows>>(std::move(ranges)));
  }
}

void DecoderModel::EmbedWith(const std::vector<HardTokenRows>* hard, std::span<const std::int32_t> tokens,
                             float* out) const {
  for (std::int32_t t : tokens) {
    if (t < 0 || t >= cfg_.n_vocab) throw Error(Str("token id ", t, " out of range [0, ", cfg_.n_vocab, ")"));
  }
  EmbedRows(embd_w_, tokens, std::sqrt(static_cast<float>(cfg_.n_embd)), out);
  if (hard == nullptr) return;
  const std::int64_t W = cfg_.n_embd;
  for (std::size_t s = 0; s < tokens.size(); ++s) {
    // HF: torch.where(mask, embedder(ids), scaled text embedding).
    if (const float* row = HardRow(*hard, tokens[s], cfg_.n_embd)) {
      std::copy(row, row + W, out + static_cast<std::int64_t>(s) * W);
    }
  }
}

}  // namespace detail
}  // namespace kvshare
