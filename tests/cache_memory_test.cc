// Memory accounting: Gemma 4 E2B at 32K context (docs/architecture.md §7)
// and agreement between the estimate and the allocated cache.
#include <gtest/gtest.h>

#include "cache_specs.h"

namespace kvshare::testing {
namespace {

TEST(KvMemory, Gemma4E2bAt32kIs207MbAgainst484MbWithoutSharing) {
  const KvMemoryReport r = EstimateKvMemory(
      Gemma4E2bSpec(), KvCacheOptions{.max_batch = 1, .max_seq = 32768, .max_step = 1, .dtype = DType::kBFloat16});
  // Own: 3 full x 2048 B x 32768 + 12 sliding x 1024 B x 512.
  EXPECT_EQ(r.total_bytes, 3ull * 2048 * 32768 + 12ull * 1024 * 512);
  EXPECT_EQ(r.total_bytes, 207618048u);  // about 207 MB
  // Without sharing: 7 full x 2048 x 32768 + 28 sliding x 1024 x 512.
  EXPECT_EQ(r.bytes_without_sharing, 7ull * 2048 * 32768 + 28ull * 1024 * 512);
  EXPECT_EQ(r.bytes_without_sharing, 484442112u);  // about 484 MB
  EXPECT_EQ(r.saved_by_sharing, r.bytes_without_sharing - r.total_bytes);
  EXPECT_NEAR(static_cast<double>(r.saved_by_sharing) / static_cast<double>(r.bytes_without_sharing), 0.571, 0.001);
  // Rings: the 12 owning sliding layers hold 512 positions instead of 32768.
  EXPECT_EQ(r.saved_by_rings, 12ull * 1024 * (32768 - 512));
  ASSERT_EQ(r.layers.size(), 35u);
  EXPECT_EQ(r.layers[14].bytes, 2048ull * 32768);
  EXPECT_EQ(r.layers[13].bytes, 1024ull * 512);
  EXPECT_TRUE(r.layers[13].ring);
  EXPECT_EQ(r.layers[19].bytes, 0u);
  EXPECT_EQ(r.layers[19].source_layer, 14);
  const std::string s = r.ToString();
  EXPECT_NE(s.find("total KV: 207618048 bytes (207.6 MB)"), std::string::npos) << s;
  EXPECT_NE(s.find("without sharing: 484442112 bytes (484.4 MB)"), std::string::npos) << s;
  EXPECT_NE(s.find("57.1%"), std::string::npos) << s;
}

// q8_0: 34 bytes per 32 values, 17/32 of bf16's bytes, layer by layer.
TEST(KvMemory, Q8_0TakesThirtyFourBytesPerThirtyTwoValues) {
  const KvCacheOptions bf{.max_seq = 32768, .dtype = DType::kBFloat16};
  KvCacheOptions q8 = bf;
  q8.dtype = DType::kQ8_0;
  const KvMemoryReport a = EstimateKvMemory(Gemma4E2bSpec(), bf), b = EstimateKvMemory(Gemma4E2bSpec(), q8);
  EXPECT_EQ(b.total_bytes * 64, a.total_bytes * 34);
  EXPECT_EQ(b.bytes_without_sharing * 64, a.bytes_without_sharing * 34);
  EXPECT_EQ(b.layers[14].bytes, 2ull * 512 / 32 * 34 * 32768);  // K + V, H 512 = 16 blocks per position
  EXPECT_EQ(b.total_bytes, 110297088u);
}

TEST(KvMemory, ExactRewindKeepsFullLengthSlidingBuffers) {
  const KvMemoryReport r = EstimateKvMemory(
      Gemma4E2bSpec(), KvCacheOptions{.max_seq = 32768, .dtype = DType::kBFloat16, .exact_rewind = true});
  EXPECT_EQ(r.total_bytes,
            15ull * 32768 * 1024 + 3ull * 32768 * 1024);  // 12 sliding x 1 KiB + 3 full x 2 KiB per token
  EXPECT_EQ(r.saved_by_rings, 0u);
}

TEST(KvMemory, CacheReportMatchesEstimateAndScalesWithBatch) {
  ModelKvSpec spec = Gemma3nSpec(10, 4);
  for (auto& l : spec.layers) l.head_size = 16, l.window = 6;
  const KvCacheOptions o{.max_batch = 3, .max_seq = 40, .max_step = 4, .dtype = DType::kFloat16};
  KvCache cache(spec, o);
  const KvMemoryReport r = cache.Memory();
  const KvMemoryReport e = EstimateKvMemory(spec, o);
  EXPECT_EQ(r.total_bytes, e.total_bytes);
  // Layers 0..5 own: full 4 (C 40), sliding 0-3, 5 (C 6 + 4 - 1 = 9); K + V, 2 heads x 16 x fp16.
  EXPECT_EQ(r.total_bytes, 3ull * 2 * 2 * 16 * 2 * (40 + 5 * 9));
  for (int layer = 0; layer < 6; ++layer) {
    const LayerKvView v = cache.Layer(layer);
    EXPECT_EQ(v.key.NumBytes() * 2, r.layers[static_cast<std::size_t>(layer)].bytes) << layer;
  }
}

}  // namespace
}  // namespace kvshare::testing
