// Runs documents through CompileJsonSchema's grammar, for
// tests/python/test_json_schema_suite.py (the official JSON-Schema-Test-Suite).
// stdin: one JSON object a line, {"schema": <schema>, "docs": ["text", ...]};
// stdout: one line each, {"error": "..."} when the schema does not compile,
// else {"accepted": [bool, ...]}: whether the matcher takes each document byte
// by byte and may end after it.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"

int main() {
  std::vector<std::string> bytes(257);  // token 0 ends, token b + 1 is byte b
  for (int b = 0; b < 256; ++b) bytes[static_cast<std::size_t>(b) + 1] = std::string(1, static_cast<char>(b));
  const auto vocab = std::make_shared<const kvshare::TokenTrie>(bytes);
  std::string line;
  while (std::getline(std::cin, line)) {
    const nlohmann::json in = nlohmann::json::parse(line);
    nlohmann::json out;
    try {
      const auto grammar = kvshare::CompileJsonSchema(in.at("schema").dump());
      out["accepted"] = nlohmann::json::array();
      for (const auto& doc : in.at("docs")) {
        kvshare::GrammarMatcher m(grammar, vocab, {0});
        const std::string text = doc.get<std::string>();
        bool ok = true;
        for (char c : text) {
          if (!(ok = m.AcceptToken(static_cast<unsigned char>(c) + 1))) break;
        }
        out["accepted"].push_back(ok && m.CanEnd());
      }
    } catch (const kvshare::Error& e) {
      out["error"] = e.what();
    }
    std::cout << out.dump() << "\n" << std::flush;
  }
  return 0;
}
