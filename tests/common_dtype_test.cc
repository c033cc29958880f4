// KvCacheDTypeFromName (kvshare/common/tensor.h): the one name -> DType parser behind
// `kvshare --kv-dtype`, the Python KvCache's dtype= and Model's kv_dtype=.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "kvshare/common/error.h"
#include "kvshare/common/tensor.h"

namespace kvshare {
namespace {

std::string ErrorOf(std::string_view name, std::string_view what) {
  try {
    KvCacheDTypeFromName(name, what);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KvCacheDTypeFromName, AcceptsFullAndShortNames) {
  EXPECT_EQ(KvCacheDTypeFromName("float32"), DType::kFloat32);
  EXPECT_EQ(KvCacheDTypeFromName("f32"), DType::kFloat32);
  EXPECT_EQ(KvCacheDTypeFromName("float16"), DType::kFloat16);
  EXPECT_EQ(KvCacheDTypeFromName("f16"), DType::kFloat16);
  EXPECT_EQ(KvCacheDTypeFromName("bfloat16"), DType::kBFloat16);
  EXPECT_EQ(KvCacheDTypeFromName("bf16"), DType::kBFloat16);
  EXPECT_EQ(KvCacheDTypeFromName("q8_0"), DType::kQ8_0);
}

TEST(KvCacheDTypeFromName, EveryKvCacheDTypeParsesFromItsName) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kInt64, DType::kQ8_0}) {
    if (IsKvCacheDType(d)) {
      EXPECT_EQ(KvCacheDTypeFromName(DTypeName(d)), d) << DTypeName(d);
    } else {
      EXPECT_FALSE(ErrorOf(DTypeName(d), "dtype").empty()) << DTypeName(d);
    }
  }
}

TEST(KvCacheDTypeFromName, ErrorNamesTheOptionAndListsTheNames) {
  EXPECT_EQ(ErrorOf("int8", "kv_dtype"),
            "kv_dtype 'int8' is not one of float32 (f32), float16 (f16), bfloat16 (bf16), q8_0");
  EXPECT_EQ(ErrorOf("", "--kv-dtype"),
            "--kv-dtype '' is not one of float32 (f32), float16 (f16), bfloat16 (bf16), q8_0");
  // Exact spelling: no case folding, no surrounding blanks, no q8_0 abbreviation.
  EXPECT_NE(ErrorOf("F16", "dtype"), "");
  EXPECT_NE(ErrorOf(" f16", "dtype"), "");
  EXPECT_NE(ErrorOf("q8", "dtype"), "");
  EXPECT_EQ(ErrorOf("fp16", "KV cache dtype").rfind("KV cache dtype 'fp16' is not one of ", 0), 0u);
}

}  // namespace
}  // namespace kvshare
