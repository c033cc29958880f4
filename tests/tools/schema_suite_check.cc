// Runs documents through CompileJsonSchema's grammar, for
// tests/python/test_json_schema_suite.py (the official JSON-Schema-Test-Suite)
// and tests/tools/schema_corpus.py (real-world schemas).
// stdin: one JSON object a line, {"schema": <schema>, "docs": ["text", ...]}
// and/or {"samples": N, "seed": S, "max_bytes": B};
// stdout: one line each, {"error": "..."} when the schema does not compile,
// else {"accepted": [bool, ...]}: whether the matcher takes each document byte
// by byte and may end after it, and {"samples": ["text", ...], "unfinished":
// k}: N random walks through the matcher's masks (k of them still open after
// B bytes, left out), {"compile_us": t}.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"

namespace {

// One random document: a uniformly random allowed byte each step, ending as
// soon as allowed with probability 1/4; past max_bytes / 8 the bytes that
// close a string, array or object are preferred, so walks end instead of
// growing. Empty when the walk is still open after max_bytes.
std::string Sample(const std::shared_ptr<const kvshare::Grammar>& grammar,
                   const std::shared_ptr<const kvshare::TokenTrie>& vocab, std::mt19937_64& rng, int max_bytes) {
  kvshare::GrammarMatcher m(grammar, vocab, {0});
  std::vector<std::uint64_t> mask(5);
  std::string text;
  std::vector<int> allowed;
  while (static_cast<int>(text.size()) < max_bytes) {
    m.FillNextTokenMask(mask);
    allowed.clear();
    for (int id = 1; id < 257; ++id) {
      if (mask[static_cast<std::size_t>(id / 64)] >> (id % 64) & 1) allowed.push_back(id);
    }
    const bool can_end = mask[0] & 1;
    const bool closing = static_cast<int>(text.size()) > max_bytes / 8;
    if (can_end && (allowed.empty() || closing || rng() % 4 == 0)) return text;
    if (allowed.empty()) break;
    int pick = allowed[rng() % allowed.size()];
    if (closing) {
      for (char c : std::string("\"]}0")) {
        const int id = static_cast<unsigned char>(c) + 1;
        if (std::find(allowed.begin(), allowed.end(), id) != allowed.end()) {
          pick = id;
          break;
        }
      }
    }
    if (!m.AcceptToken(pick)) break;
    text.push_back(static_cast<char>(pick - 1));
  }
  return {};
}

}  // namespace

int main() {
  std::vector<std::string> bytes(257);  // token 0 ends, token b + 1 is byte b
  for (int b = 0; b < 256; ++b) bytes[static_cast<std::size_t>(b) + 1] = std::string(1, static_cast<char>(b));
  const auto vocab = std::make_shared<const kvshare::TokenTrie>(bytes);
  std::string line;
  while (std::getline(std::cin, line)) {
    const nlohmann::json in = nlohmann::json::parse(line);
    nlohmann::json out;
    try {
      const std::string schema = in.at("schema").dump();
      const auto t0 = std::chrono::steady_clock::now();
      const auto grammar = kvshare::CompileJsonSchema(schema);
      out["compile_us"] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      out["accepted"] = nlohmann::json::array();
      for (const auto& doc : in.value("docs", nlohmann::json::array())) {
        kvshare::GrammarMatcher m(grammar, vocab, {0});
        const std::string text = doc.get<std::string>();
        bool ok = true;
        for (char c : text) {
          if (!(ok = m.AcceptToken(static_cast<unsigned char>(c) + 1))) break;
        }
        out["accepted"].push_back(ok && m.CanEnd());
      }
      if (in.contains("samples")) {
        std::mt19937_64 rng(in.value("seed", 0ULL));
        const int max_bytes = in.value("max_bytes", 4096);
        int unfinished = 0;
        out["samples"] = nlohmann::json::array();
        for (int i = 0; i < in.at("samples").get<int>(); ++i) {
          std::string s = Sample(grammar, vocab, rng, max_bytes);
          if (s.empty()) {
            ++unfinished;
          } else {
            out["samples"].push_back(std::move(s));
          }
        }
        out["unfinished"] = unfinished;
      }
    } catch (const kvshare::Error& e) {
      out = {{"error", e.what()}};
    }
    std::string text;
    try {
      text = out.dump();
    } catch (const nlohmann::json::type_error&) {  // a sample that is not UTF-8: an invalid output
      text = nlohmann::json{{"accepted", out["accepted"]}, {"not_utf8", true}}.dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    std::cout << text << "\n" << std::flush;
  }
  return 0;
}
