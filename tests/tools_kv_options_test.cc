// The --kv-dtype option (tools/kv_options.h): the command line takes the
// names KvCacheDTypeFromName (kvshare/common/tensor.h) takes, as the Python module
// does, and refuses others at parse with the accepted names. And
// --attention-precision.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv_options.h"
#include "kvshare/common/error.h"
#include "kvshare/model/model.h"

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

// --attention-precision: f32 always; bf16 where the AMX tile form runs (and
// not over a q8_0 cache), else refused saying why and what to use.
TEST(AttentionPrecisionOption, Bf16WhereTheTilesRunElseAnActionableError) {
  CLI::App app{"test"};
  std::string precision = "f32";
  AddAttentionPrecisionOption(app, precision);
  std::vector<const char*> argv = {"kvshare", "--attention-precision", "fp8"};
  EXPECT_THROW(app.parse(static_cast<int>(argv.size()), argv.data()), CLI::ValidationError);
  argv.back() = "bf16";
  app.parse(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(precision, "bf16");
  EXPECT_EQ(ParseAttentionPrecision("f32", DType::kQ8_0), GqaMatMulPrecision::kF32);
  if (GqaBf16CoversCausal()) {
    EXPECT_EQ(ParseAttentionPrecision("bf16", DType::kFloat16), GqaMatMulPrecision::kBf16);
    try {
      ParseAttentionPrecision("bf16", DType::kQ8_0);
      FAIL() << "bf16 over a q8_0 cache was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--kv-dtype f16"), std::string::npos) << e.what();
    }
  } else {
    try {
      ParseAttentionPrecision("bf16", DType::kFloat16);
      FAIL() << "bf16 was accepted without the AMX tile form";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("AMX"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--attention-precision f32"), std::string::npos) << e.what();
    }
  }
}

TEST(WeightPrecisionOption, Bf16WhereTheTilesRunElseAnActionableError) {
  CLI::App app{"test"};
  std::string precision = "f32";
  AddWeightPrecisionOption(app, precision);
  std::vector<const char*> argv = {"kvshare", "--weight-precision", "fp16"};
  EXPECT_THROW(app.parse(static_cast<int>(argv.size()), argv.data()), CLI::ValidationError);
  argv.back() = "bf16";
  app.parse(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(precision, "bf16");
  EXPECT_EQ(ParseWeightPrecision("f32"), GqaMatMulPrecision::kF32);
  const std::string why = Bf16WeightsUnavailableReason();
  if (why.empty()) {
    EXPECT_EQ(ParseWeightPrecision("bf16"), GqaMatMulPrecision::kBf16);
  } else {
    try {
      ParseWeightPrecision("bf16");
      FAIL() << "bf16 weights were accepted without usable tiles";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--weight-precision f32"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kvshare::cli
