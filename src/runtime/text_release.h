// Releases generated text token by token for streaming, holding back the
// text that could still turn into a stop string (the scheduler's stop
// strings, kvshare/runtime/scheduler.h). Pieces are the per-token text a
// TokenStreamDecoder returns; a released piece keeps its token's index.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kvshare::detail {

struct ReleasedPiece {
  std::size_t token = 0;  // index of the token (order of Add calls)
  std::string text;       // its text, cut where a stop string starts
};

class TextReleaser {
 public:
  // Empty strings in `stops` are ignored.
  explicit TextReleaser(std::vector<std::string> stops);

  // Adds the next token's text (may be empty) and appends to `out` the
  // pieces that can no longer be part of a stop string. When the held text
  // now contains a stop string, the pieces before its first occurrence are
  // released (the one it starts in, cut), the rest is dropped and stopped()
  // becomes true; later calls release nothing.
  void Add(std::size_t token, std::string piece, std::vector<ReleasedPiece>& out);
  // Releases everything held (generation ended without a stop string).
  void Flush(std::vector<ReleasedPiece>& out);

  bool stopped() const { return stopped_; }
  // The stop string that matched (empty when none).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::vector<ReleasedPiece> held_;
  std::string held_text_;  // concatenation of held_ texts
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace kvshare::detail
