// Plain twin of the tokenizer's encoder for tests: SentencePiece BPE exactly as
// the spec describes it, quadratic and obvious. User-defined tokens are cut out
// first (longest match), ' ' becomes "▁", the best-scoring adjacent pair (leftmost
// on ties) whose concatenation is a NORMAL piece is merged until none is left, and
// symbols that are not pieces become <0xNN> byte tokens. No control-token parsing.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvshare/tokenizer/tokenizer.h"

namespace kvshare::testing {

class BpeTwin {
 public:
  explicit BpeTwin(const VocabData& v) : v_(v) {
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      const auto id = static_cast<int32_t>(i);
      const auto type = static_cast<TokenType>(v.token_types[i]);
      if (type == TokenType::kNormal) normal_[v.tokens[i]] = id;
      if (type == TokenType::kUserDefined) user_[v.tokens[i]] = id;
      if (type == TokenType::kByte) byte_[v.tokens[i]] = id;
      if (type == TokenType::kUserDefined && v.tokens[i].size() > max_user_len_) {
        max_user_len_ = v.tokens[i].size();
      }
    }
  }

  std::vector<int32_t> Encode(const std::string& text) const {
    std::vector<int32_t> ids;
    std::string frag;
    for (size_t i = 0; i < text.size();) {
      int32_t id = -1;
      size_t len = std::min(max_user_len_, text.size() - i);
      for (; len > 0; --len) {
        auto it = user_.find(text.substr(i, len));
        if (it != user_.end()) {
          id = it->second;
          break;
        }
      }
      if (id < 0) {
        frag += text[i++];
        continue;
      }
      EncodePlain(frag, &ids);
      frag.clear();
      ids.push_back(id);
      i += len;
    }
    EncodePlain(frag, &ids);
    return ids;
  }

 private:
  void EncodePlain(const std::string& text, std::vector<int32_t>* ids) const {
    std::vector<std::string> sym;
    for (size_t i = 0; i < text.size();) {
      if (text[i] == ' ') {
        sym.push_back("\xE2\x96\x81");
        ++i;
        continue;
      }
      const auto c = static_cast<unsigned char>(text[i]);
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      sym.push_back(text.substr(i, len));
      i += len;
    }
    while (true) {
      int best = -1;
      float best_score = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = normal_.find(sym[i] + sym[i + 1]);
        if (it == normal_.end()) continue;
        const float s = v_.scores[it->second];
        if (best < 0 || s > best_score) {
          best = static_cast<int>(i);
          best_score = s;
        }
      }
      if (best < 0) break;
      sym[best] += sym[best + 1];
      sym.erase(sym.begin() + best + 1);
    }
    for (const auto& s : sym) {
      auto it = normal_.find(s);
      if (it != normal_.end()) {
        ids->push_back(it->second);
        continue;
      }
      for (unsigned char c : s) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", c);
        ids->push_back(byte_.at(buf));
      }
    }
  }

  const VocabData& v_;
  std::unordered_map<std::string, int32_t> normal_, user_, byte_;
  size_t max_user_len_ = 0;
};

}  // namespace kvshare::testing
