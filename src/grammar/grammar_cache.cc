// Compiled grammars kept across requests (include/kvshare/grammar/grammar_cache.h):
// an LRU list bounded by entries and bytes, and the compiles in flight, so
// that concurrent requests for one key compile once.
#include "kvshare/grammar/grammar_cache.h"

#include <exception>
#include <future>
#include <list>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "grammar/grammar_ir.h"

namespace kvshare {
namespace {

// A node of a std::unordered_map or std::list: the value, a next pointer and
// the cached hash (libstdc++), rounded to the allocator's 16 bytes.
constexpr std::size_t kNodeOverhead = 32;

template <typename Map>
std::size_t MapBytes(const Map& m) {
  return m.bucket_count() * sizeof(void*) + m.size() * (sizeof(typename Map::value_type) + kNodeOverhead);
}

std::size_t IrBytes(const detail::GrammarIr& ir) {
  std::size_t n = sizeof ir + ir.elems.capacity() * sizeof(detail::GrammarElem) +
                  ir.sets.capacity() * sizeof(std::bitset<256>) + MapBytes(ir.string_frames) + MapBytes(ir.links);
  for (const auto& r : ir.rules) n += sizeof r + r.capacity() * sizeof(std::uint32_t);
  for (const auto& c : ir.chain_starts) n += sizeof c + c.capacity() * sizeof(std::uint32_t);
  return n;
}

}  // namespace

std::size_t GrammarBytes(const Grammar& grammar) {
  std::size_t n = sizeof grammar + IrBytes(grammar.ir);
  if (grammar.lazy) {
    n += sizeof *grammar.lazy;
    if (grammar.lazy->trigger) n += GrammarBytes(*grammar.lazy->trigger);
    for (const auto& [id, text] : grammar.lazy->token_text) {
      n += sizeof(std::pair<std::int32_t, std::string>) + text.capacity();
    }
  }
  if (grammar.body) n += GrammarBytes(*grammar.body);
  return n;
}

struct GrammarCache::Impl {
  struct Entry {
    std::string key;
    std::shared_ptr<const Grammar> grammar;
    std::size_t bytes = 0;
  };
  mutable std::mutex mu;
  std::list<Entry> lru;  // most recently used first
  // Keys can be as long as a schema: the index views the entry's copy.
  std::unordered_map<std::string_view, std::list<Entry>::iterator> index;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const Grammar>>> in_flight;
  GrammarCacheStats stats;

  // Under mu.
  void Insert(const GrammarCacheOptions& o, const std::string& key, std::shared_ptr<const Grammar> g) {
    const std::size_t bytes = GrammarBytes(*g) + key.size();
    if (bytes > o.max_bytes) return;
    lru.push_front({key, std::move(g), bytes});
    index[lru.front().key] = lru.begin();
    stats.bytes += bytes;
    while (lru.size() > o.max_entries || stats.bytes > o.max_bytes) {
      const Entry& last = lru.back();
      stats.bytes -= last.bytes;
      index.erase(std::string_view(last.key));
      lru.pop_back();
      ++stats.evictions;
    }
  }
};

GrammarCache::GrammarCache(GrammarCacheOptions options) : options_(options), impl_(std::make_unique<Impl>()) {}
GrammarCache::~GrammarCache() = default;

std::shared_ptr<const Grammar> GrammarCache::GetOrCompile(const std::string& key, const Compile& compile) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  if (auto it = m.index.find(key); it != m.index.end()) {
    m.lru.splice(m.lru.begin(), m.lru, it->second);
    ++m.stats.hits;
    return it->second->grammar;
  }
  if (auto it = m.in_flight.find(key); it != m.in_flight.end()) {
    std::shared_future<std::shared_ptr<const Grammar>> shared = it->second;
    ++m.stats.hits;
    lock.unlock();
    return shared.get();  // rethrows the compile's exception
  }
  ++m.stats.misses;
  if (options_.max_entries == 0 || options_.max_bytes == 0) {
    lock.unlock();
    return compile();
  }
  std::promise<std::shared_ptr<const Grammar>> done;
  m.in_flight.emplace(key, done.get_future().share());
  lock.unlock();
  std::shared_ptr<const Grammar> g;
  try {
    g = compile();
  } catch (...) {
    lock.lock();
    m.in_flight.erase(key);
    lock.unlock();
    done.set_exception(std::current_exception());
    throw;
  }
  lock.lock();
  m.in_flight.erase(key);
  if (g) m.Insert(options_, key, g);
  lock.unlock();
  done.set_value(g);
  return g;
}

GrammarCacheStats GrammarCache::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  GrammarCacheStats s = impl_->stats;
  s.entries = impl_->lru.size();
  return s;
}

}  // namespace kvshare
