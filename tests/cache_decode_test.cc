// Cached decode through a stack of sliding, full and KV-shared layers equals
// full recomputation; rewind then decode equals a fresh run; a ragged batch
// equals its rows run alone.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "cache_model.h"
#include "common/str.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::testing {
namespace {

constexpr int kHeads = 4, kWidth = 24, kMaxPos = 64;

// Stacked layers: the per-dtype table (common_test_util.h) with headroom for 8 layers.
// (q8_0: the oracle holds the same dequantized K/V, so only fp32 rounding
// differs; a rounding flip of one code moves one value by one step d.)
double StackTol(DType dt) { return dt == DType::kFloat32 ? 1e-4 : 2e-2; }

// The test stack for a cache dtype: q8_0 needs head sizes that are multiples of 32.
ModelKvSpec SpecFor(DType dt) { return dt == DType::kQ8_0 ? MixedStackSpec(32, 64) : MixedStackSpec(); }

// Slice of tokens [from, from + n) of a [T, D] activation array.
TinyModel::Acts Slice(const TinyModel::Acts& x, int from, int n) {
  return TinyModel::Acts(x.begin() + static_cast<std::ptrdiff_t>(from) * kWidth,
                         x.begin() + static_cast<std::ptrdiff_t>(from + n) * kWidth);
}

TinyModel::Acts Concat(TinyModel::Acts a, const TinyModel::Acts& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class CacheDecode : public ::testing::TestWithParam<std::tuple<DType, bool, KvLayout>> {};

TEST_P(CacheDecode, IncrementalEqualsFullRecompute) {
  const auto [dtype, exact, layout] = GetParam();
  const TinyModel model(SpecFor(dtype), kHeads, kWidth, kMaxPos, 1);
  std::mt19937_64 rng(2);
  // Prefill 7, 9 single tokens, a chunk of 5, a chunk of 3, 3 single tokens:
  // 27 positions through rings of 5 + 7 - 1 = 11.
  const std::vector<int> steps = {7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 5, 3, 1, 1, 1};
  int T = 0;
  for (int n : steps) T += n;
  const TinyModel::Acts x = model.RandomTokens(T, rng);
  const TinyModel::Acts want = model.Reference(x, dtype);
  KvCache cache(
      SpecFor(dtype),
      {.max_batch = 1, .max_seq = 32, .max_step = 7, .dtype = dtype, .exact_rewind = exact, .layout = layout});
  EXPECT_EQ(cache.Layer(0).scatter_mode,
            exact ? GqaAttributes::ScatterMode::kLinear : GqaAttributes::ScatterMode::kCircular);
  int at = 0;
  for (int n : steps) {
    const TinyModel::Acts got = model.StepRow(cache, 0, x, at, n);
    EXPECT_LT(MaxRelDiff(got, Slice(want, at, n)), StackTol(dtype)) << "tokens " << at << ".." << at + n - 1;
    at += n;
  }
  EXPECT_EQ(cache.Length(0), T);
}

INSTANTIATE_TEST_SUITE_P(
    DtypesRingsLayouts, CacheDecode,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kQ8_0),
                       ::testing::Bool(), ::testing::Values(KvLayout::kBnsh, KvLayout::kTokenMajor)));

TEST(CacheDecode, ReferenceAndOptimizedKernelsAgree) {
  const TinyModel model(MixedStackSpec(), kHeads, kWidth, kMaxPos, 3);
  std::mt19937_64 rng(4);
  const TinyModel::Acts x = model.RandomTokens(14, rng);
  KvCache a(MixedStackSpec(), {.max_seq = 16, .max_step = 4});
  KvCache b(MixedStackSpec(), {.max_seq = 16, .max_step = 4});
  for (int at = 0; at < 14; at += 2) {
    const auto ra = model.StepRow(a, 0, x, at, 2, GqaKernel::kReference);
    const auto rb = model.StepRow(b, 0, x, at, 2, GqaKernel::kOptimized);
    EXPECT_LT(MaxRelDiff(ra, rb), 1e-5);
  }
}

// Brings row 0 of `cache` to the first `len` tokens of x in chunks of `chunk`.
void Prefill(const TinyModel& model, KvCache& cache, const TinyModel::Acts& x, int len, int chunk) {
  for (int at = 0; at < len; at += chunk) model.StepRow(cache, 0, x, at, std::min(chunk, len - at));
}

// Decodes y (a chunk of 3, then single tokens) on row 0 and checks it against a
// fresh full run of `prefix ++ y`.
void DecodeAndCheck(const TinyModel& model, KvCache& cache, const TinyModel::Acts& prefix, const TinyModel::Acts& y,
                    const std::string& what) {
  const int P = static_cast<int>(prefix.size()) / kWidth, n = static_cast<int>(y.size()) / kWidth;
  ASSERT_EQ(cache.Length(0), P);
  const TinyModel::Acts want = model.Reference(Concat(prefix, y), cache.Options().dtype);
  int at = 0;
  while (at < n) {
    const int step = at == 0 ? std::min(3, n) : 1;
    const TinyModel::Acts got = model.StepRow(cache, 0, y, at, step);
    EXPECT_LT(MaxRelDiff(got, Slice(want, P + at, step)), StackTol(cache.Options().dtype))
        << what << ", new tokens " << at << ".." << at + step - 1;
    at += step;
  }
}

TEST(CacheRewind, ExactRewindToAnyLengthThenDecodeEqualsFreshRun) {
  const TinyModel model(MixedStackSpec(), kHeads, kWidth, kMaxPos, 5);
  std::mt19937_64 rng(6);
  const TinyModel::Acts x = model.RandomTokens(20, rng);
  for (int r = 0; r <= 20; ++r) {
    KvCache cache(MixedStackSpec(), {.max_seq = 32, .max_step = 4, .exact_rewind = true});
    Prefill(model, cache, x, 20, 4);
    EXPECT_EQ(cache.OldestRewindLength(0), 1);
    cache.Rewind(0, r);
    DecodeAndCheck(model, cache, Slice(x, 0, r), model.RandomTokens(5, rng), "rewind to " + std::to_string(r));
  }
}

// q8_0 rows are quantized once when written: rewinding drops them exactly, on
// full-length buffers and on rings (within what the ring holds).
TEST(CacheRewind, Q8_0ExactAndRingRewindThenDecodeEqualsFreshRun) {
  const ModelKvSpec spec = SpecFor(DType::kQ8_0);
  const TinyModel model(spec, kHeads, kWidth, kMaxPos, 15);
  std::mt19937_64 rng(16);
  const TinyModel::Acts x = model.RandomTokens(20, rng);
  for (const bool exact : {true, false}) {
    for (int r : exact ? std::vector<int>{0, 1, 7, 13, 20} : std::vector<int>{0, 16, 19}) {
      KvCache cache(spec, {.max_seq = 32, .max_step = 4, .dtype = DType::kQ8_0, .exact_rewind = exact});
      Prefill(model, cache, x, 20, 4);
      cache.Rewind(0, r);
      DecodeAndCheck(model, cache, Slice(x, 0, r), model.RandomTokens(5, rng),
                     detail::Str(exact ? "exact" : "ring", " q8_0 rewind to ", r));
    }
  }
}

TEST(CacheRewind, ChainedRewindsInOneCache) {
  const TinyModel model(MixedStackSpec(), kHeads, kWidth, kMaxPos, 7);
  std::mt19937_64 rng(8);
  KvCache cache(MixedStackSpec(), {.max_seq = 40, .max_step = 4, .dtype = DType::kBFloat16, .exact_rewind = true});
  TinyModel::Acts seq = model.RandomTokens(12, rng);
  Prefill(model, cache, seq, 12, 4);
  for (int r : {9, 2, 6, 0, 5}) {
    cache.Rewind(0, r);
    const TinyModel::Acts y = model.RandomTokens(6, rng);
    DecodeAndCheck(model, cache, Slice(seq, 0, r), y, "chained rewind to " + std::to_string(r));
    seq = Concat(Slice(seq, 0, r), y);
  }
}

