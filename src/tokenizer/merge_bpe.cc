#include "tokenizer/merge_bpe.h"

#include <algorithm>
#include <queue>

#include "common/utf8.h"
#include "kvshare/common/error.h"

namespace kvshare::runtime {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581 "▁"

// Byte length of the character a lead byte starts (input is well-formed UTF-8).
size_t CharLength(char lead) {
  const auto b = static_cast<uint8_t>(lead);
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

std::string MergeError(size_t i, std::string_view merge, const std::string& what) {
  return "VocabData.merges[" + std::to_string(i) + "] = \"" + std::string(merge) + "\"" + what;
}

}  // namespace

MergeBpe::MergeBpe(const PieceIds* piece_to_id, const std::array<int32_t, 256>& byte_ids, int32_t unk,
                   std::span<const std::string> merges)
    : piece_to_id_(piece_to_id), byte_ids_(byte_ids), unk_(unk) {
  merges_.reserve(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string_view m = merges[i];
    // llama.cpp splits at the first space after the first byte.
    const size_t sep = m.size() < 3 ? std::string_view::npos : m.find(' ', 1);
    if (sep == std::string_view::npos || sep + 1 == m.size()) {
      throw Error(MergeError(i, m, " must be two tokens separated by a space"));
    }
    const std::string_view left = m.substr(0, sep), right = m.substr(sep + 1);
    auto find = [&](std::string_view piece, const char* role) {
      auto it = piece_to_id_->find(piece);
      if (it == piece_to_id_->end()) {
        throw Error(MergeError(i, m, std::string(": ") + role + " \"" + std::string(piece) + "\" is not a token"));
      }
      return it->second;
    };
    const int32_t l = find(left, "left part"), r = find(right, "right part");
    joined.assign(left).append(right);
    const int32_t merged = find(joined, "the merged piece");
    auto [it, fresh] = merges_.emplace(Key(l, r), Merge{static_cast<int32_t>(i), merged});
    if (!fresh) {
      throw Error(MergeError(i, m, " repeats merges[" + std::to_string(it->second.rank) + "]"));
    }
  }
}

void MergeBpe::Encode(std::string_view text, std::vector<int32_t>* ids) const {
  std::string clean;
  clean.reserve(text.size());
  AppendWellFormedUtf8(text, /*final=*/true, &clean);
  std::string escaped;
  for (size_t pos = 0; pos < clean.size();) {
    const bool newline = clean[pos] == '\n';
    size_t end = pos;
    while (end < clean.size() && (clean[end] == '\n') == newline) ++end;
    const std::string_view run(clean.data() + pos, end - pos);
    pos = end;
    if (newline) {
      if (auto it = piece_to_id_->find(run); it != piece_to_id_->end()) {
        ids->push_back(it->second);
      } else {
        EncodeRun(run, ids);
      }
      continue;
    }
    escaped.clear();
    for (char c : run) {
      if (c == ' ') {
        escaped.append(kSpaceSymbol);
      } else {
        escaped.push_back(c);
      }
    }
    EncodeRun(escaped, ids);
  }
}

void MergeBpe::EncodeRun(std::string_view run, std::vector<int32_t>* ids) const {
  // Symbols in a doubly linked list; a merge folds the right symbol into the left.
  struct Symbol {
    int32_t id;    // -1: folded into its left neighbour
    int32_t prev;  // -1: none
    int32_t next;  // -1: none
  };
  std::vector<Symbol> sym;
  sym.reserve(run.size());
  auto add = [&sym](int32_t id) {
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, -1});
    if (n > 0) sym[n - 1].next = n;
  };
  for (size_t i = 0; i < run.size();) {
    const size_t len = std::min(CharLength(run[i]), run.size() - i);
    const std::string_view ch = run.substr(i, len);
    i += len;
    if (auto it = piece_to_id_->find(ch); it != piece_to_id_->end()) {
      add(it->second);
      continue;
    }
    bool all_bytes = true;
    for (char c : ch) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
    if (!all_bytes) {
      add(unk_);
      continue;
    }
    for (char c : ch) add(byte_ids_[static_cast<uint8_t>(c)]);
  }

  // A candidate merge of the adjacent symbols left, right as they were when it
  // was queued; stale once either has changed.
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, merged;
    bool operator<(const Candidate& o) const {  // priority_queue pops the largest
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate> queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = merges_.find(Key(sym[left].id, sym[right].id));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, left, right, sym[left].id, sym[right].id, it->second.merged});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i, i + 1);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[c.left];
    if (l.id != c.left_id || l.next != c.right || sym[c.right].id != c.right_id) continue;
    l.id = c.merged;
    l.next = sym[c.right].next;
    sym[c.right].id = -1;
    if (l.next >= 0) sym[l.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) ids->push_back(sym[i].id);
}

}  // namespace kvshare::runtime
