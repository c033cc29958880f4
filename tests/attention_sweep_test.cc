// Optimized vs reference through the public op over a seeded randomized sweep
// of every KV mode, dtype and option; block sizes; thread-count independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "attention_gqa_case.h"
#include "attention_gqa_random_case.h"
#include "common/str.h"
#include "common_record_measured.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::testing {
namespace {

void ExpectClose(const Buffer& got, const Buffer& want, double tol, const std::string& what) {
  ASSERT_EQ(got.Size(), want.Size()) << what;
  EXPECT_LT(MaxRelDiff(got.ToFloat(), want.ToFloat()), tol) << what;
}

TEST(GqaSweep, OptimizedMatchesReferenceOverRandomConfigs) {
  const int configs = std::getenv("KVSHARE_SWEEP_CONFIGS") ? std::atoi(std::getenv("KVSHARE_SWEEP_CONFIGS")) : 540;
  Rng r(20261121);
  ThreadPool pool(2);
  const KvMode modes[] = {KvMode::kAppend,          KvMode::kShareBuffer,
                          KvMode::kBorrowedEmptyKv, KvMode::kBorrowedOmittedKv,
                          KvMode::kExternalKv,      KvMode::kStaticScatter};
  int ran = 0;
  for (int i = 0; i < configs; ++i) {
    const KvMode mode = modes[i % 6];
    std::string desc;
    GqaCase ref = RandomCase(r, mode, &desc);
    GqaCase opt = ref;
    SCOPED_TRACE(desc);
    ASSERT_EQ(DetectKvMode(ref.attrs, ref.Inputs(), ref.Outputs()), mode);
    ref.Run(GqaKernel::kReference);
    opt.Run(GqaKernel::kOptimized, i % 2 ? &pool : nullptr);
    const double tol = ref.output.dtype == DType::kFloat32 ? 1e-5 : 1e-2;
    ExpectClose(opt.output, ref.output, tol, "output");
    if (ref.has_qk)
      ExpectClose(opt.qk, ref.qk, ref.qk.dtype == DType::kFloat32 && tol < 1e-4 ? 1e-5 : 1e-2, "output_qk");
    EXPECT_EQ(opt.present_key.bytes, ref.present_key.bytes);
    EXPECT_EQ(opt.past_key.bytes, ref.past_key.bytes);
    if (::testing::Test::HasFailure()) break;
    ++ran;
  }
  testing::RecordMeasured("GqaSweep: %d configurations compared\n", ran);
}

// Every block size equals the unblocked (block = T) result within 1e-6
// relative in fp32, including fully masked blocks (window + causal, long T).
TEST(GqaSweep, EveryBlockSizeMatchesUnblocked) {
  Rng r(7);
  for (int trial = 0; trial < 12; ++trial) {
    std::string desc;
    GqaCase base = RandomCase(r, trial % 2 ? KvMode::kBorrowedOmittedKv : KvMode::kAppend, &desc);
    if (base.query.dtype != DType::kFloat32) continue;
    base.attrs.kv_block_size = 0;
    base.attrs.num_kv_blocks = 1;  // one block spanning T
    GqaCase whole = base;
    whole.Run(GqaKernel::kOptimized);
    for (int block : {1, 7, 16, 64}) {
      GqaCase c = base;
      c.attrs.num_kv_blocks = 0;
      c.attrs.kv_block_size = block;
      c.Run(GqaKernel::kOptimized);
      SCOPED_TRACE(desc + " block=" + std::to_string(block));
      EXPECT_LT(MaxRelDiff(c.output.ToFloat(), whole.output.ToFloat()), 1e-6);
    }
  }
}

TEST(GqaSweep, OneAndTwoThreadsAreBitIdentical) {
  Rng r(99);
  ThreadPool one(1), two(2);
  for (int trial = 0; trial < 24; ++trial) {
    std::string desc;
    GqaCase a = RandomCase(r, static_cast<KvMode>(trial % 6), &desc);
    GqaCase b = a, c = a;
    a.Run(GqaKernel::kOptimized, &one);
    b.Run(GqaKernel::kOptimized, &two);
    c.Run(GqaKernel::kOptimized, nullptr);
    SCOPED_TRACE(desc);
    EXPECT_EQ(a.output.bytes, b.output.bytes);
    EXPECT_EQ(a.output.bytes, c.output.bytes);
    EXPECT_EQ(a.qk.bytes, b.qk.bytes);
  }
  // Long-context decode, where split-KV kicks in.
  for (int T : {4096, 32768}) {
    std::mt19937_64 g(T);
    GqaCase d;
    d.attrs.num_heads = 8;
    d.attrs.kv_num_heads = 1;
    d.query = RandomBuffer(DType::kFloat32, {1, 1, 8 * 256}, g);
    d.past_key = RandomBuffer(DType::kFloat16, {1, 1, T, 256}, g);
    d.past_value = RandomBuffer(DType::kFloat16, {1, 1, T, 256}, g);
    d.has_past = true;
    d.seqlens_k = Int32Buffer({T - 1}, {1});
    d.total_len = Int32Buffer({T}, {1});
    d.has_seqlens = true;
    d.output = Buffer(DType::kFloat32, {1, 1, 8 * 256});
    GqaCase e = d;
    d.Run(GqaKernel::kOptimized, &one);
    e.Run(GqaKernel::kOptimized, &two);
    EXPECT_EQ(d.output.bytes, e.output.bytes) << "T=" << T;
  }
}

}  // namespace
}  // namespace kvshare::testing
