// The AMX level's tile kernels (kernels/amx/: packed_q32.cc, packed_k.cc,
// iq.cc) against the AVX-512 ones on the same (packed) matrices, bit for
// bit: both form the same exact integers per block (per super-block) and the
// same float steps (kernels/dispatch.h). Skips where AMX is not usable.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "common/float_convert.h"
#include "common_record_measured.h"
#include "kvshare/common/thread_pool.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"
#include "quant/quant.h"
#include "quant/quant_iq.h"

namespace kvshare {
namespace {

// Random weights [rows, cols] (packable types, the IQ1-IQ3 grid types): every code, scale and min byte
// random, d (and dmin) fp16 in (-0.02, 0.02) (dmin positive, as the
// quantizers make it); MXFP4's E8M0 scale 2^-10 .. 2^-3.
struct RandomMatMul {
  std::vector<std::uint8_t> wbytes;
  WeightMatrix w;
  std::vector<float> x;  // [m, cols], normal
  RandomMatMul(GgmlType t, std::int64_t rows, std::int64_t cols, std::int64_t m, std::mt19937& rng)
      : wbytes(static_cast<std::size_t>(rows * cols / GgmlBlockSize(t) * GgmlBlockBytes(t))),
        x(static_cast<std::size_t>(m * cols)) {
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
        case GgmlType::kQ6_K: put(offsetof(BlockQ6_K, d), scale(rng)); break;
        case GgmlType::kMXFP4: wbytes[at] = static_cast<std::uint8_t>(118 + byte(rng) % 8); break;
        case GgmlType::kIQ1_M: {  // d's fp16 bits are the top nibbles of the four scale words
          const std::uint16_t h = detail::F32ToF16(scale(rng));
          for (int k = 0; k < 4; ++k) {
            std::uint8_t& top = wbytes[at + offsetof(BlockIQ1_M, scales) + 2 * k + 1];
            top = static_cast<std::uint8_t>((top & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
          }
          break;
        }
        default: put(0, scale(rng)); break;  // Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS, the other IQ: d first
      }
    }
    w = WeightMatrix::Make(wbytes.data(), t, rows, cols);
    std::normal_distribution<float> nd;
    for (auto& v : x) v = nd(rng);
  }
};

// Outputs y of c's weights (as in c.wbytes) against activations x in
// [1, 1.05) or its negative, each int8 activation off by at most amax / 254:
// within that bound (plus fp32 rounding) of the float64 product.
void ExpectWithinActivationRounding(const RandomMatMul& c, std::int64_t m, const std::vector<float>& y,
                                    const char* what) {
  const std::int64_t rows = c.w.rows, cols = c.w.cols;
  std::vector<float> wrow(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    DequantizeRow(c.w.type, c.wbytes.data() + static_cast<std::size_t>(r) * c.w.row_bytes, wrow.data(), cols);
    for (std::int64_t i = 0; i < m; ++i) {
      double ref = 0.0, wsum = 0.0, amax = 0.0;
      for (std::int64_t k = 0; k < cols; ++k) {
        ref += static_cast<double>(wrow[k]) * c.x[i * cols + k];
        wsum += std::fabs(wrow[k]);
        amax = std::fmax(amax, std::fabs(c.x[i * cols + k]));
      }
      ASSERT_NEAR(y[static_cast<std::size_t>(i * rows + r)], ref, amax / 254.0 * wsum * 1.0001 + 1e-5 * amax * wsum)
          << GgmlTypeName(c.w.type) << what << ", row " << r << " x-row " << i;
    }
  }
}

// c's weights packed, m activation rows: the AMX level's outputs memcmp-
// equal to the AVX-512 level's; returns them (*compared += their count).
std::vector<float> CheckBitwise(const RandomMatMul& c, std::int64_t m, ThreadPool* p, const char* what, int* compared) {
  WeightMatrix packed = c.w;
  packed.packed = detail::Pack(c.w.data, c.w.type, c.w.rows, c.w.cols / GgmlBlockSize(c.w.type));
  std::vector<float> want(static_cast<std::size_t>(m * c.w.rows)), got(want.size(), NAN);
  MatMul(packed, {.x = c.x.data(), .m = m, .y = want.data(), .pool = p, .level = KernelLevel::kAvx512Vnni});
  MatMul(packed, {.x = c.x.data(), .m = m, .y = got.data(), .pool = p, .level = KernelLevel::kAmx});
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
      << GgmlTypeName(c.w.type) << " rows " << c.w.rows << " cols " << c.w.cols << " m " << m << what;
  *compared += static_cast<int>(want.size());
  return got;
}

// The AMX kernel over packed K-quants (amx/packed_k.cc) forms the AVX-512
// kernel's integers with tile products: its outputs must be kAvx512Vnni's on
// the same packed matrix bit for bit, for every activation row count (m =
// 1 .. 130 on one shape: the AVX-512 kernel below 9 rows, whole and
// zero-padded 16-row tiles, all rows in one call), on 1 and 3 threads. Also on
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
    return CheckBitwise(c, m, p, what, &compared);
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
      ExpectWithinActivationRounding(c, m, y, fill == 0xFF ? " extreme blocks 0xFF" : " extreme blocks 0x00");
    }
  }
  testing::RecordMeasured("AMX K-quant outputs compared bitwise: %d\n", compared);
}

