// kvshare/grammar/grammar_cache.h — compiled grammars kept across requests
// (grammar layer, src/grammar/grammar_cache.cc). Clients of structured output
// send the same schema with every request, and a schema can take seconds to
// compile (docs/serving.md "Grammar cache"); the server keeps the compiled
// Grammar objects, which are immutable (grammar.h: each request's state is
// its own GrammarMatcher), and hands the same one to every request whose key
// matches.
//
// The key is the caller's: a string that must name every input of the
// compile (the schema text, every option, the vocabulary the grammar's token
// ids come from): two compiles whose keys are equal must give the same
// grammar. The server builds it in server/grammar_key.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kvshare/grammar/grammar.h"

namespace kvshare {

struct GrammarCacheOptions {
  // Grammars kept, least recently used evicted first; 0: none (every
  // GetOrCompile compiles).
  std::size_t max_entries = 256;
  // Their total size (GrammarBytes plus the key's length), the same
  // eviction order; a grammar larger than this on its own is returned and
  // not kept.
  std::size_t max_bytes = std::size_t{256} << 20;
};

struct GrammarCacheStats {
  std::uint64_t hits = 0;       // GetOrCompile calls answered from the cache (or by another call's compile)
  std::uint64_t misses = 0;     // calls that compiled
  std::uint64_t evictions = 0;  // entries dropped to fit the bounds
  std::size_t entries = 0;
  std::size_t bytes = 0;  // GrammarBytes of the entries plus their keys' lengths
};

// The memory a grammar holds (its rules, byte sets and tables, a lazy
// grammar's body and trigger included), bytes, approximate (container
// overheads estimated).
std::size_t GrammarBytes(const Grammar& grammar);

// Thread-safe. Concurrent calls with the same key compile once: the first
// compiles (outside the cache's lock), the others wait for it and share its
// grammar (counted as hits). A compile that throws is not kept: the calls
// waiting on it get the same exception, and the next call compiles again.
class GrammarCache {
 public:
  explicit GrammarCache(GrammarCacheOptions options = {});
  ~GrammarCache();
  GrammarCache(const GrammarCache&) = delete;
  GrammarCache& operator=(const GrammarCache&) = delete;

  using Compile = std::function<std::shared_ptr<const Grammar>()>;
  // The grammar kept under `key`, or compile()'s, kept under `key` (a null
  // result is returned and not kept). Rethrows what compile() throws.
  // compile() must not ask this cache for the same key (it would wait on
  // itself).
  std::shared_ptr<const Grammar> GetOrCompile(const std::string& key, const Compile& compile);

  GrammarCacheStats Stats() const;
  const GrammarCacheOptions& options() const { return options_; }

 private:
  struct Impl;
  GrammarCacheOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvshare
