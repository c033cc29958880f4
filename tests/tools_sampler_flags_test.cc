// kvshare generate's sampling flags: parsing, range checks, and that the
// values reach the Sampler (tools/sampler_flags.h).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kvshare/runtime/sampler.h"
#include "sampler_flags.h"

namespace kvshare::cli {
namespace {

// Parses `args` (after the program name) into flags; CLI11 exceptions propagate.
SamplerFlags Parse(std::vector<std::string> args) {
  CLI::App app{"test"};
  SamplerFlags flags;
  AddSamplerFlags(app, flags);
  std::vector<const char*> argv = {"kvshare"};
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return flags;
}

TEST(SamplerFlags, DefaultsAreTheSamplerDefaults) {
  const SamplerOptions got = ToSamplerOptions(Parse({}));
  const SamplerOptions want;
  EXPECT_EQ(got.temperature, want.temperature);
  EXPECT_EQ(got.top_k, want.top_k);
  EXPECT_EQ(got.top_p, want.top_p);
  EXPECT_EQ(got.min_p, want.min_p);
  EXPECT_EQ(got.repetition_penalty, want.repetition_penalty);
  EXPECT_EQ(got.repeat_last_n, want.repeat_last_n);
  EXPECT_EQ(got.presence_penalty, want.presence_penalty);
  EXPECT_EQ(got.frequency_penalty, want.frequency_penalty);
  EXPECT_EQ(got.seed, want.seed);
}

TEST(SamplerFlags, EveryFlagReachesSamplerOptions) {
  const SamplerOptions o = ToSamplerOptions(Parse(
      {"--temp", "0.7", "--top-k", "40", "--top-p", "0.9", "--min-p", "0.05", "--repeat-penalty", "1.3",
       "--repeat-last-n", "-1", "--presence-penalty", "-1.5", "--frequency-penalty", "0.25", "--seed", "12345678901"}));
  EXPECT_FLOAT_EQ(o.temperature, 0.7f);
  EXPECT_EQ(o.top_k, 40);
  EXPECT_FLOAT_EQ(o.top_p, 0.9f);
  EXPECT_FLOAT_EQ(o.min_p, 0.05f);
  EXPECT_FLOAT_EQ(o.repetition_penalty, 1.3f);
  EXPECT_EQ(o.repeat_last_n, -1);
  EXPECT_FLOAT_EQ(o.presence_penalty, -1.5f);
  EXPECT_FLOAT_EQ(o.frequency_penalty, 0.25f);
  EXPECT_EQ(o.seed, 12345678901u);
  EXPECT_NO_THROW(Sampler{o});
  // Range ends are accepted.
  EXPECT_NO_THROW(Parse({"--min-p", "0", "--top-p", "1", "--repeat-last-n", "0", "--temp", "0"}));
  EXPECT_NO_THROW(Parse({"--min-p", "1", "--repeat-penalty", "100"}));
}

TEST(SamplerFlags, OutOfRangeValuesAreRejectedWithTheFlagName) {
  const std::vector<std::vector<std::string>> bad = {
      {"--min-p", "1.5"},
      {"--min-p", "-0.1"},
      {"--min-p", "nan"},
      {"--top-p", "0"},
      {"--top-p", "1.01"},
      {"--repeat-penalty", "0"},
      {"--repeat-penalty", "-1"},
      {"--repeat-penalty", "inf"},
      {"--repeat-penalty", "x"},
      {"--repeat-last-n", "-2"},
      {"--temp", "-1"},
      {"--top-k", "-1"},
      {"--presence-penalty", "2.5"},
      {"--frequency-penalty", "-3"},
  };
  for (const auto& args : bad) {
    try {
      Parse(args);
      ADD_FAILURE() << args[0] << " " << args[1] << " was accepted";
    } catch (const CLI::ParseError& e) {
      EXPECT_NE(std::string(e.what()).find(args[0]), std::string::npos) << e.what();
    }
  }
}

// The flags change what the sampler picks.
TEST(SamplerFlags, RepeatPenaltyAndWindowReachTheSampler) {
  const std::vector<float> logits = {2.0f, 1.9f, -1.0f};
  const std::vector<int32_t> history = {0, 2, 2};  // token 0 is the third-last
  auto pick = [&](std::vector<std::string> args) {
    Sampler s(ToSamplerOptions(Parse(std::move(args))));
    return s.Sample(logits, history);
  };
  EXPECT_EQ(pick({}), 0);
  // Default window (64) covers token 0: 2.0 / 2 = 1.0 < 1.9.
  EXPECT_EQ(pick({"--repeat-penalty", "2"}), 1);
  EXPECT_EQ(pick({"--repeat-penalty", "2", "--repeat-last-n", "2"}), 0);  // window {2, 2}
  EXPECT_EQ(pick({"--repeat-penalty", "2", "--repeat-last-n", "3"}), 1);
  EXPECT_EQ(pick({"--repeat-penalty", "2", "--repeat-last-n", "0"}), 0);      // off
  EXPECT_EQ(pick({"--repeat-penalty", "2", "--repeat-last-n", "-1"}), 1);     // whole history
  EXPECT_EQ(pick({"--repeat-penalty", "1.04", "--repeat-last-n", "-1"}), 0);  // 2.0 / 1.04 > 1.9
}

TEST(SamplerFlags, MinPReachesTheSampler) {
  // p = [0.625, 0.375]: min_p 0.7 keeps only token 0 (0.375 < 0.7 * 0.625).
  const std::vector<float> logits = {0.0f, std::log(0.6f)};
  int ones_without = 0, ones_with = 0;
  Sampler without(ToSamplerOptions(Parse({"--temp", "1", "--seed", "3"})));
  Sampler with(ToSamplerOptions(Parse({"--temp", "1", "--seed", "3", "--min-p", "0.7"})));
  for (int i = 0; i < 200; ++i) {
    ones_without += without.Sample(logits) == 1;
    ones_with += with.Sample(logits) == 1;
  }
  EXPECT_GT(ones_without, 40);  // expected 75 of 200
  EXPECT_EQ(ones_with, 0);
}

}  // namespace
}  // namespace kvshare::cli