// The AMX level (tile products of 16 activation rows, kernels/amx/) against
// the AVX-512 VNNI level on the same packed matrices, bitwise: every packed
// 32-element type, every activation row count from 1 to 130 on one shape
// (below 16 rows the AVX-512 kernel runs; from 16 the tiles, all rows in one
// call, with a zero-padded last chunk), more shapes (1 to 20
// blocks, 16 to 160 rows) at the chunk edges, 1 and 3 threads; and extreme
// blocks (every byte 0xFF: the largest codes and scales) against activations
// of one sign at full scale, also against a float64 product; and the two
// tile kernel families alternating on the same threads (MatMulMany).
TEST(MatMul, AmxMatchesAvx512Bitwise) {
  if (!KernelLevelAvailable(KernelLevel::kAmx)) GTEST_SKIP() << "no usable AMX on this CPU / OS";
  std::mt19937 rng(48);
  ThreadPool pool(3);
  int compared = 0;
  const auto check = [&](const RandomMatMul& c, std::int64_t m, ThreadPool* p) {
    return CheckBitwise(c, m, p, "", &compared);
  };
  for (GgmlType t :
       {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ5_0, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS, GgmlType::kMXFP4}) {
    const std::int64_t bs = GgmlBlockSize(t);
    for (std::int64_t m = 1; m <= 130; ++m) {
      const RandomMatMul c(t, 48, 3 * bs, m, rng);
      check(c, m, m % 2 == 0 ? &pool : nullptr);
    }
    for (std::int64_t nblk : {1, 2, 7, 20}) {
      for (std::int64_t rows : {16, 160}) {
        for (std::int64_t m : {15, 16, 17, 32, 33, 64, 65, 100}) {
          const RandomMatMul c(t, rows, nblk * bs, m, rng);
          check(c, m, (m + nblk) % 2 == 0 ? &pool : nullptr);
        }
      }
    }
    // Extreme blocks: every byte 0xFF, a small positive scale (fp16 2^-10 in
    // d, or IQ4_XS's d; MXFP4's E8M0 byte 2^-8), activations in [1, 1.05).
    const std::int64_t rows = 32, nblk = 8, m = 40, cols = nblk * bs;
    RandomMatMul c(t, rows, cols, m, rng);
    std::vector<std::uint8_t> bytes(c.wbytes.size(), 0xFF);
    const std::size_t bb = static_cast<std::size_t>(GgmlBlockBytes(t));
    for (std::size_t at = 0; at < bytes.size(); at += bb) {
      if (t == GgmlType::kMXFP4) {
        bytes[at] = 120;
      } else {
        bytes[at] = 0x00;
        bytes[at + 1] = 0x14;
      }
    }
    c.wbytes = bytes;
    c.w = WeightMatrix::Make(c.wbytes.data(), t, rows, cols);
    for (auto& v : c.x) v = 1.0f + 0.01f * std::fabs(v);
    ExpectWithinActivationRounding(c, m, check(c, m, &pool), " extreme blocks");
  }
  // Both tile kernel families in one MatMulMany, on the calling thread and
  // on 3 (each thread's tile configuration switches between them), against
  // the AVX-512 level.
  const std::int64_t cols = 512, m = 40;
  const GgmlType mixed[] = {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_0, GgmlType::kQ6_K, GgmlType::kQ8_0};
  std::vector<RandomMatMul> mats;
  for (GgmlType t : mixed) mats.emplace_back(t, 48, cols, m, rng);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (int round = 0; round < 2; ++round) {
      std::vector<std::vector<float>> want(mats.size()), got(mats.size());
      std::vector<MatMulTarget> tw, tg;
      for (std::size_t k = 0; k < mats.size(); ++k) {
        WeightMatrix w = mats[k].w;
        w.packed = detail::Pack(w.data, w.type, w.rows, cols / GgmlBlockSize(w.type));
        want[k].assign(static_cast<std::size_t>(m * 48), NAN);
        got[k].assign(want[k].size(), NAN);
        tw.push_back({.w = w, .y = want[k].data()});
        tg.push_back({.w = w, .y = got[k].data()});
      }
      MatMulMany({.x = mats[0].x.data(), .m = m, .targets = tw, .pool = p, .level = KernelLevel::kAvx512Vnni});
      MatMulMany({.x = mats[0].x.data(), .m = m, .targets = tg, .pool = p, .level = KernelLevel::kAmx});
      for (std::size_t k = 0; k < mats.size(); ++k) {
        EXPECT_EQ(0, std::memcmp(want[k].data(), got[k].data(), want[k].size() * 4))
            << "MatMulMany target " << k << " " << GgmlTypeName(mixed[k]);
      }
    }
  }
  testing::RecordMeasured("AMX outputs compared bitwise with AVX-512: %d\n", compared);
}

// Long rows take fewer activation rows a call (AmxActRowsPerCall: their
// staged bytes within kAmxStageBytes): at 12288 columns a product of 130 rows
// is three calls (64, 64 and 2 rows, the last on the AVX-512 kernel, below
// the tiles' tail), and every call boundary keeps the outputs bitwise the
// VNNI level's, for both tile kernel families, on 1 and 3 threads.
TEST(MatMul, AmxLongRowsSplitCallsMatchAvx512Bitwise) {
  EXPECT_EQ(detail::AmxActRowsPerCall(640), detail::kMaxAmxActRows);
  EXPECT_EQ(detail::AmxActRowsPerCall(3072), 256);
  EXPECT_EQ(detail::AmxActRowsPerCall(6144), 128);
  EXPECT_EQ(detail::AmxActRowsPerCall(12288), 64);
  EXPECT_EQ(detail::AmxActRowsPerCall(100000), 16);  // 7 rows of budget: one tile at least
  if (!KernelLevelAvailable(KernelLevel::kAmx)) GTEST_SKIP() << "no usable AMX on this CPU / OS";
  std::mt19937 rng(49);
  ThreadPool pool(3);
  int compared = 0;
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ5_0, GgmlType::kQ8_0}) {
    const RandomMatMul c(t, 32, 12288, 130, rng);  // m <= 130: the first m activation rows
    for (std::int64_t m : {64, 65, 80, 130}) CheckBitwise(c, m, m % 2 == 0 ? &pool : nullptr, " long rows", &compared);
  }
  EXPECT_EQ(compared, 4 * 32 * (64 + 65 + 80 + 130));
}

// The AMX kernel of the IQ1-IQ3 grid types (amx/iq.cc) forms the scalar
// twin's exact block sums with tile products (the scales folded into the
// weights) and its fma per block: its outputs must be kScalar's and
// kAvx512Vnni's bit for bit, for every activation row count (m = 1 .. 70 on
// one shape: the AVX-512 kernel below 17 rows and for the rows past the last
// 16-row tile, zero-padded chunks, a call of 64 rows and one of 6), on 1 and
// 3 threads. Also on extreme blocks (every byte 0xFF: the largest grid
// indices and scales, every sign negative, a small positive d) against
// activations of one sign at full scale, also against a float64 product.
TEST(MatMul, AmxIqMatchesAvx512AndScalarBitwise) {
  if (!KernelLevelAvailable(KernelLevel::kAmx)) GTEST_SKIP() << "no usable AMX on this CPU / OS";
  std::mt19937 rng(29);
  ThreadPool pool(3);
  int compared = 0;
  const auto check = [&](const RandomMatMul& c, std::int64_t m, ThreadPool* p, const char* what) {
    std::vector<float> ys(static_cast<std::size_t>(m * c.w.rows), NAN), yv(ys.size(), NAN), ya(ys.size(), NAN);
    MatMul(c.w, {.x = c.x.data(), .m = m, .y = ys.data(), .pool = p, .level = KernelLevel::kScalar});
    MatMul(c.w, {.x = c.x.data(), .m = m, .y = yv.data(), .pool = p, .level = KernelLevel::kAvx512Vnni});
    MatMul(c.w, {.x = c.x.data(), .m = m, .y = ya.data(), .pool = p, .level = KernelLevel::kAmx});
    EXPECT_EQ(0, std::memcmp(yv.data(), ya.data(), ya.size() * 4))
        << GgmlTypeName(c.w.type) << " against avx512vnni, rows " << c.w.rows << " cols " << c.w.cols << " m " << m
        << what;
    EXPECT_EQ(0, std::memcmp(ys.data(), ya.data(), ya.size() * 4))
        << GgmlTypeName(c.w.type) << " against scalar, rows " << c.w.rows << " cols " << c.w.cols << " m " << m << what;
    compared += static_cast<int>(ya.size());
    return ya;
  };
  for (GgmlType t : {GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS, GgmlType::kIQ3_S,
                     GgmlType::kIQ1_S, GgmlType::kIQ1_M}) {
    for (std::int64_t nblk = 1; nblk <= 3; ++nblk) {
      for (std::int64_t rows : {16, 21, 48}) {
        const bool every_m = nblk == 2 && rows == 48;
        const RandomMatMul c(t, rows, 256 * nblk, 70, rng);  // m <= 70: the first m activation rows
        for (std::int64_t m = 1; m <= 70; ++m) {
          if (every_m || m < 3 || m % 16 <= 1 || m % 16 == 15 || m == 70) check(c, m, m % 2 ? nullptr : &pool, "");
        }
      }
    }
    const std::int64_t rows = 37, cols = 768, m = 40;
    RandomMatMul c(t, rows, cols, m, rng);
    std::fill(c.wbytes.begin(), c.wbytes.end(), 0xFF);
    const std::size_t bb = static_cast<std::size_t>(GgmlBlockBytes(t));
    for (std::size_t at = 0; at < c.wbytes.size(); at += bb) {  // d: fp16 2^-10
      if (t != GgmlType::kIQ1_M) {
        c.wbytes[at] = 0x00;
        c.wbytes[at + 1] = 0x14;
      } else {
        for (int k = 0; k < 4; ++k) {
          c.wbytes[at + offsetof(BlockIQ1_M, scales) + 2 * k + 1] =
              static_cast<std::uint8_t>(0x0F | ((0x1400 >> (4 * k)) & 0xF) << 4);
        }
      }
    }
    c.w = WeightMatrix::Make(c.wbytes.data(), t, rows, cols);
    for (auto& v : c.x) v = 1.0f + 0.01f * std::fabs(v);
    ExpectWithinActivationRounding(c, m, check(c, m, &pool, " extreme blocks"), " extreme blocks");
  }
  testing::RecordMeasured("AMX IQ outputs compared bitwise with AVX-512 and scalar: %d\n", compared);
}

// Other code on a thread configures the tiles too (oneDNN's AMX kernels load
// their own configuration and release the tiles): the tile kernels must not
// trust a configuration they remember. Here the thread's tiles are given
// another shape, then released, between AMX products; each product still
// equals the AVX-512 level's.
// Palette 1, every tile 16 rows of 4 bytes.
struct alignas(64) OtherShape {
  std::uint8_t bytes[64];
};
constexpr OtherShape kOtherShape = [] {
  OtherShape c{};
  c.bytes[0] = 1;
  for (int t = 0; t < 8; ++t) {
    c.bytes[16 + 2 * t] = 4;
    c.bytes[48 + t] = 16;
  }
  return c;
}();
__attribute__((target("amx-tile"))) void ReshapeTiles() { _tile_loadconfig(&kOtherShape); }
__attribute__((target("amx-tile"))) void ReleaseTiles() { _tile_release(); }

TEST(MatMul, AmxSurvivesOtherTileUsers) {
  if (!KernelLevelAvailable(KernelLevel::kAmx)) GTEST_SKIP() << "no usable AMX on this CPU / OS";
  std::mt19937 rng(12);
  int compared = 0;
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_0, GgmlType::kQ6_K}) {
    const RandomMatMul c(t, 32, 512, 24, rng);
    CheckBitwise(c, 24, nullptr, "", &compared);
    ReshapeTiles();
    CheckBitwise(c, 24, nullptr, " after another tile shape", &compared);
    ReleaseTiles();
    CheckBitwise(c, 24, nullptr, " after tilerelease", &compared);
  }
}

}  // namespace
}  // namespace kvshare