TEST(CacheRewind, RingRewindWithinWhatItHoldsIsExactBeyondIsTheDocumentedError) {
  const TinyModel model(MixedStackSpec(), kHeads, kWidth, kMaxPos, 9);
  std::mt19937_64 rng(10);
  const TinyModel::Acts x = model.RandomTokens(20, rng);
  // Rings of W + max_step - 1 = 5 + 4 - 1 = 8; after 20 tokens positions 0..11
  // are gone, and decoding from length r needs r - 4 .. r - 1: r >= 16 works.
  auto fresh = [&]() {
    KvCache cache(MixedStackSpec(), {.max_seq = 32, .max_step = 4});
    Prefill(model, cache, x, 20, 4);
    return cache;
  };
  {
    KvCache cache = fresh();
    EXPECT_EQ(cache.OldestRewindLength(0), 16);
  }
  for (int r : {0, 16, 17, 20}) {
    KvCache cache = fresh();
    cache.Rewind(0, r);
    DecodeAndCheck(model, cache, Slice(x, 0, r), model.RandomTokens(5, rng), "ring rewind to " + std::to_string(r));
  }
  for (int r : {1, 4, 12, 15}) {
    KvCache cache = fresh();
    try {
      cache.Rewind(0, r);
      ADD_FAILURE() << "rewind to " << r << " past the ring did not throw";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("positions 0..11 of this row are gone"), std::string::npos) << m;
      EXPECT_NE(m.find(detail::Str(r < 4 ? 0 : r - 4, "..", r - 1)), std::string::npos) << m;
      EXPECT_NE(m.find("length >= 16"), std::string::npos) << m;
      EXPECT_NE(m.find("exact_rewind = true"), std::string::npos) << m;
    }
    // Unchanged: decoding continues the original sequence exactly.
    EXPECT_EQ(cache.Length(0), 20);
    DecodeAndCheck(model, cache, x, model.RandomTokens(4, rng), "after failed rewind to " + std::to_string(r));
  }
}

