// The speculative decoding flags of generate, bench and serve: parsed into
// the runtime's SpeculationRequest (tools/spec_flags.h), whose errors name
// the CLI's flags.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model_test_util.h"
#include "spec_flags.h"

namespace kvshare::cli {
namespace {

// Parses `args` (after the program name) into flags; CLI11 exceptions propagate.
SpecFlags Parse(std::vector<std::string> args) {
  CLI::App app{"test"};
  SpecFlags flags;
  AddSpecFlags(app, flags);
  std::vector<const char*> argv = {"kvshare"};
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return flags;
}

// The message CheckSpecFlags throws ("(no error)" when none).
std::string CheckError(const SpecFlags& f, const std::string& device = "cpu") {
  return testing::ErrorOf([&] { CheckSpecFlags(f, device); });
}

TEST(SpecFlags, ReachTheRequest) {
  const SpeculationRequest off = SpecRequest(Parse({}));
  EXPECT_FALSE(off.enabled());
  const SpeculativeOptions defaults;
  EXPECT_EQ(off.speculative.draft_max, defaults.draft_max);
  EXPECT_EQ(off.speculative.adaptive, defaults.adaptive);
  const SpeculationRequest r = SpecRequest(
      Parse({"--spec", "ngram", "--draft-max", "5", "--draft-fixed", "--ngram-min", "1", "--ngram-max", "3"}), "cuda");
  EXPECT_EQ(r.method, "ngram");
  EXPECT_TRUE(r.draft_path.empty());
  EXPECT_EQ(r.speculative.draft_max, 5);
  EXPECT_FALSE(r.speculative.adaptive);
  EXPECT_EQ(r.ngram.ngram_min, 1);
  EXPECT_EQ(r.ngram.ngram_max, 3);
  EXPECT_EQ(r.device, Device::kCuda);
  EXPECT_EQ(SpecRequest(Parse({"--draft-model", "d.gguf"})).draft_path, "d.gguf");
  EXPECT_THROW(Parse({"--spec", "medusa"}), CLI::ValidationError);
  EXPECT_THROW(Parse({"--draft-max", "65"}), CLI::ValidationError);
}

TEST(SpecFlags, ErrorsNameTheFlags) {
  EXPECT_EQ(CheckError(Parse({}), "cuda"), "(no error)") << "no speculation: nothing to check";
  EXPECT_EQ(CheckError(Parse({"--spec", "ngram"})), "(no error)");
  EXPECT_NE(CheckError(Parse({"--spec", "ngram", "--draft-model", "d.gguf"}))
                .find("--spec ngram and --draft-model are exclusive: choose one drafter"),
            std::string::npos);
  EXPECT_EQ(CheckError(Parse({"--draft-model", "d.gguf"}), "cuda"), "(no error)")
      << "a draft model runs on the GPU too; only an assistant file is refused there";
  EXPECT_EQ(CheckError(Parse({"--spec", "ngram"}), "cuda"), "(no error)");
  EXPECT_EQ(CheckError(Parse({"--spec", "ngram", "--ngram-min", "5"})), "--ngram-max 4 is below --ngram-min 5");
}

}  // namespace
}  // namespace kvshare::cli
