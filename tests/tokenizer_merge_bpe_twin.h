// Plain twin of the `gemma4` encoder for tests: BPE by merge rank exactly as the
// header describes it, quadratic and obvious, on strings. User-defined tokens are
// cut out first (longest match); the rest is split into newline runs and other
// runs; a newline run that is a token is emitted whole; ' ' becomes "▁";
// characters that are not tokens become <0xNN> byte tokens; then, repeatedly, the
// adjacent pair with the lowest merge rank (leftmost on ties) is merged until no
// listed pair is left. Input must be well-formed UTF-8. No control-token parsing.
#pragma once

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvshare/tokenizer/tokenizer.h"

namespace kvshare::testing {

class MergeBpeTwin {
 public:
  explicit MergeBpeTwin(const VocabData& v) {
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      const auto id = static_cast<int32_t>(i);
      id_[v.tokens[i]] = id;
      if (v.token_types[i] == static_cast<int32_t>(TokenType::kUserDefined)) {
        user_[v.tokens[i]] = id;
        max_user_len_ = std::max(max_user_len_, v.tokens[i].size());
      }
    }
    for (size_t r = 0; r < v.merges.size(); ++r) {
      const std::string& m = v.merges[r];
      const size_t sp = m.find(' ', 1);
      rank_[{m.substr(0, sp), m.substr(sp + 1)}] = static_cast<int>(r);
    }
  }

  std::vector<int32_t> Encode(const std::string& text) const {
    std::vector<int32_t> ids;
    std::string frag;
    for (size_t i = 0; i < text.size();) {
      size_t len = std::min(max_user_len_, text.size() - i);
      for (; len > 0; --len) {
        if (user_.count(text.substr(i, len))) break;
      }
      if (len == 0) {
        frag += text[i++];
        continue;
      }
      EncodeFragment(frag, &ids);
      frag.clear();
      ids.push_back(user_.at(text.substr(i, len)));
      i += len;
    }
    EncodeFragment(frag, &ids);
    return ids;
  }

 private:
  void EncodeFragment(const std::string& text, std::vector<int32_t>* ids) const {
    size_t i = 0;
    while (i < text.size()) {
      const bool nl = text[i] == '\n';
      size_t j = i;
      while (j < text.size() && (text[j] == '\n') == nl) ++j;
      std::string run = text.substr(i, j - i);
      i = j;
      if (nl && id_.count(run)) {
        ids->push_back(id_.at(run));
        continue;
      }
      std::string escaped;
      for (char c : run) escaped += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
      EncodeRun(escaped, ids);
    }
  }

  void EncodeRun(const std::string& text, std::vector<int32_t>* ids) const {
    std::vector<std::string> sym;
    for (size_t i = 0; i < text.size();) {
      const auto c = static_cast<unsigned char>(text[i]);
      const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      const std::string ch = text.substr(i, len);
      i += len;
      if (id_.count(ch)) {
        sym.push_back(ch);
        continue;
      }
      for (unsigned char b : ch) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        sym.push_back(buf);
      }
    }
    while (true) {
      int best = -1, best_rank = 0;
      for (size_t k = 0; k + 1 < sym.size(); ++k) {
        auto it = rank_.find({sym[k], sym[k + 1]});
        if (it != rank_.end() && (best < 0 || it->second < best_rank)) {
          best = static_cast<int>(k);
          best_rank = it->second;
        }
      }
      if (best < 0) break;
      sym[best] += sym[best + 1];
      sym.erase(sym.begin() + best + 1);
    }
    for (const auto& s : sym) ids->push_back(id_.at(s));
  }

  std::unordered_map<std::string, int32_t> id_, user_;
  std::map<std::pair<std::string, std::string>, int> rank_;
  size_t max_user_len_ = 0;
};

}  // namespace kvshare::testing
