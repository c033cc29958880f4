// A vocabulary of every single byte (token id = byte + 1) and an end token 0,
// for the grammar tests that walk documents byte by byte.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvshare/grammar/grammar.h"

namespace kvshare::testing {

inline std::shared_ptr<const TokenTrie> ByteVocab() {
  std::vector<std::string> bytes(257);
  for (int b = 0; b < 256; ++b) bytes[static_cast<std::size_t>(b) + 1] = std::string(1, static_cast<char>(b));
  return std::make_shared<const TokenTrie>(bytes);
}

// Whether the grammar of the JSON Schema `schema` takes `doc` whole and may
// end after it.
inline bool Takes(const std::string& schema, const std::string& doc) {
  GrammarMatcher m(CompileJsonSchema(schema), ByteVocab(), {0});
  return m.AcceptBytes(doc) && m.CanEnd();
}

}  // namespace kvshare::testing
