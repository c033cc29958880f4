// The AMX level's kernel over packed K-quants (kernels/amx/packed_k.cc)
// against the AVX-512 one on the same packed matrices, bit for bit: both
// form one integer per super-block and the same float steps
// (kernels/dispatch.h). Skips where AMX is not usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "common/float_convert.h"
#include "common_record_measured.h"
#include "kvshare/common/thread_pool.h"
#include "quant/kernels/packed.h"
#include "quant/quant.h"

namespace kvshare {
namespace {

// Random K-quant weights [rows, cols]: every code, scale and min byte
// random, d (and dmin) fp16 in (-0.02, 0.02) (dmin positive, as the
// quantizers make it).
struct RandomMatMul {
  std::vector<std::uint8_t> wbytes;
  WeightMatrix w;
  std::vector<float> x;  // [m, cols], normal
  RandomMatMul(GgmlType t, std::int64_t rows, std::int64_t cols, std::int64_t m, std::mt19937& rng)
      : wbytes(static_cast<std::size_t>(rows * cols / 256 * GgmlBlockBytes(t))), x(static_cast<std::size_t>(m * cols)) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
    for (auto& v : wbytes) v = static_cast<std::uint8_t>(byte(rng));
    const std::size_t bb = static_cast<std::size_t>(GgmlBlockBytes(t));
    for (std::size_t at = 0; at < wbytes.size(); at += bb) {
      const auto put = [&](std::size_t off, float v) {
        const std::uint16_t h = detail::F32ToF16(v);
        std::memcpy(wbytes.data() + at + off, &h, 2);
      };
      switch (t) {
        case GgmlType::kQ4_K:
          put(offsetof(BlockQ4_K, d), scale(rng)), put(offsetof(BlockQ4_K, dmin), std::fabs(scale(rng)));
          break;
        case GgmlType::kQ2_K:
          put(offsetof(BlockQ2_K, d), scale(rng)), put(offsetof(BlockQ2_K, dmin), std::fabs(scale(rng)));
          break;
        case GgmlType::kQ3_K: put(offsetof(BlockQ3_K, d), scale(rng)); break;
        default: put(offsetof(BlockQ6_K, d), scale(rng)); break;
      }
    }
    w = WeightMatrix::Make(wbytes.data(), t, rows, cols);
    std::normal_distribution<float> nd;
    for (auto& v : x) v = nd(rng);
  }
};

// The AMX kernel over packed K-quants (amx/packed_k.cc) forms the AVX-512
// kernel's integers with tile products: its outputs must be kAvx512Vnni's on
// the same packed matrix bit for bit, for every activation row count (m =
// 1 .. 130 on one shape: the AVX-512 kernel below 4 rows, whole and
// zero-padded 16-row tiles, calls of 64 rows), on 1 and 3 threads. Also on
// extreme blocks: every code byte 0xFF or 0x00 with the largest scales
// (Q6_K: -128, whose 4096 * 127 * 256 is the tile sums' bound) against
// activations of one sign at full scale, checked against a float64 product
// as in FmaKernelsBitwiseEqualScalarTwin.
TEST(MatMul, AmxKQuantsMatchAvx512Bitwise) {
  if (!KernelLevelAvailable(KernelLevel::kAmx)) GTEST_SKIP() << "AMX not usable on this CPU / OS";
  std::mt19937 rng(43);
  ThreadPool pool(3);
  int compared = 0;
  const auto check = [&](const RandomMatMul& c, std::int64_t m, ThreadPool* p, const char* what) {
    WeightMatrix packed = c.w;
    packed.packed = detail::Pack(c.w.data, c.w.type, c.w.rows, c.w.cols / 256);
    std::vector<float> want(static_cast<std::size_t>(m * c.w.rows)), got(want.size(), NAN);
    MatMul(packed, {.x = c.x.data(), .m = m, .y = want.data(), .pool = p, .level = KernelLevel::kAvx512Vnni});
    MatMul(packed, {.x = c.x.data(), .m = m, .y = got.data(), .pool = p, .level = KernelLevel::kAmx});
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
        << GgmlTypeName(c.w.type) << " rows " << c.w.rows << " cols " << c.w.cols << " m " << m << what;
    compared += static_cast<int>(want.size());
    return got;
  };
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ3_K, GgmlType::kQ2_K}) {
    for (std::int64_t nblk = 1; nblk <= 5; ++nblk) {
      for (std::int64_t rows : {16, 48, 160}) {
        const bool every_m = nblk == 2 && rows == 48;
        const RandomMatMul c(t, rows, 256 * nblk, 130, rng);  // m <= 130: the first m activation rows
        for (std::int64_t m = 1; m <= 130; ++m) {
          if (every_m || m < 6 || m % 16 <= 1 || m % 16 == 15 || m == 130) check(c, m, m % 2 ? nullptr : &pool, "");
        }
      }
    }
    for (const std::uint8_t fill : {0xFF, 0x00}) {
      const std::int64_t rows = 32, cols = 768, m = 21;
      RandomMatMul c(t, rows, cols, m, rng);
      std::fill(c.wbytes.begin(), c.wbytes.end(), fill);
      const std::size_t bb = static_cast<std::size_t>(GgmlBlockBytes(t));
      for (std::size_t at = 0; at < c.wbytes.size(); at += bb) {
        std::uint8_t* blk = c.wbytes.data() + at;
        const auto put_d = [&](std::size_t off) {  // fp16 2^-10
          blk[off] = 0x00;
          blk[off + 1] = 0x14;
        };
        if (t == GgmlType::kQ4_K) put_d(offsetof(BlockQ4_K, d)), put_d(offsetof(BlockQ4_K, dmin));
        if (t == GgmlType::kQ2_K) put_d(offsetof(BlockQ2_K, d)), put_d(offsetof(BlockQ2_K, dmin));
        if (t == GgmlType::kQ3_K) put_d(offsetof(BlockQ3_K, d));  // scale bytes 0x00: -32
        if (t == GgmlType::kQ6_K) {
          std::memset(blk + offsetof(BlockQ6_K, scales), 0x80, 16);
          put_d(offsetof(BlockQ6_K, d));
        }
      }
      c.w = WeightMatrix::Make(c.wbytes.data(), t, rows, cols);
      const float sign = fill == 0xFF ? 1.0f : -1.0f;
      for (auto& v : c.x) v = sign * (1.0f + 0.01f * std::fabs(v));
      const std::vector<float> y = check(c, m, &pool, fill == 0xFF ? " blocks 0xFF" : " blocks 0x00");
      // x in [1, 1.05) (or its negative): each int8 activation is off by at most amax/254.
      std::vector<float> wrow(static_cast<std::size_t>(cols));
      for (std::int64_t r = 0; r < rows; ++r) {
        DequantizeRow(t, c.wbytes.data() + static_cast<std::size_t>(r) * c.w.row_bytes, wrow.data(), cols);
        for (std::int64_t i = 0; i < m; ++i) {
          double ref = 0.0, wsum = 0.0, amax = 0.0;
          for (std::int64_t k = 0; k < cols; ++k) {
            ref += static_cast<double>(wrow[k]) * c.x[i * cols + k];
            wsum += std::fabs(wrow[k]);
            amax = std::fmax(amax, std::fabs(c.x[i * cols + k]));
          }
          ASSERT_NEAR(y[static_cast<std::size_t>(i * rows + r)], ref, amax / 254.0 * wsum * 1.0001 + 1e-5 * amax * wsum)
              << GgmlTypeName(t) << " extreme blocks " << int{fill};
        }
      }
    }
  }
  testing::RecordMeasured("AMX K-quant outputs compared bitwise: %d\n", compared);
}

}  // namespace
}  // namespace kvshare
