// Per-row state and error behaviour of KvCache / AttendLayer: capacity errors
// leave the cache unchanged; shared layers alias their source with no copy and
// never write.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>

#include "cache_model.h"
#include "kvshare/common/error.h"

namespace kvshare::testing {
namespace {

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Bytes of every owned K/V buffer.
std::vector<std::vector<unsigned char>> Snapshot(KvCache& cache) {
  std::vector<std::vector<unsigned char>> s;
  for (std::size_t l = 0; l < cache.Spec().layers.size(); ++l) {
    const LayerKvView v = cache.Layer(static_cast<int>(l));
    if (v.shared) continue;
    for (const TensorView& t : {v.key, v.value}) {
      const auto* p = static_cast<const unsigned char*>(t.data);
      s.emplace_back(p, p + t.NumBytes());
    }
  }
  return s;
}

std::vector<std::int64_t> Vec(const ConstTensorView& t) {
  return std::vector<std::int64_t>(t.As<std::int64_t>(), t.As<std::int64_t>() + t.NumElements());
}

TEST(KvCacheState, WritingBeyondCapacityThrowsAndLeavesCacheUnchanged) {
  const TinyModel model(MixedStackSpec(), 4, 24, 64, 21);
  std::mt19937_64 rng(22);
  KvCache cache(MixedStackSpec(), {.max_batch = 3, .max_seq = 44, .max_step = 8});
  const TinyModel::Acts x = model.RandomTokens(40, rng);
  for (int at = 0; at < 40; at += 8) model.StepRow(cache, 2, x, at, 8);
  model.StepRow(cache, 0, x, 0, 5);
  ASSERT_EQ(cache.Length(2), 40);
  const auto bytes = Snapshot(cache);
  const auto wi = Vec(cache.WriteIndices()), np = Vec(cache.NonpadKvSeqlen());
  EXPECT_EQ(ErrorOf([&] { cache.Reserve(2, 8); }),
            "row 2: 40 + 8 tokens exceed max_seq 44; increase max_seq to at least 48");
  EXPECT_NE(ErrorOf([&] { cache.Reserve(2, 9); }).find("9 new tokens exceed max_step 8"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { cache.Reserve(3, 1); }).find("row 3 is out of range [0, max_batch = 3)"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { cache.Reserve(1, -1); }).find("n_new must be >= 0"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { cache.Rewind(2, 41); }).find("out of range [0, Length(row) = 40]"), std::string::npos);
  EXPECT_EQ(cache.Length(2), 40);
  EXPECT_EQ(cache.Reserved(2), 0);
  EXPECT_EQ(Vec(cache.WriteIndices()), wi);
  EXPECT_EQ(Vec(cache.NonpadKvSeqlen()), np);
  EXPECT_EQ(Snapshot(cache), bytes);
  // Exactly at capacity is fine.
  EXPECT_EQ(cache.Reserve(2, 4), 40);
  EXPECT_EQ(Vec(cache.NonpadKvSeqlen()), (std::vector<std::int64_t>{5, 0, 44}));
  EXPECT_NE(ErrorOf([&] { cache.Reserve(2, 1); }).find("already has 4 reserved tokens"), std::string::npos);
  cache.Commit(2);
  EXPECT_EQ(cache.Length(2), 44);
}

// A copied row (rings wrapped, shared layers) goes on exactly as its source:
// the same tokens give the same outputs; the other rows are untouched.
TEST(KvCacheState, CopyRowContinuesExactlyAsItsSource) {
  const TinyModel model(MixedStackSpec(), 4, 24, 64, 31);
  std::mt19937_64 rng(32);
  KvCache cache(MixedStackSpec(), {.max_batch = 3, .max_seq = 48, .max_step = 8});
  const TinyModel::Acts x = model.RandomTokens(36, rng), y = model.RandomTokens(12, rng);
  for (int at = 0; at < 24; at += 8) model.StepRow(cache, 0, x, at, 8);  // 24 > the rings' 5 + 8 - 1
  model.StepRow(cache, 1, y, 0, 6);
  model.StepRow(cache, 2, y, 0, 3);
  const auto row1 = model.StepRow(cache, 1, y, 6, 1);
  cache.Rewind(1, 6);
  cache.CopyRow(0, 2);
  EXPECT_EQ(cache.Length(2), 24);
  EXPECT_EQ(cache.OldestRewindLength(2), cache.OldestRewindLength(0));
  EXPECT_EQ(model.StepRow(cache, 1, y, 6, 1), row1);  // row 1 untouched
  const auto a = model.StepRow(cache, 0, x, 24, 5);
  const auto b = model.StepRow(cache, 2, x, 24, 5);
  EXPECT_EQ(a, b);
  // Not the same as a row that never saw x's first tokens (the check can fail).
  cache.Reset(1);
  EXPECT_NE(model.StepRow(cache, 1, x, 24, 5), a);
  cache.CopyRow(2, 2);  // itself: nothing
  EXPECT_EQ(cache.Length(2), 29);
  EXPECT_NE(ErrorOf([&] { cache.CopyRow(0, 3); }).find("row 3 is out of range"), std::string::npos);
  cache.Reserve(0, 1);
  EXPECT_NE(ErrorOf([&] { cache.CopyRow(0, 1); }).find("reserved tokens"), std::string::npos);
  EXPECT_EQ(cache.Length(1), 5);
}

TEST(KvCacheState, ReserveCommitRewindResetDriveTheOpVectors) {
  KvCache cache(MixedStackSpec(), {.max_batch = 2, .max_seq = 16, .max_step = 4, .exact_rewind = true});
  EXPECT_EQ(cache.Reserve(0, 3), 0);
  EXPECT_EQ(cache.Reserve(1, 1), 0);
  EXPECT_EQ(Vec(cache.WriteIndices()), (std::vector<std::int64_t>{0, 0}));
  EXPECT_EQ(Vec(cache.NonpadKvSeqlen()), (std::vector<std::int64_t>{3, 1}));
  cache.CommitAll();
  EXPECT_EQ(Vec(cache.WriteIndices()), (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ(Vec(cache.NonpadKvSeqlen()), (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ(cache.Reserve(0, 2), 3);
  cache.Rewind(0, 1);  // drops the reservation too
  EXPECT_EQ(cache.Reserved(0), 0);
  EXPECT_EQ(Vec(cache.NonpadKvSeqlen()), (std::vector<std::int64_t>{1, 1}));
  cache.Reset(1);
  EXPECT_EQ(cache.Length(1), 0);
  EXPECT_EQ(cache.Length(0), 1);
  cache.Commit(1);  // nothing reserved: no-op
  EXPECT_EQ(cache.Length(1), 0);
}

TEST(KvCacheState, SharedLayersAliasTheirSourceWithNoCopy) {
  KvCache cache(MixedStackSpec(), {.max_batch = 2, .max_seq = 16, .max_step = 4});
  const LayerKvView s5 = cache.Layer(5), s7 = cache.Layer(7), s3 = cache.Layer(3);
  const LayerKvView f6 = cache.Layer(6), f4 = cache.Layer(4);
  EXPECT_TRUE(s5.shared);
  EXPECT_FALSE(s3.shared);
  EXPECT_EQ(s5.source_layer, 3);
  EXPECT_EQ(s5.key.data, s3.key.data);
  EXPECT_EQ(s7.value.data, s3.value.data);
  EXPECT_EQ(f6.key.data, f4.key.data);
  EXPECT_EQ(s5.scatter_mode, GqaAttributes::ScatterMode::kCircular);
  EXPECT_EQ(f6.scatter_mode, GqaAttributes::ScatterMode::kLinear);
  EXPECT_EQ(s5.key.shape, (Shape{2, 2, 5 + 4 - 1, 16}));
  EXPECT_EQ(f6.key.shape, (Shape{2, 1, 16, 32}));
  EXPECT_EQ(s5.window, 5);
  EXPECT_EQ(f6.window, -1);
  // Only owning layers hold memory: 5 slots.
  const KvMemoryReport r = cache.Memory();
  EXPECT_EQ(r.layers[5].bytes, 0u);
  EXPECT_EQ(r.total_bytes, 2u * (s3.key.NumBytes() * 3 + f4.key.NumBytes() * 2));
}

TEST(KvCacheState, SharedLayerStepWritesNothing) {
  const TinyModel model(MixedStackSpec(), 4, 24, 64, 23);
  std::mt19937_64 rng(24);
  KvCache cache(MixedStackSpec(), {.max_seq = 16, .max_step = 4});
  const TinyModel::Acts x = model.RandomTokens(6, rng);
  model.StepRow(cache, 0, x, 0, 4);
  cache.Reserve(0, 2);
  // Run only the owning layers 0..4 through the op by hand is what Step does;
  // here: snapshot after the owners wrote, then call a shared layer alone.
  model.Step(cache, TinyModel::Acts(x.begin() + 4 * 24, x.end()), 1, 2);
  const auto bytes = Snapshot(cache);
  Buffer q = RandomBuffer(DType::kFloat32, {1, 2, 4 * 16}, rng), out(DType::kFloat32, {1, 2, 4 * 16});
  LayerAttendArgs a{.query = q.View(), .attrs = {.num_heads = 4}, .output = out.Mut()};
  AttendLayer(cache, 5, a);
  EXPECT_EQ(Snapshot(cache), bytes);
  cache.Commit(0);
}

// q8_0: views keep element shapes over 34-byte blocks, shared layers alias
// their source's blocks, and a shared layer's step writes nothing.
TEST(KvCacheState, Q8_0SharedLayersAliasTheirSourceAndWriteNothing) {
  const ModelKvSpec spec = MixedStackSpec(32, 64);
  const TinyModel model(spec, 4, 24, 64, 27);
  std::mt19937_64 rng(28);
  KvCache cache(spec, {.max_seq = 16, .max_step = 4, .dtype = DType::kQ8_0});
  const LayerKvView s5 = cache.Layer(5), s3 = cache.Layer(3), f6 = cache.Layer(6), f4 = cache.Layer(4);
  EXPECT_EQ(s5.key.data, s3.key.data);
  EXPECT_EQ(f6.value.data, f4.value.data);
  EXPECT_EQ(s5.key.dtype, DType::kQ8_0);
  EXPECT_EQ(s5.key.shape, (Shape{1, 2, 5 + 4 - 1, 32}));
  EXPECT_EQ(s5.key.NumBytes(), 2u * 8 * 34);   // 2 heads x 8 positions x one block
  EXPECT_EQ(f6.key.NumBytes(), 16u * 2 * 34);  // 16 positions x two blocks
  EXPECT_EQ(cache.Memory().total_bytes, 2u * (s3.key.NumBytes() * 3 + f4.key.NumBytes() * 2));
  const TinyModel::Acts x = model.RandomTokens(6, rng);
  model.StepRow(cache, 0, x, 0, 4);
  cache.Reserve(0, 2);
  model.Step(cache, TinyModel::Acts(x.begin() + 4 * 24, x.end()), 1, 2);
  const auto bytes = Snapshot(cache);
  Buffer q = RandomBuffer(DType::kFloat32, {1, 2, 4 * 32}, rng), out(DType::kFloat32, {1, 2, 4 * 32});
  LayerAttendArgs a{.query = q.View(), .attrs = {.num_heads = 4}, .output = out.Mut()};
  AttendLayer(cache, 5, a);
  EXPECT_EQ(Snapshot(cache), bytes);
  cache.Commit(0);
}

TEST(KvCacheState, AttendLayerErrors) {
  KvCache cache(MixedStackSpec(), {.max_batch = 2, .max_seq = 16, .max_step = 4});
  std::mt19937_64 rng(25);
  Buffer q = RandomBuffer(DType::kFloat32, {2, 2, 4 * 16}, rng), out(DType::kFloat32, {2, 2, 4 * 16});
  Buffer k = RandomBuffer(DType::kFloat32, {2, 2, 2 * 16}, rng);
  cache.Reserve(0, 2);
  LayerAttendArgs a{
      .query = q.View(), .key = k.View(), .value = k.View(), .attrs = {.num_heads = 4}, .output = out.Mut()};
  EXPECT_NE(ErrorOf([&] { AttendLayer(cache, 5, a); }).find("layer 5: is KV-shared (reads layer 3's cache)"),
            std::string::npos);
  LayerAttendArgs no_kv{.query = q.View(), .attrs = {.num_heads = 4}, .output = out.Mut()};
  // A shared layer before its source wrote this step's rows.
  EXPECT_NE(ErrorOf([&] { AttendLayer(cache, 5, no_kv); }).find("layer 3 has not written the tokens reserved"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { AttendLayer(cache, 0, no_kv); }).find("owns its cache: key and value"), std::string::npos);
  Buffer q5 = RandomBuffer(DType::kFloat32, {2, 5, 4 * 16}, rng), o5(DType::kFloat32, {2, 5, 4 * 16});
  LayerAttendArgs long_step{.query = q5.View(), .attrs = {.num_heads = 4}, .output = o5.Mut()};
  EXPECT_NE(ErrorOf([&] { AttendLayer(cache, 5, long_step); }).find("exceeds max_step 4"), std::string::npos);
  Buffer q1 = RandomBuffer(DType::kFloat32, {1, 2, 4 * 16}, rng), o1(DType::kFloat32, {1, 2, 4 * 16});
  cache.Rewind(0, 0);
  cache.Reserve(1, 1);
  LayerAttendArgs part{.query = q1.View(), .attrs = {.num_heads = 4}, .output = o1.Mut()};
  EXPECT_NE(ErrorOf([&] { AttendLayer(cache, 5, part); }).find("row 1 has 1 reserved tokens but the query batch is 1"),
            std::string::npos);
  LayerAttendArgs wrong_window{
      .query = q.View(), .attrs = {.num_heads = 4, .local_window_size = 7}, .output = out.Mut()};
  EXPECT_NE(
      ErrorOf([&] { AttendLayer(cache, 5, wrong_window); }).find("local_window_size 7 differs from the layer's 5"),
      std::string::npos);
  // Full layer query with the sliding head size.
  EXPECT_NE(ErrorOf([&] { AttendLayer(cache, 6, no_kv); }).find("must be num_heads (4) * head_size (32) = 128"),
            std::string::npos);
  // query_offsets: shared layers only, one per row, within the row's reservation.
  const std::vector<std::int64_t> offs2 = {0, 2}, offs1 = {1};
  LayerAttendArgs owner_offs = a;
  owner_offs.query_offsets = offs2;
  EXPECT_NE(ErrorOf([&] { AttendLayer(cache, 0, owner_offs); }).find("query_offsets are for KV-shared layers only"),
            std::string::npos);
  LayerAttendArgs few = no_kv;
  few.query_offsets = offs1;
  EXPECT_NE(ErrorOf([&] { AttendLayer(cache, 5, few); }).find("query_offsets has 1 values, expected B = 2"),
            std::string::npos);
  LayerAttendArgs past = no_kv;
  past.query_offsets = offs2;  // row 1 reserved 1
  EXPECT_NE(ErrorOf([&] { AttendLayer(cache, 5, past); }).find("query_offsets[1] = 2 is out of range [0, 1]"),
            std::string::npos);
}

// A KV-shared layer run on the last rows of a step only (query_offsets) gives
// those rows' outputs exactly as when it runs on every reserved row.
TEST(KvCacheState, SharedLayerQueryOffsetsMatchTheFullQuery) {
  const TinyModel model(MixedStackSpec(), 4, 24, 64, 31);
  std::mt19937_64 rng(32);
  KvCache cache(MixedStackSpec(), {.max_batch = 2, .max_seq = 16, .max_step = 4});
  model.StepRow(cache, 0, model.RandomTokens(5, rng), 0, 4);
  cache.Reserve(0, 4);
  cache.Reserve(1, 3);
  model.Step(cache, model.RandomTokens(2 * 4, rng), 2, 4);  // every layer; owners write rows 4..7 / 0..2
  // Layer 5 is shared (reads layer 3): all 4 + 3 query rows, then only the last 1 / 2.
  Buffer q = RandomBuffer(DType::kFloat32, {2, 4, 4 * 16}, rng), full(DType::kFloat32, {2, 4, 4 * 16});
  AttendLayer(cache, 5, {.query = q.View(), .attrs = {.num_heads = 4}, .output = full.Mut()});
  Buffer q_tail(DType::kFloat32, {2, 2, 4 * 16}), tail(DType::kFloat32, {2, 2, 4 * 16});
  const std::int64_t w = 4 * 16;
  for (int i = 0; i < w; ++i) {
    q_tail.Set(0 * 2 * w + i, q.Get(0 * 4 * w + 3 * w + i));  // row 0: its 4th query row
    q_tail.Set(1 * 2 * w + i, q.Get(1 * 4 * w + 1 * w + i));  // row 1: its 2nd and 3rd
    q_tail.Set(1 * 2 * w + w + i, q.Get(1 * 4 * w + 2 * w + i));
  }
  const std::vector<std::int64_t> offs = {3, 1};
  LayerAttendArgs cut{.query = q_tail.View(), .attrs = {.num_heads = 4}, .output = tail.Mut()};
  cut.query_offsets = offs;
  AttendLayer(cache, 5, cut);
  for (int i = 0; i < w; ++i) {
    EXPECT_EQ(tail.Get(0 * 2 * w + i), full.Get(0 * 4 * w + 3 * w + i)) << i;
    EXPECT_EQ(tail.Get(1 * 2 * w + i), full.Get(1 * 4 * w + 1 * w + i)) << i;
    EXPECT_EQ(tail.Get(1 * 2 * w + w + i), full.Get(1 * 4 * w + 2 * w + i)) << i;
  }
  cache.CommitAll();
}

TEST(KvCacheState, OptionErrorsSayWhatToChange) {
  EXPECT_NE(ErrorOf([] { KvCache c(MixedStackSpec(), {.max_seq = 0}); }).find("max_seq must be >= 1"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf([] { KvCache c(MixedStackSpec(), {.max_seq = 4, .max_step = 8}); }).find("max_step 8 exceeds max_seq 4"),
      std::string::npos);
  EXPECT_NE(ErrorOf([] {
              KvCache c(MixedStackSpec(), {.max_seq = 4, .dtype = DType::kInt32});
            }).find("dtype must be float32, float16, bfloat16 or q8_0"),
            std::string::npos);
  // q8_0 stores blocks of 32 along H: the stack's sliding layers have H = 16.
  const std::string q8 = ErrorOf([] { KvCache c(MixedStackSpec(), {.max_seq = 4, .dtype = DType::kQ8_0}); });
  EXPECT_NE(q8.find("layer 0 has head_size 16, not a multiple of 32"), std::string::npos) << q8;
  EXPECT_NE(q8.find("use float16 or bfloat16"), std::string::npos) << q8;
  EXPECT_NE(ErrorOf([] {
              EstimateKvMemory(MixedStackSpec(), {.max_seq = 4, .dtype = DType::kQ8_0});
            }).find("not a multiple of 32"),
            std::string::npos);
  EXPECT_EQ(ErrorOf([] { KvCache c(MixedStackSpec(32, 64), {.max_seq = 4, .dtype = DType::kQ8_0}); }), "");
  EXPECT_NE(ErrorOf([] { KvCache c(MixedStackSpec(), {.max_batch = 0, .max_seq = 4}); }).find("max_batch must be >= 1"),
            std::string::npos);
}

}  // namespace
}  // namespace kvshare::testing
