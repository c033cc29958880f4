// `kvshare perplexity`: perplexity of a model over a text file, as llama.cpp's
// llama-perplexity computes it (runtime/perplexity.h): chunks of --ctx tokens,
// the second half of each scored; a progress line per chunk on stderr, then the
// final estimate with its standard error.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "commands.h"
#include "kv_options.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/perplexity.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_path.h"

namespace kvshare::cli {
namespace {

struct PerplexityCliOptions {
  std::string model;
  std::string file;
  int ctx = 512;
  int chunks = -1;
  int threads = 0;
  std::string kv_dtype = "f32";
  std::string attention_precision = "f32";
  std::string weight_precision = "f32";
};

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read text file '" + path + "' (check --file)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void RunPerplexity(const PerplexityCliOptions& o) {
  const std::string text = ReadText(o.file);
  const std::unique_ptr<Model> model =
      LoadModel(ResolveModel(o.model), {.weight_precision = ParseWeightPrecision(o.weight_precision)});
  const Tokenizer tok(ReadVocab(model->gguf()));
  const std::vector<std::int32_t> tokens = tok.Encode(text);  // <bos> as the vocabulary says, no special tokens
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  PerplexityOptions po{.n_ctx = o.ctx, .max_chunks = o.chunks};
  if (tok.bos_id() >= 0 && !tokens.empty() && tokens[0] == tok.bos_id()) po.bos = tok.bos_id();
  po.state.kv_dtype = ParseKvDtype(o.kv_dtype);
  po.state.attention_precision = ParseAttentionPrecision(o.attention_precision, po.state.kv_dtype);
  std::fprintf(stderr, "perplexity: %zu tokens, n_ctx %d, KV cache %s, %d threads\n", tokens.size(), o.ctx,
               o.kv_dtype.c_str(), threads);
  const auto t0 = std::chrono::steady_clock::now();
  const PerplexityResult r = ComputePerplexity(*model, tokens, po, &pool, [&](int done, int total, double ppl) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\r[%d/%d] PPL %.4f  (%.1f s, ETA %.0f s)   ", done, total, ppl, s, s / done * (total - done));
    std::fflush(stderr);
  });
  std::fprintf(stderr, "\n");
  std::printf("Final estimate: PPL = %.4f +/- %.5f  (%d chunks of %d tokens, %lld tokens scored)\n", r.ppl,
              r.ppl_stderr, r.chunks, o.ctx, static_cast<long long>(r.scored));
}

}  // namespace

void RegisterPerplexity(CLI::App& app) {
  static PerplexityCliOptions o;
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a model over a text file (as llama-perplexity)");
  AddModelOption(*cmd, o.model);
  cmd->add_option("-f,--file", o.file, "UTF-8 text file")->required();
  cmd->add_option("-c,--ctx", o.ctx, "Tokens per chunk (the second half of each is scored)")
      ->check(CLI::Range(4, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--chunks", o.chunks, "Score at most this many chunks (default: all)");
  cmd->add_option("--threads", o.threads, "Threads (0 = all cores)")->check(CLI::Range(0, 1024))->capture_default_str();
  AddKvDtypeOption(*cmd, o.kv_dtype);
  AddAttentionPrecisionOption(*cmd, o.attention_precision);
  AddWeightPrecisionOption(*cmd, o.weight_precision);
  cmd->callback([] { RunPerplexity(o); });
}

}  // namespace kvshare::cli
