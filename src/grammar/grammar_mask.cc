// TokenTrie and GrammarMatcher (kvshare/grammar/grammar.h): the vocabulary as a
// prefix trie in pre-order, walked together with the grammar's lazy DFA.
#include <algorithm>
#include <bit>
#include <limits>
#include <string>

#include "grammar/grammar_automaton.h"
#include "grammar/grammar_ir.h"
#include "grammar/lazy_grammar.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/tokenizer/tokenizer.h"

namespace kvshare {

// Nodes in pre-order: a node's subtree is [i, end[i]), its tokens
// tokens[tok_begin[i], tok_begin[i + 1]) and its subtree's tokens
// tokens[tok_begin[i], tok_begin[end[i]]). Node 0 is the root (no byte).
struct TokenTrie::Impl {
  std::int32_t vocab = 0;
  std::vector<std::uint8_t> byte;
  std::vector<std::uint16_t> depth;
  std::vector<std::uint32_t> end;
  std::vector<std::uint32_t> tok_begin;  // [nodes + 1]
  std::vector<std::int32_t> tokens;
  // Every path through the subtree, read from this node's byte on starting
  // at a character boundary, is plain JSON string content: UTF-8 (a
  // character may be cut at the path's end), no '"', '\\' or control byte.
  std::vector<std::uint8_t> plain;
  // With plain: the most characters a path through the subtree starts
  // (a cut character counts), read from this node's byte on.
  std::vector<std::uint16_t> max_chars;
  std::vector<std::string> bytes;  // per token
  int max_depth = 0;
};

namespace {

// The JSON string-content check of TokenTrie::Impl::plain as a DFA over
// UTF-8: 0 at a character boundary, 1-3 continuation bytes due, 4-7 the
// restricted second bytes after E0, ED, F0, F4. -1: not plain content.
// Must accept exactly what the compiler's `char` rule accepts without '\\'.
int PlainNext(int u, unsigned b) {
  auto cont = [&](unsigned lo, unsigned hi, int next) { return b >= lo && b <= hi ? next : -1; };
  switch (u) {
    case 0:
      if (b >= 0x20 && b <= 0x7F) return b == '"' || b == '\\' ? -1 : 0;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 4;
      if (b == 0xED) return 5;
      if (b >= 0xE1 && b <= 0xEF) return 2;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 3;
      if (b == 0xF4) return 7;
      return -1;
    case 1: return cont(0x80, 0xBF, 0);
    case 2: return cont(0x80, 0xBF, 1);
    case 3: return cont(0x80, 0xBF, 2);
    case 4: return cont(0xA0, 0xBF, 1);
    case 5: return cont(0x80, 0x9F, 1);
    case 6: return cont(0x90, 0xBF, 2);
    case 7: return cont(0x80, 0x8F, 2);
  }
  return -1;
}

void SetBit(std::span<std::uint64_t> mask, std::int32_t id) {
  mask[static_cast<std::size_t>(id) >> 6] |= std::uint64_t{1} << (id & 63);
}

}  // namespace

TokenTrie::TokenTrie(std::span<const std::string> token_bytes) : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  if (token_bytes.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw Error("TokenTrie: more than 2^31 - 1 tokens (" + std::to_string(token_bytes.size()) + ")");
  }
  t.vocab = static_cast<std::int32_t>(token_bytes.size());
  t.bytes.assign(token_bytes.begin(), token_bytes.end());
  std::vector<std::int32_t> order;
  for (std::int32_t id = 0; id < t.vocab; ++id) {
    const std::size_t n = t.bytes[static_cast<std::size_t>(id)].size();
    if (n == 0) continue;
    if (n > 65535)
      throw Error("TokenTrie: token " + std::to_string(id) + " has " + std::to_string(n) + " bytes, more than 65535");
    order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    const int c = t.bytes[static_cast<std::size_t>(a)].compare(t.bytes[static_cast<std::size_t>(b)]);
    return c < 0 || (c == 0 && a < b);
  });
  // Sorted strings give the pre-order directly: each string adds nodes for
  // its bytes past the common prefix with the one before.
  auto add_node = [&](std::uint8_t byte, std::size_t depth) {
    t.byte.push_back(byte);
    t.depth.push_back(static_cast<std::uint16_t>(depth));
    t.end.push_back(0);
    t.tok_begin.push_back(static_cast<std::uint32_t>(t.tokens.size()));
    return static_cast<std::uint32_t>(t.byte.size() - 1);
  };
  std::vector<std::uint32_t> path = {add_node(0, 0)};
  const std::string* prev = nullptr;
  for (std::int32_t id : order) {
    const std::string& s = t.bytes[static_cast<std::size_t>(id)];
    if (prev != nullptr && s == *prev) {
      t.tokens.push_back(id);  // same bytes: the node just made
      continue;
    }
    std::size_t l = 0;
    if (prev != nullptr) {
      while (l < s.size() && l < prev->size() && s[l] == (*prev)[l]) ++l;
    }
    for (std::size_t k = path.size() - 1; k > l; --k) t.end[path[k]] = static_cast<std::uint32_t>(t.byte.size());
    path.resize(l + 1);
    for (std::size_t k = l; k < s.size(); ++k) path.push_back(add_node(static_cast<std::uint8_t>(s[k]), k + 1));
    t.tokens.push_back(id);
    t.max_depth = std::max<int>(t.max_depth, static_cast<int>(s.size()));
    prev = &s;
  }
  for (std::uint32_t p : path) t.end[p] = static_cast<std::uint32_t>(t.byte.size());
  t.tok_begin.push_back(static_cast<std::uint32_t>(t.tokens.size()));
  // plain[i] from the children up (children follow their parent in pre-order).
  const std::size_t n = t.byte.size();
  std::vector<std::uint8_t> ok(n, 0);  // bit u: the subtree is plain content entered in UTF-8 state u
  for (std::size_t i = n; i-- > 1;) {
    std::uint8_t bits = 0;
    for (int u = 0; u < 8; ++u) {
      const int v = PlainNext(u, t.byte[i]);
      if (v < 0) continue;
      bool all = true;
      for (std::uint32_t c = static_cast<std::uint32_t>(i) + 1; c < t.end[i] && all; c = t.end[c])
        all = (ok[c] >> v) & 1;
      if (all) bits |= static_cast<std::uint8_t>(1u << u);
    }
    ok[i] = bits;
  }
  t.plain.resize(n);
  for (std::size_t i = 0; i < n; ++i) t.plain[i] = ok[i] & 1;
  t.max_chars.assign(n, 0);
  for (std::size_t i = n; i-- > 1;) {
    unsigned most = 0;
    for (std::uint32_t c = static_cast<std::uint32_t>(i) + 1; c < t.end[i]; c = t.end[c])
      most = std::max<unsigned>(most, t.max_chars[c]);
    const bool starts = t.byte[i] < 0x80 || t.byte[i] >= 0xC0;  // not a continuation byte
    t.max_chars[i] = static_cast<std::uint16_t>(std::min<unsigned>(65535, most + (starts ? 1 : 0)));
  }
}

