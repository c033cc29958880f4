// JSON Schema compile time and per-token mask time over many schemas
// (kvshare/grammar/grammar.h), for the targets compile p99 <= 20 ms and
// mask p99 <= 10% of the default model's decode step (DecodeStep in
// grammar_mask_bench.cc, run in the same command):
//   python3 tests/tools/schema_corpus.py --dump schemas.jsonl --suite
//   KVSHARE_SCHEMA_BENCH=schemas.jsonl kvshare_bench --benchmark_filter='Schema|DecodeStep/1'
// SchemaCompile: every schema of the file (one {"schema": ...} a line)
// compiled once per iteration; counters p50_ms / p99_ms / max_ms over the
// schemas, compiled / schemas.
// SchemaMask: for each compiled schema a random walk of at most 64 tokens of
// the default model's vocabulary (a fresh matcher, as a request has: its
// lazy DFA starts cold), each token drawn uniformly from the mask,
// FillNextTokenMask timed before every token; p50_ms / p99_ms / max_ms over
// the masks after the first, first_* over each walk's first mask.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <time.h>

#include <nlohmann/json.hpp>

#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/model/model.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_default_path.h"

namespace kvshare {
namespace {

std::vector<std::string> Schemas() {
  std::vector<std::string> out;
  const char* path = std::getenv("KVSHARE_SCHEMA_BENCH");
  if (path == nullptr) return out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line).at("schema").dump());
  }
  return out;
}

void Quantiles(benchmark::State& state, std::vector<double> ms, const std::string& prefix = "") {
  if (ms.empty()) return;
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) { return ms[std::min(ms.size() - 1, static_cast<std::size_t>(q * ms.size()))]; };
  state.counters[prefix + "p50_ms"] = at(0.50);
  state.counters[prefix + "p99_ms"] = at(0.99);
  state.counters[prefix + "max_ms"] = ms.back();
  state.counters[prefix + "n"] = static_cast<double>(ms.size());
}

// This thread's CPU time in ms: the host is shared, and wall time there
// measures the neighbours (DecodeStep/threads:1's CPU column is the same
// clock on one thread).
double CpuMs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

void BM_SchemaCompile(benchmark::State& state) {
  const std::vector<std::string> schemas = Schemas();
  if (schemas.empty()) return state.SkipWithError("set KVSHARE_SCHEMA_BENCH to a schemas.jsonl");
  std::vector<double> ms;
  int compiled = 0;
  for (auto _ : state) {
    ms.clear();
    compiled = 0;
    for (const std::string& s : schemas) {
      const double t0 = CpuMs();
      try {
        benchmark::DoNotOptimize(CompileJsonSchema(s));
        ms.push_back(CpuMs() - t0);
        ++compiled;
      } catch (const Error&) {
      }
    }
  }
  Quantiles(state, ms);
  state.counters["compiled"] = compiled;
  state.counters["schemas"] = static_cast<double>(schemas.size());
}
BENCHMARK(BM_SchemaCompile)->Iterations(1)->Unit(benchmark::kMillisecond);

void BM_SchemaMask(benchmark::State& state) {
  const std::vector<std::string> schemas = Schemas();
  if (schemas.empty()) return state.SkipWithError("set KVSHARE_SCHEMA_BENCH to a schemas.jsonl");
  const std::string path = testing::DefaultModelPath();
  if (!std::filesystem::exists(path)) return state.SkipWithError("default model not found");
  const auto model = Model::Load(path);
  const Tokenizer tok(ReadVocab(model->gguf()));
  const auto trie = TokenTrie::FromTokenizer(tok);
  std::vector<std::shared_ptr<const Grammar>> grammars;
  std::vector<std::size_t> line;  // per grammar: its schema's line in the file
  for (std::size_t i = 0; i < schemas.size(); ++i) {
    try {
      grammars.push_back(CompileJsonSchema(schemas[i]));
      line.push_back(i + 1);
    } catch (const Error&) {
    }
  }
  std::vector<std::uint64_t> mask((static_cast<std::size_t>(trie->vocab_size()) + 63) / 64);
  std::vector<double> ms, first;  // first: each walk's first mask (a cold lazy DFA)
  std::vector<std::pair<double, std::size_t>> slow;  // (ms, schema line) of every mask
  std::vector<std::int32_t> allowed;
  for (auto _ : state) {
    ms.clear();
    first.clear();
    slow.clear();
    std::mt19937_64 rng(1);
    for (std::size_t gi = 0; gi < grammars.size(); ++gi) {
      GrammarMatcher m(grammars[gi], trie, {tok.eos_id()});
      for (int step = 0; step < 64; ++step) {
        const double t0 = CpuMs();
        m.FillNextTokenMask(mask);
        const double t = CpuMs() - t0;
        (step == 0 ? first : ms).push_back(t);
        slow.push_back({t, line[gi]});
        allowed.clear();
        for (std::size_t w = 0; w < mask.size(); ++w) {
          for (std::uint64_t b = mask[w]; b != 0; b &= b - 1) {
            allowed.push_back(static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(b))));
          }
        }
        if (allowed.empty() || (m.CanEnd() && rng() % 4 == 0)) break;
        m.AcceptToken(allowed[rng() % allowed.size()]);
      }
    }
  }
  Quantiles(state, ms);
  Quantiles(state, first, "first_");
  // The schemas of the slowest masks, for profiling them alone.
  std::sort(slow.rbegin(), slow.rend());
  for (std::size_t i = 0; i < std::min<std::size_t>(slow.size(), 8); ++i) {
    std::fprintf(stderr, "slow mask %.2f ms: schema line %zu\n", slow[i].first, slow[i].second);
  }
  state.counters["grammars"] = static_cast<double>(grammars.size());
}
BENCHMARK(BM_SchemaMask)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvshare
