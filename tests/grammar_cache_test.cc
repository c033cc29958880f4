// GrammarCache (kvshare/grammar/grammar_cache.h): hits share the compiled
// object, least recently used entries go first when the entry or byte bound
// is passed, a grammar over the byte bound is used and not kept, failed
// compiles are not kept, concurrent callers of one key compile once (and
// share its failure), and matchers over one shared grammar keep their own
// state.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "grammar_byte_vocab.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/grammar/grammar_cache.h"

namespace kvshare {
namespace {

// A compile that counts its calls.
struct Counted {
  std::atomic<int> calls{0};
  GrammarCache::Compile Of(const std::string& text) {
    return [this, text] {
      ++calls;
      return LiteralGrammar(text);
    };
  }
};

TEST(GrammarCache, HitSharesTheCompiledObject) {
  GrammarCache cache;
  Counted c;
  const auto a = cache.GetOrCompile("k", c.Of("abc"));
  const auto b = cache.GetOrCompile("k", c.Of("abc"));
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(c.calls.load(), 1);
  const auto other = cache.GetOrCompile("k2", c.Of("abc"));
  EXPECT_NE(other.get(), a.get());
  const GrammarCacheStats s = cache.Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.bytes, GrammarBytes(*a) + GrammarBytes(*other) + 3);  // and the keys "k", "k2"
}

TEST(GrammarCache, EvictsLeastRecentlyUsedByEntries) {
  GrammarCache cache({.max_entries = 2});
  Counted c;
  cache.GetOrCompile("a", c.Of("a"));
  cache.GetOrCompile("b", c.Of("b"));
  cache.GetOrCompile("a", c.Of("a"));  // a is now the most recent
  cache.GetOrCompile("c", c.Of("c"));  // evicts b
  EXPECT_EQ(c.calls.load(), 3);
  EXPECT_EQ(cache.Stats().evictions, 1u);
  EXPECT_EQ(cache.Stats().entries, 2u);
  cache.GetOrCompile("a", c.Of("a"));
  cache.GetOrCompile("c", c.Of("c"));
  EXPECT_EQ(c.calls.load(), 3);  // both kept
  cache.GetOrCompile("b", c.Of("b"));
  EXPECT_EQ(c.calls.load(), 4);  // b was gone; now a (least recent) is
  EXPECT_EQ(cache.Stats().evictions, 2u);
  cache.GetOrCompile("a", c.Of("a"));
  EXPECT_EQ(c.calls.load(), 5);
}

TEST(GrammarCache, EvictsByBytesAndSkipsGrammarsOverTheBound) {
  const std::size_t one = GrammarBytes(*LiteralGrammar(std::string(100, 'x'))) + 1;  // and a one-byte key
  GrammarCache cache({.max_entries = 100, .max_bytes = 2 * one + one / 2});
  Counted c;
  for (const char* k : {"a", "b", "c"}) cache.GetOrCompile(k, c.Of(std::string(100, k[0])));
  GrammarCacheStats s = cache.Stats();
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_LE(s.bytes, 2 * one + one / 2);
  // Larger than the whole bound: returned, not kept, nothing evicted for it.
  const auto big = cache.GetOrCompile("big", c.Of(std::string(1000, 'y')));
  ASSERT_NE(big, nullptr);
  EXPECT_GT(GrammarBytes(*big), 2 * one + one / 2);
  s = cache.Stats();
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.evictions, 1u);
  cache.GetOrCompile("big", c.Of(std::string(1000, 'y')));
  EXPECT_EQ(c.calls.load(), 5);
}

TEST(GrammarCache, ZeroEntriesCompilesEveryTime) {
  GrammarCache cache({.max_entries = 0});
  Counted c;
  cache.GetOrCompile("k", c.Of("a"));
  cache.GetOrCompile("k", c.Of("a"));
  EXPECT_EQ(c.calls.load(), 2);
  EXPECT_EQ(cache.Stats().entries, 0u);
  EXPECT_EQ(cache.Stats().misses, 2u);
}

TEST(GrammarCache, FailedCompilesAreNotKept) {
  GrammarCache cache;
  int calls = 0;
  auto refused = [&calls]() -> std::shared_ptr<const Grammar> {
    ++calls;
    return CompileJsonSchema(R"({"contains": {"type": "integer"}})");
  };
  EXPECT_THROW(cache.GetOrCompile("k", refused), Error);
  EXPECT_THROW(cache.GetOrCompile("k", refused), Error);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache.Stats().entries, 0u);
  // The key is free again: a compile that succeeds is kept.
  Counted c;
  cache.GetOrCompile("k", c.Of("a"));
  cache.GetOrCompile("k", c.Of("a"));
  EXPECT_EQ(c.calls.load(), 1);
  // A null grammar is returned, not kept.
  int nulls = 0;
  auto none = [&nulls]() -> std::shared_ptr<const Grammar> { return ++nulls, nullptr; };
  EXPECT_EQ(cache.GetOrCompile("n", none), nullptr);
  EXPECT_EQ(cache.GetOrCompile("n", none), nullptr);
  EXPECT_EQ(nulls, 2);
}