bool IsSpecialToken(const Tokenizer& tokenizer, std::int32_t id) {
  switch (tokenizer.Type(id)) {
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUnused: return true;
    case TokenType::kUserDefined: {
      const std::string_view text = tokenizer.TokenBytes(id);
      return text.empty() || text.find_first_not_of(" \t\n\r") != std::string_view::npos;
    }
    default: return false;
  }
}

std::shared_ptr<const TokenTrie> TokenTrie::FromTokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<std::size_t>(tokenizer.vocab_size()));
  for (std::int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!IsSpecialToken(tokenizer, id)) bytes[static_cast<std::size_t>(id)] = std::string(tokenizer.TokenBytes(id));
  }
  return std::make_shared<const TokenTrie>(bytes);
}

TokenTrie::~TokenTrie() = default;
std::int32_t TokenTrie::vocab_size() const { return impl_->vocab; }
std::size_t TokenTrie::num_nodes() const { return impl_->byte.size(); }
std::string_view TokenTrie::token_bytes(std::int32_t id) const { return impl_->bytes[static_cast<std::size_t>(id)]; }
std::span<const std::int32_t> TokenTrie::tokens_starting_with(unsigned char byte) const {
  // The root's children are the first bytes, in order; each subtree's tokens are contiguous.
  const Impl& t = *impl_;
  for (std::uint32_t c = 1; c < t.byte.size(); c = t.end[c]) {
    if (t.byte[c] == byte) {
      return std::span<const std::int32_t>(t.tokens).subspan(t.tok_begin[c], t.tok_begin[t.end[c]] - t.tok_begin[c]);
    }
  }
  return {};
}

struct GrammarMatcher::Impl {
  Impl(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> v, std::vector<std::int32_t> e)
      : grammar(std::move(g)), vocab(std::move(v)), end_tokens(std::move(e)), dfa(grammar->ir), state(dfa.initial()) {}
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenTrie> vocab;
  std::vector<std::int32_t> end_tokens;
  detail::GrammarAutomaton dfa;
  std::uint32_t state;
  bool terminated = false;
  std::vector<std::uint32_t> walk;  // DFA state per trie depth
  std::vector<std::uint64_t> mask;  // MaskLogits' scratch
  // The masks of the last few states: a mask depends on the state alone, and
  // states recur (inside an unbounded string every character returns to
  // its state; the items of an array repeat theirs); by MaskKey, so do the
  // states of a bounded string far from its bound.
  struct Cached {
    std::uint32_t state = 0;  // GrammarAutomaton::MaskKey
    std::uint64_t used = 0;
    std::vector<std::uint64_t> words;
  };
  static constexpr std::size_t kCached = 8;
  std::vector<Cached> cache;
  std::uint64_t clock = 0;
  // A lazy grammar's matcher: every method below forwards to it.
  std::unique_ptr<detail::LazyMatcher> lazy;

  bool IsEnd(std::int32_t id) const { return std::find(end_tokens.begin(), end_tokens.end(), id) != end_tokens.end(); }
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab,
                               std::vector<std::int32_t> end_tokens) {
  if (!grammar) throw Error("GrammarMatcher: the grammar is null");
  if (!vocab) throw Error("GrammarMatcher: the token trie is null");
  for (std::int32_t id : end_tokens) {
    if (id < 0 || id >= vocab->vocab_size()) {
      throw Error("GrammarMatcher: end token " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(vocab->vocab_size()) + ")");
    }
  }
  if (grammar->lazy) {
    for (const auto& [id, text] : grammar->lazy->token_text) {
      if (id < 0 || id >= vocab->vocab_size()) {
        throw Error("GrammarMatcher: token_text id " + std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(vocab->vocab_size()) + ")");
      }
    }
  }
  impl_ = std::make_unique<Impl>(grammar, vocab, end_tokens);
  if (grammar->lazy) impl_->lazy = std::make_unique<detail::LazyMatcher>(grammar, vocab, end_tokens);
}

GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

bool GrammarMatcher::CanEnd() const {
  if (impl_->lazy) return impl_->lazy->CanEnd();
  return !impl_->terminated && impl_->dfa.Accepting(impl_->state);
}
bool GrammarMatcher::Terminated() const { return impl_->lazy ? impl_->lazy->Terminated() : impl_->terminated; }
int GrammarMatcher::Triggered() const { return impl_->lazy ? impl_->lazy->Triggered() : 0; }

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  Impl& m = *impl_;
  if (m.lazy) return m.lazy->AcceptBytes(bytes);
  if (m.terminated) return false;
  std::uint32_t s = m.state;
  for (char c : bytes) {
    s = m.dfa.Next(s, static_cast<unsigned char>(c));
    if (s == detail::GrammarAutomaton::kDead) return false;
  }
  m.state = s;
  return true;
}

bool GrammarMatcher::CanAcceptBytes(std::string_view bytes) {
  Impl& m = *impl_;
  if (m.lazy) return m.lazy->CanAcceptBytes(bytes);
  if (m.terminated) return false;
  std::uint32_t s = m.state;
  for (char c : bytes) {
    s = m.dfa.Next(s, static_cast<unsigned char>(c));
    if (s == detail::GrammarAutomaton::kDead) return false;
  }
  return true;
}

bool GrammarMatcher::AcceptToken(std::int32_t id) {
  Impl& m = *impl_;
  if (id < 0 || id >= m.vocab->vocab_size()) {
    throw Error("GrammarMatcher::AcceptToken: token " + std::to_string(id) + " is outside the vocabulary [0, " +
                std::to_string(m.vocab->vocab_size()) + ")");
  }
  if (m.lazy) return m.lazy->AcceptToken(id);
  if (m.terminated) return false;
  if (m.IsEnd(id)) {
    if (!CanEnd()) return false;
    m.terminated = true;
    return true;
  }
  const std::string& b = m.vocab->impl().bytes[static_cast<std::size_t>(id)];
  return !b.empty() && AcceptBytes(b);
}

void GrammarMatcher::FillNextTokenMask(std::span<std::uint64_t> mask) {
  Impl& m = *impl_;
  if (m.lazy) return m.lazy->FillNextTokenMask(mask);
  const TokenTrie::Impl& t = m.vocab->impl();
  const std::size_t words = (static_cast<std::size_t>(t.vocab) + 63) / 64;
  if (mask.size() != words) {
    throw Error("GrammarMatcher::FillNextTokenMask: the mask has " + std::to_string(mask.size()) + " words, expected " +
                std::to_string(words) + " for " + std::to_string(t.vocab) + " tokens");
  }
  std::fill(mask.begin(), mask.end(), 0);
  if (m.terminated) return;
  // Tokens have at most max_depth bytes: fewer than max_depth + 1.
  const std::uint32_t key = m.dfa.MaskKey(m.state, static_cast<std::uint32_t>(t.max_depth) + 1);
  for (Impl::Cached& c : m.cache) {
    if (c.state == key) {
      c.used = ++m.clock;
      std::copy(c.words.begin(), c.words.end(), mask.begin());
      return;
    }
  }
  m.walk.resize(static_cast<std::size_t>(t.max_depth) + 1);
  m.walk[0] = m.state;
  const std::uint32_t n = static_cast<std::uint32_t>(t.byte.size());
  for (std::uint32_t i = 1; i < n;) {
    const std::uint32_t parent = m.walk[t.depth[i] - 1u];
    if (t.plain[i] && t.max_chars[i] <= m.dfa.StringCapacity(parent)) {
      // All of the subtree is string content that fits: every token in it stays live.
      for (std::uint32_t k = t.tok_begin[i]; k < t.tok_begin[t.end[i]]; ++k) SetBit(mask, t.tokens[k]);
      i = t.end[i];
      continue;
    }
    const std::uint32_t s = m.dfa.Next(parent, t.byte[i]);
    if (s == detail::GrammarAutomaton::kDead) {
      i = t.end[i];
      continue;
    }
    m.walk[t.depth[i]] = s;
    for (std::uint32_t k = t.tok_begin[i]; k < t.tok_begin[i + 1]; ++k) SetBit(mask, t.tokens[k]);
    ++i;
  }
  // End tokens: exactly when the document is complete, whatever their bytes.
  const bool can_end = m.dfa.Accepting(m.state);
  for (std::int32_t id : m.end_tokens) {
    const std::uint64_t bit = std::uint64_t{1} << (id & 63);
    std::uint64_t& w = mask[static_cast<std::size_t>(id) >> 6];
    w = can_end ? (w | bit) : (w & ~bit);
  }
  if (m.cache.size() < Impl::kCached) m.cache.emplace_back();
  Impl::Cached& slot = *std::min_element(m.cache.begin(), m.cache.end(),
                                         [](const Impl::Cached& a, const Impl::Cached& b) { return a.used < b.used; });
  slot.state = key;
  slot.used = ++m.clock;
  slot.words.assign(mask.begin(), mask.end());
}

void GrammarMatcher::MaskLogits(std::span<float> logits) {
  Impl& m = *impl_;
  if (logits.size() != static_cast<std::size_t>(m.vocab->vocab_size())) {
    throw Error("GrammarMatcher::MaskLogits: " + std::to_string(logits.size()) + " logits for a vocabulary of " +
                std::to_string(m.vocab->vocab_size()) + " tokens");
  }
  m.mask.resize((logits.size() + 63) / 64);
  FillNextTokenMask(m.mask);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::size_t full = logits.size() / 64;
  for (std::size_t w = 0; w < full; ++w) {
    float* x = logits.data() + w * 64;
    if (m.mask[w] == 0) {
      std::fill(x, x + 64, kNegInf);
      continue;
    }
    for (std::uint64_t off = ~m.mask[w]; off != 0; off &= off - 1) x[std::countr_zero(off)] = kNegInf;
  }
  for (std::size_t i = full * 64; i < logits.size(); ++i) {
    if (!((m.mask[full] >> (i - full * 64)) & 1)) logits[i] = kNegInf;
  }
}

}  // namespace kvshare
