// libFuzzer target for the JSON-Schema compiler and the grammar matcher
// (kvshare/grammar/grammar.h). The input is a schema text, a NUL byte, then bytes
// that drive a matcher over a small fixed vocabulary: a schema either
// compiles or throws kvshare::Error; the matcher must take every token of
// its own mask (and refuse, unchanged, every token outside it), agree with
// CanAcceptBytes, and allow the end token exactly when CanEnd() says so.
//   build-fuzz/tests/fuzz/schema_fuzz -max_total_time=30 corpus-schema tests/fuzz/seeds/schema
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"

namespace {

// Single bytes (all 256, so any document can be spelled), then multi-byte
// pieces of JSON as a real vocabulary has them, then one end token.
std::vector<std::string> Vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"{\"",
                        "\":",
                        "\",",
                        "\"}",
                        "true",
                        "false",
                        "null",
                        "  ",
                        "\n",
                        "12",
                        "-0",
                        ".5",
                        "e+",
                        "\\u00",
                        "\\n",
                        "é",
                        "\xf0\x9f\x98\x80",
                        "[]",
                        "{}",
                        "\"a\"",
                        "\"name\"",
                        ", "}) {
    v.emplace_back(t);
  }
  v.emplace_back();  // the end token: no bytes (a control token)
  return v;
}

const std::shared_ptr<const kvshare::TokenTrie>& Trie() {
  static const auto trie = [] {
    const std::vector<std::string> v = Vocab();
    return std::make_shared<const kvshare::TokenTrie>(v);
  }();
  return trie;
}

bool Bit(const std::vector<std::uint64_t>& mask, std::int32_t id) { return (mask[id / 64] >> (id % 64)) & 1; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = in.find('\0');
  const std::string_view schema = in.substr(0, nul);
  std::string_view drive = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
  std::shared_ptr<const kvshare::Grammar> g;
  try {
    g = kvshare::CompileJsonSchema(schema,
                                   {.max_whitespace = drive.empty() ? 8 : static_cast<unsigned char>(drive[0]) % 9});
  } catch (const kvshare::Error&) {
    return 0;
  }
  const auto& trie = Trie();
  const std::int32_t vocab = trie->vocab_size();
  const std::int32_t end = vocab - 1;
  kvshare::GrammarMatcher m(g, trie, {end});
  std::vector<std::uint64_t> mask(static_cast<std::size_t>((vocab + 63) / 64));
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  // Each drive byte: low bit 0 picks the (byte/2)-th allowed token of the
  // mask; 1 feeds the next byte as raw text (checked against CanAcceptBytes).
  for (std::size_t i = 1; i < drive.size() && !m.Terminated(); ++i) {
    m.FillNextTokenMask(mask);
    if (Bit(mask, end) != m.CanEnd()) std::abort();
    const unsigned char c = static_cast<unsigned char>(drive[i]);
    if (c & 1) {
      if (i + 1 >= drive.size()) break;
      const std::string_view b = drive.substr(++i, 1);
      const bool can = m.CanAcceptBytes(b);
      if (m.AcceptBytes(b) != can) std::abort();
      continue;
    }
    std::vector<std::int32_t> allowed;
    for (std::int32_t id = 0; id < vocab; ++id) {
      if (Bit(mask, id)) allowed.push_back(id);
    }
    if (allowed.empty()) std::abort();  // a dead end: every byte is a token, so some must continue
    const std::int32_t pick = allowed[(c >> 1) % allowed.size()];
    // A token outside the mask is refused (the state stays as it was).
    const std::int32_t other = static_cast<std::int32_t>((c * 7u + i) % static_cast<unsigned>(vocab));
    if (!Bit(mask, other) && m.AcceptToken(other)) std::abort();
    if (!m.AcceptToken(pick)) std::abort();
  }
  if (!m.Terminated()) {
    for (float& l : logits) l = 0.0f;
    m.MaskLogits(logits);
  }
  return 0;
}