// `threads` callers of one key. The first caller's compile waits until
// every other caller is waiting on it (counted as hits), so the test sees
// the in-flight path every time.
struct Outcome {
  int compiles = 0;
  int failures = 0;
  std::vector<std::shared_ptr<const Grammar>> got;  // per caller; null when it threw
  GrammarCacheStats stats;
};
Outcome RunConcurrently(int threads, const GrammarCache::Compile& make) {
  GrammarCache cache;
  std::atomic<int> compiles{0}, failures{0};
  auto compile = [&]() -> std::shared_ptr<const Grammar> {
    ++compiles;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (cache.Stats().hits < static_cast<std::uint64_t>(threads - 1) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return make();
  };
  Outcome o;
  o.got.assign(static_cast<std::size_t>(threads), nullptr);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        o.got[static_cast<std::size_t>(t)] = cache.GetOrCompile("same", compile);
      } catch (const Error&) {
        ++failures;
      }
    });
  }
  for (std::thread& t : pool) t.join();
  o.compiles = compiles.load();
  o.failures = failures.load();
  o.stats = cache.Stats();
  return o;
}

TEST(GrammarCache, ConcurrentCallersOfOneKeyCompileOnce) {
  const Outcome o =
      RunConcurrently(8, [] { return CompileJsonSchema(R"({"type": "array", "items": {"type": "integer"}})"); });
  EXPECT_EQ(o.compiles, 1);
  EXPECT_EQ(o.failures, 0);
  ASSERT_NE(o.got[0], nullptr);
  for (const auto& g : o.got) EXPECT_EQ(g.get(), o.got[0].get());
  EXPECT_EQ(o.stats.misses, 1u);
  EXPECT_EQ(o.stats.hits, 7u);
  EXPECT_EQ(o.stats.entries, 1u);
}

TEST(GrammarCache, ConcurrentCallersShareAFailureAndKeepNothing) {
  const Outcome o = RunConcurrently(6, [] { return CompileJsonSchema(R"({"not": {"minimum": 3}})"); });
  EXPECT_EQ(o.compiles, 1);
  EXPECT_EQ(o.failures, 6);
  EXPECT_EQ(o.stats.entries, 0u);
}

// Many threads, few keys, a small bound: every caller gets the grammar of
// its key (checked by matching), whatever was evicted meanwhile.
TEST(GrammarCache, ManyThreadsManyKeysStayConsistent) {
  GrammarCache cache({.max_entries = 3});
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 8; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string text = "k" + std::to_string((t * 7 + i) % 5);
        const auto g = cache.GetOrCompile(text, [&text] { return LiteralGrammar(text); });
        GrammarMatcher m(g, testing::ByteVocab(), {0});
        if (!m.AcceptBytes(text) || !m.CanEnd()) ++wrong;
      }
    });
  }
  for (std::thread& t : pool) t.join();
  EXPECT_EQ(wrong.load(), 0);
  const GrammarCacheStats s = cache.Stats();
  EXPECT_EQ(s.hits + s.misses, 1600u);
  EXPECT_LE(s.entries, 3u);
  EXPECT_EQ(s.misses - s.entries, s.evictions);
}

TEST(GrammarCache, MatchersOverASharedGrammarKeepTheirOwnState) {
  GrammarCache cache;
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})";
  auto compile = [&schema] { return CompileJsonSchema(schema); };
  const auto g = cache.GetOrCompile("s", compile);
  GrammarMatcher first(g, testing::ByteVocab(), {0});
  ASSERT_TRUE(first.AcceptBytes(R"({"a": 1)"));
  GrammarMatcher second(cache.GetOrCompile("s", compile), testing::ByteVocab(), {0});
  EXPECT_FALSE(second.CanAcceptBytes("}"));  // starts at the document's start
  EXPECT_TRUE(second.AcceptBytes(R"({"a": 22})"));
  EXPECT_TRUE(second.CanEnd());
  EXPECT_TRUE(first.AcceptBytes("}"));
  EXPECT_TRUE(first.CanEnd());
}

TEST(GrammarBytes, CountsRulesAndALazyGrammarsParts) {
  const auto small = CompileJsonSchema(R"({"type": "integer"})");
  const auto large = CompileJsonSchema(
      R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 40}, "b": {"type": "array"}}})");
  EXPECT_GT(GrammarBytes(*large), GrammarBytes(*small));
  const auto lazy = LazyGrammar(large, {.trigger = LiteralGrammar("<call>")});
  EXPECT_GT(GrammarBytes(*lazy), GrammarBytes(*large) + GrammarBytes(*LiteralGrammar("<call>")));
}

}  // namespace
}  // namespace kvshare
