#include "runtime/text_release.h"

#include <algorithm>
#include <utility>

namespace kvshare::detail {

TextReleaser::TextReleaser(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

void TextReleaser::Add(std::size_t token, std::string piece, std::vector<ReleasedPiece>& out) {
  if (stopped_) return;
  held_text_ += piece;
  held_.push_back({token, std::move(piece)});
  if (stops_.empty()) {
    Flush(out);
    return;
  }
  // Released text never ends in a prefix of a stop string, so a match starts
  // inside the held text.
  std::size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    const std::size_t at = held_text_.find(s);
    if (at < cut) {
      cut = at;
      matched_ = s;
    }
  }
  if (cut != std::string::npos) {
    std::size_t begin = 0;
    for (ReleasedPiece& p : held_) {
      if (begin >= cut) break;
      const std::size_t end = begin + p.text.size();
      p.text.resize(std::min(end, cut) - begin);
      begin = end;
      out.push_back(std::move(p));
    }
    held_.clear();
    held_text_.clear();
    stopped_ = true;
    return;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  std::size_t hold = 0;
  for (const std::string& s : stops_) {
    for (std::size_t k = std::min(s.size() - 1, held_text_.size()); k > hold; --k) {
      if (held_text_.compare(held_text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  const std::size_t release_to = held_text_.size() - hold;
  std::size_t begin = 0, n = 0;
  for (const ReleasedPiece& p : held_) {
    if (begin + p.text.size() > release_to) break;
    begin += p.text.size();
    ++n;
  }
  if (n == 0) return;
  for (std::size_t i = 0; i < n; ++i) out.push_back(std::move(held_[i]));
  held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
  held_text_.erase(0, begin);
}

void TextReleaser::Flush(std::vector<ReleasedPiece>& out) {
  if (stopped_) return;
  for (ReleasedPiece& p : held_) out.push_back(std::move(p));
  held_.clear();
  held_text_.clear();
}

}  // namespace kvshare::detail
