// The --kv-dtype option (tools/kv_options.h): the command line takes the
// names KvCacheDTypeFromName (kvshare/common/tensor.h) takes, as the Python module
// does, and refuses others at parse with the accepted names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv_options.h"
#include "kvshare/common/error.h"

namespace kvshare::cli {
namespace {

// Parses `--kv-dtype value` and returns the value the option stored.
std::string Parse(const std::string& value) {
  CLI::App app{"test"};
  std::string dtype = "f32";
  AddKvDtypeOption(app, dtype);
  std::vector<const char*> argv = {"kvshare", "--kv-dtype", value.c_str()};
  app.parse(static_cast<int>(argv.size()), argv.data());
  return dtype;
}

TEST(KvDtypeOption, TakesShortAndFullNames) {
  EXPECT_EQ(ParseKvDtype(Parse("f16")), DType::kFloat16);
  EXPECT_EQ(ParseKvDtype(Parse("float16")), DType::kFloat16);
  EXPECT_EQ(ParseKvDtype(Parse("bf16")), DType::kBFloat16);
  EXPECT_EQ(ParseKvDtype(Parse("bfloat16")), DType::kBFloat16);
  EXPECT_EQ(ParseKvDtype(Parse("q8_0")), DType::kQ8_0);
  EXPECT_EQ(ParseKvDtype(Parse("float32")), DType::kFloat32);
}

TEST(KvDtypeOption, RefusesOtherNamesListingTheAccepted) {
  try {
    Parse("int8");
    FAIL() << "--kv-dtype int8 was accepted";
  } catch (const CLI::ValidationError& e) {
    EXPECT_STREQ(e.what(),
                 "--kv-dtype: KV cache dtype 'int8' is not one of float32 (f32), float16 (f16), bfloat16 (bf16), q8_0");
  }
  try {
    ParseKvDtype("int8");
    FAIL() << "ParseKvDtype(\"int8\") returned";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--kv-dtype 'int8' is not one of float32 (f32), float16 (f16), bfloat16 (bf16), q8_0");
  }
}

}  // namespace
}  // namespace kvshare::cli
