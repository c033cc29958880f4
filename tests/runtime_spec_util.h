// Test helpers for speculative decoding (runtime_speculative*_test.cc): a
// generation's tokens with the logits each was chosen from, and their
// bitwise comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kvshare/runtime/generator.h"

namespace kvshare::testing {

struct GenRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // the row each token was chosen from
  GenerateStats stats;
};

inline GenRun Generate(Generator& gen, std::span<const int32_t> prompt, GenerateOptions o) {
  GenRun r;
  o.on_token = [&](int32_t t, std::span<const float> l) {
    r.tokens.push_back(t);
    r.logits.emplace_back(l.begin(), l.end());
  };
  r.stats = gen.Generate(prompt, o, nullptr);
  return r;
}

inline void ExpectBitwiseEqual(const GenRun& plain, const GenRun& spec, const std::string& what) {
  ASSERT_EQ(spec.tokens, plain.tokens) << what;
  for (std::size_t i = 0; i < plain.logits.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(spec.logits[i].data(), plain.logits[i].data(), plain.logits[i].size() * sizeof(float)))
        << what << ": the logits of token " << i << " differ from a one-token step's";
  }
  EXPECT_EQ(spec.stats.stop_reason, plain.stats.stop_reason) << what;
  EXPECT_EQ(spec.stats.generated_tokens, plain.stats.generated_tokens) << what;
}

}  // namespace kvshare::testing
