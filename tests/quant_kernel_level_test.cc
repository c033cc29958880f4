// SetMatMulKernel (kvshare/quant/kernel_level.h): the process's matmul level
// switched at run time, as `kvshare bench --kernels` does between runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/float_convert.h"
#include "kvshare/common/error.h"
#include "kvshare/quant/kernel_level.h"
#include "quant/quant.h"

namespace kvshare {
namespace {

constexpr KernelLevel kLevels[] = {KernelLevel::kScalar, KernelLevel::kAvx2, KernelLevel::kAvx512Vnni,
                                   KernelLevel::kAmx, KernelLevel::kFloat};

// Puts the process's level back when a test ends.
class LevelGuard {
 public:
  LevelGuard() : start_(MatMulKernelName()) {}
  ~LevelGuard() { SetMatMulKernel(start_); }
  LevelGuard(const LevelGuard&) = delete;
  LevelGuard& operator=(const LevelGuard&) = delete;

 private:
  std::string start_;
};

// SetMatMulKernel(name)'s error message, or "" when it did not throw.
std::string ErrorOf(const std::string& name) {
  try {
    SetMatMulKernel(name);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KernelLevel, SetMatMulKernelSwitchesTheDefaultLevel) {
  const LevelGuard guard;
  int available = 0;
  for (KernelLevel l : kLevels) {
    if (!KernelLevelAvailable(l)) {
      const KernelLevel before = DefaultKernelLevel();
      const std::string msg = ErrorOf(KernelLevelName(l));
      EXPECT_NE(msg.find("cannot run on this CPU or build"), std::string::npos) << msg;
      EXPECT_EQ(DefaultKernelLevel(), before);
      continue;
    }
    ++available;
    SetMatMulKernel(KernelLevelName(l));
    EXPECT_EQ(DefaultKernelLevel(), l);
    EXPECT_STREQ(MatMulKernelName(), KernelLevelName(l));
    EXPECT_EQ(MatMulParams{}.level, l);  // what every product without an explicit level takes
  }
  EXPECT_GE(available, 2);  // scalar and float run everywhere
  if (KernelLevelAvailable(KernelLevel::kAvx512Vnni)) {
    SetMatMulKernel("avx512");  // KVSHARE_KERNEL's alias
    EXPECT_EQ(DefaultKernelLevel(), KernelLevel::kAvx512Vnni);
  }
}

TEST(KernelLevel, SetMatMulKernelRejectsOtherNamesAndKeepsTheLevel) {
  const LevelGuard guard;
  SetMatMulKernel("scalar");
  for (const char* bad : {"avx1024", "", "AMX", "amx,avx2"}) {
    const std::string msg = ErrorOf(bad), expected = std::string("'").append(bad).append("' is not a kernel level");
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
    EXPECT_NE(msg.find("this process can run: scalar"), std::string::npos) << msg;
    EXPECT_EQ(DefaultKernelLevel(), KernelLevel::kScalar);
  }
}

// A product after a switch runs at the new level: MatMul without a level
// gives bitwise what MatMul at that level named explicitly gives, and the
// float level (no activation rounding) differs from the scalar one on the
// same Q4_0 matrix.
TEST(KernelLevel, ProductsAfterASwitchRunAtTheNewLevel) {
  const LevelGuard guard;
  constexpr std::int64_t kRows = 16, kCols = 64;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<BlockQ4_0> blocks(kRows * kCols / 32);
  for (BlockQ4_0& b : blocks) {
    b.d = detail::F32ToF16(0.05f + 0.1f * std::abs(u(rng)));
    for (std::uint8_t& q : b.qs) q = static_cast<std::uint8_t>(code(rng));
  }
  std::vector<float> x(kCols);
  for (float& v : x) v = u(rng);
  const WeightMatrix w = WeightMatrix::Make(blocks.data(), GgmlType::kQ4_0, kRows, kCols);
  const auto product = [&](bool explicit_level, KernelLevel level) {
    std::vector<float> y(kRows);
    MatMulParams p{.x = x.data(), .m = 1, .y = y.data()};
    if (explicit_level) p.level = level;
    MatMul(w, p);
    return y;
  };
  SetMatMulKernel("float");
  const std::vector<float> by_float = product(false, KernelLevel::kFloat);
  EXPECT_EQ(by_float, product(true, KernelLevel::kFloat));
  SetMatMulKernel("scalar");
  const std::vector<float> by_scalar = product(false, KernelLevel::kScalar);
  EXPECT_EQ(by_scalar, product(true, KernelLevel::kScalar));
  EXPECT_NE(by_scalar, by_float);
}

}  // namespace
}  // namespace kvshare