// Ragged batch: 3 rows with different prompt lengths and chunks, idle steps,
// row 1 reset mid-way and starting a new sequence. Every row's outputs equal
// the row run alone (its own cache, same chunks) and the full recompute.
void RaggedBatchWithResetEqualsRowsAlone(DType dtype) {
  const ModelKvSpec spec = SpecFor(dtype);
  const TinyModel model(spec, kHeads, kWidth, kMaxPos, 11);
  std::mt19937_64 rng(12);
  constexpr int B = 3;
  const KvCacheOptions opt{.max_batch = B, .max_seq = 30, .max_step = 4, .dtype = dtype};
  KvCache batch(spec, opt);
  std::vector<KvCache> alone;
  for (int b = 0; b < B; ++b) alone.emplace_back(spec, KvCacheOptions{.max_seq = 30, .max_step = 4, .dtype = dtype});
  // n_new per step and row; -1 = reset the row before this step.
  const std::vector<std::vector<int>> plan = {{4, 2, 3}, {1, 4, 0}, {1, 1, 1}, {0, 3, 1}, {4, -1, 1},
                                              {1, 4, 2}, {2, 1, 0}, {1, 1, 4}, {1, 2, 1}, {3, 1, 1}};
  std::vector<TinyModel::Acts> hist(B);  // tokens since the last reset, per row
  for (std::size_t step = 0; step < plan.size(); ++step) {
    int S = 1;
    std::vector<int> n(B);
    for (int b = 0; b < B; ++b) {
      n[static_cast<std::size_t>(b)] = plan[step][static_cast<std::size_t>(b)];
      if (n[static_cast<std::size_t>(b)] < 0) {  // the row leaves; a new sequence joins in its place
        batch.Reset(b);
        alone[static_cast<std::size_t>(b)].Reset(0);
        hist[static_cast<std::size_t>(b)].clear();
        n[static_cast<std::size_t>(b)] = 3;
      }
      S = std::max(S, n[static_cast<std::size_t>(b)]);
    }
    TinyModel::Acts in(static_cast<std::size_t>(B) * S * kWidth, 0.f);
    std::vector<TinyModel::Acts> fresh(B);
    for (int b = 0; b < B; ++b) {
      fresh[static_cast<std::size_t>(b)] = model.RandomTokens(n[static_cast<std::size_t>(b)], rng);
      std::copy(fresh[static_cast<std::size_t>(b)].begin(), fresh[static_cast<std::size_t>(b)].end(),
                in.begin() + static_cast<std::ptrdiff_t>(b) * S * kWidth);
      EXPECT_EQ(batch.Reserve(b, n[static_cast<std::size_t>(b)]), batch.Length(b));
    }
    const TinyModel::Acts out = model.Step(batch, in, B, S);
    batch.CommitAll();
    for (int b = 0; b < B; ++b) {
      const int nb = n[static_cast<std::size_t>(b)];
      auto& h = hist[static_cast<std::size_t>(b)];
      const int P = static_cast<int>(h.size()) / kWidth;
      h = Concat(h, fresh[static_cast<std::size_t>(b)]);
      ASSERT_EQ(batch.Length(b), P + nb);
      if (nb == 0) continue;
      const TinyModel::Acts got(out.begin() + static_cast<std::ptrdiff_t>(b) * S * kWidth,
                                out.begin() + (static_cast<std::ptrdiff_t>(b) * S + nb) * kWidth);
      const TinyModel::Acts solo = model.StepRow(alone[static_cast<std::size_t>(b)], 0, h, P, nb);
      EXPECT_LT(MaxRelDiff(got, solo), 1e-6) << "step " << step << " row " << b;
      const TinyModel::Acts want = model.Reference(h, dtype);
      EXPECT_LT(MaxRelDiff(got, Slice(want, P, nb)), StackTol(dtype)) << "step " << step << " row " << b;
    }
  }
}

TEST(CacheBatch, RaggedBatchWithResetEqualsRowsAlone) { RaggedBatchWithResetEqualsRowsAlone(DType::kFloat32); }
TEST(CacheBatch, RaggedBatchWithResetEqualsRowsAloneQ8_0) { RaggedBatchWithResetEqualsRowsAlone(DType::kQ8_0); }

// A batch step through the cache gives bitwise the same result for any thread count.
TEST(CacheBatch, ThreadCountDoesNotChangeResults) {
  for (const DType dtype : {DType::kBFloat16, DType::kQ8_0}) {
    const ModelKvSpec spec = SpecFor(dtype);
    const TinyModel model(spec, kHeads, kWidth, kMaxPos, 13);
    std::mt19937_64 rng(14);
    const KvCacheOptions opt{.max_batch = 2, .max_seq = 24, .max_step = 4, .dtype = dtype};
    KvCache one(spec, opt), many(spec, opt);
    ThreadPool pool(3);
    for (const auto& n : std::vector<std::vector<int>>{{4, 3}, {1, 1}, {0, 4}, {2, 1}, {1, 0}}) {
      const int S = std::max(1, std::max(n[0], n[1]));
      const TinyModel::Acts in = model.RandomTokens(2 * S, rng);
      for (KvCache* c : {&one, &many})
        for (int b = 0; b < 2; ++b) c->Reserve(b, n[static_cast<std::size_t>(b)]);
      const auto a = model.Step(one, in, 2, S, GqaKernel::kOptimized, nullptr);
      const auto b = model.Step(many, in, 2, S, GqaKernel::kOptimized, &pool);
      EXPECT_EQ(a, b) << DTypeName(dtype);
      one.CommitAll();
      many.CommitAll();
    }
  }
}

}  // namespace
}  // namespace kvshare::testing
