// StoreRowFromFloat (the SIMD cache-row store) against StoreFromFloat element
// by element, bitwise: random values, half-way cases of fp16 rounding,
// subnormals, overflow to inf, infinities and NaN, at row lengths that leave
// every tail size; q8_0 against QuantizeRowQ8_0 at its block.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attention/store_rows.h"
#include "common/float_convert.h"
#include "common/q8_0.h"

namespace kvshare {
namespace {

std::vector<float> SpecialValues(std::mt19937& rng) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          1e6f,
                          -1e6f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::nanf(""),
                          -std::nanf(""),
                          6.1e-5f,
                          5.96e-8f,
                          2.98e-8f,
                          2.99e-8f,
                          1e-9f,
                          -3e-6f};
  // Exactly half-way between two fp16 values (ties to even), normal and subnormal.
  for (int k = 0; k < 40; ++k) {
    const std::uint16_t h = static_cast<std::uint16_t>(rng() & 0x7BFF);
    const float a = detail::F16ToF32(h), b = detail::F16ToF32(static_cast<std::uint16_t>(h + 1));
    v.push_back((a + b) / 2);
    v.push_back(-(a + b) / 2);
  }
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int k = 0; k < 200; ++k) v.push_back(nd(rng));
  for (int k = 0; k < 200; ++k) {
    const std::uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  return v;
}

TEST(StoreRows, MatchesElementStoresBitwise) {
  std::mt19937 rng(3);
  const std::vector<float> pool = SpecialValues(rng);
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (std::int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 64, 100, 256, 301}) {
      std::vector<float> x(static_cast<std::size_t>(n));
      for (auto& f : x) f = pool[rng() % pool.size()];
      const std::int64_t base = 5;
      std::vector<std::uint8_t> want(static_cast<std::size_t>((n + base) * 4), 0xAB), got(want);
      for (std::int64_t i = 0; i < n; ++i)
        detail::StoreFromFloat(want.data(), dt, base + i, x[static_cast<std::size_t>(i)]);
      detail::StoreRowFromFloat(got.data(), dt, base, x.data(), n);
      ASSERT_EQ(want, got) << "dtype " << static_cast<int>(dt) << " n " << n;
    }
  }
}

// q8_0: the row's blocks land at the block holding element `base`.
TEST(StoreRows, Q8_0RowsAtTheirBlock) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  std::vector<float> x(96);
  for (auto& f : x) f = nd(rng);
  std::vector<std::uint8_t> want(5 * 34, 0xAB), got(want);
  detail::QuantizeRowQ8_0(x.data(), 96, want.data() + 2 * 34);  // elements 64 .. 159: blocks 2, 3, 4
  detail::StoreRowFromFloat(got.data(), DType::kQ8_0, 64, x.data(), 96);
  EXPECT_EQ(want, got);
}

}  // namespace
}  // namespace kvshare
