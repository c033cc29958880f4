// `kvshare bench`: prefill and decode speed of a GGUF model, llama-bench style
// (pp512: a 512-token prompt in one Forward; tg128: 128 single-token decode
// steps after it; with --depth d, both run after d tokens of context, as
// llama-bench -d), for each thread count, as the median and range over
// repetitions. With --spec / --draft-model, also tg through the generator
// after the prompt without and with speculative decoding, alternating, and
// the acceptance rate. Prints a table; --json writes the numbers and the machine.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_report.h"
#include "commands.h"
#include "device_flags.h"
#include "kv_options.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/model.h"
#include "kvshare/quant/kernel_level.h"
#include "kvshare/runtime/generator.h"
#include "kvshare/runtime/sampler.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "model_path.h"
#include "spec_flags.h"

namespace kvshare::cli {
namespace {

struct BenchCliOptions {
  std::string model;
  int prompt_tokens = 512;
  int gen_tokens = 128;
  std::vector<int> threads = {1, 2};
  std::vector<int> depths = {0};
  std::vector<int> batches;  // extra tests: this many rows decoding at once
  int repetitions = 3;
  std::string kv_dtype = "f32";
  std::string attention_precision = "f32";
  std::string weight_precision = "f32";
  std::string device = "cpu";
  std::vector<std::string> kernels;  // matmul levels alternated within each repetition
  bool no_prefill_shortcut = false;
  SpecFlags spec;
  std::string json;
};

// Prompt text, repeated until the prompt is long enough: ordinary prose, so the
// ids are typical ones (the speed does not depend on them).
constexpr const char* kPromptText =
    "The history of the printing press begins in the fifteenth century, when movable metal type made books "
    "cheaper to produce. Within fifty years printers worked in more than two hundred cities, and the number of "
    "books in Europe grew from thousands to millions. Scholars exchanged corrected editions, merchants printed "
    "price lists, and governments published laws that anyone who could read was able to check. ";

// Exactly n ids: <bos>, then kPromptText tokenized and repeated.
std::vector<std::int32_t> BenchPrompt(const Tokenizer& tok, int n) {
  const std::vector<std::int32_t> piece = tok.Encode(kPromptText, EncodeOptions{.add_bos = false});
  std::vector<std::int32_t> ids;
  if (tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  while (static_cast<int>(ids.size()) < n) ids.insert(ids.end(), piece.begin(), piece.end());
  ids.resize(static_cast<std::size_t>(n));
  return ids;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct RunTimes {
  double prefill_seconds = 0;  // one Forward over the prompt
  double decode_seconds = 0;   // gen Forward calls of one token, greedy sampling included
};

// From `depth` tokens of context (the state is rewound to it): the prompt in one
// Forward, then back to `depth` and `gen` greedy decode steps (end-of-generation
// tokens are fed back like any other, so every run does the same work).
RunTimes RunOnce(const Model& model, ModelState& state, std::int64_t depth, const std::vector<std::int32_t>& prompt,
                 int gen, ThreadPool* pool) {
  Sampler greedy(SamplerOptions{});
  RunTimes t;
  state.Rewind(0, depth);
  auto t0 = std::chrono::steady_clock::now();
  std::int32_t next = greedy.Sample(model.Forward(state, prompt, pool));
  t.prefill_seconds = Seconds(t0);
  state.Rewind(0, depth);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < gen; ++i) {
    const std::int32_t one[1] = {next};
    next = greedy.Sample(model.Forward(state, one, pool));
  }
  t.decode_seconds = Seconds(t0);
  return t;
}

// `batch` rows decoding at once (a server's step): every row gets `context`
// (untimed, one ForwardBatch), then `gen` steps of one token per row in one
// ForwardBatch each, greedy per row. Returns the seconds of the steps.
double BatchedDecodeSeconds(const Model& model, ModelState& state, int batch, std::span<const std::int32_t> context,
                            int gen, ThreadPool* pool) {
  std::vector<BatchEntry> entries;
  for (int r = 0; r < batch; ++r) {
    state.Rewind(r, 0);
    entries.push_back({.row = r, .tokens = context});
  }
  const std::size_t V = static_cast<std::size_t>(model.config().n_vocab);
  std::vector<Sampler> greedy(static_cast<std::size_t>(batch), Sampler(SamplerOptions{}));
  std::vector<std::int32_t> next(static_cast<std::size_t>(batch));
  const auto sample_all = [&](std::span<const float> logits) {
    for (std::size_t r = 0; r < next.size(); ++r) next[r] = greedy[r].Sample(logits.subspan(r * V, V));
  };
  sample_all(model.ForwardBatch(state, entries, pool));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < gen; ++i) {
    for (std::size_t r = 0; r < next.size(); ++r) entries[r].tokens = std::span<const std::int32_t>(&next[r], 1);
    sample_all(model.ForwardBatch(state, entries, pool));
  }
  return Seconds(t0);
}

// One row of the table: the test's name, its matmul kernel level and
// attention precision, rows per step, tokens per run and tok/s per
// repetition.
struct BenchTest {
  std::string test, kernel, attention;
  int batch = 1, tokens = 0;
  std::vector<double> rates;
  int first = -1;  // with --kernels: the same test at the first level (its index), for paired ratios
};

// tg through the generator after the prompt, without and with speculation,
// runs alternating: gen tokens from decode steps each (end tokens fed back),
// greedy, so both make the same tokens.
struct SpecBench {
  std::vector<double> plain, spec;  // tok/s per repetition
  SpeculativeStats stats;           // of the last speculative run
};
SpecBench RunSpecBench(const Model& model, const Tokenizer& tok, const std::vector<std::int32_t>& prompt, int gen,
                       int repetitions, const BenchCliOptions& o, ThreadPool* pool) {
  const ModelStateOptions so{.max_context = static_cast<int>(prompt.size()) + gen + 1,
                             .kv_dtype = ParseKvDtype(o.kv_dtype),
                             .attention_precision = ParseAttentionPrecision(o.attention_precision,
                                                                            ParseKvDtype(o.kv_dtype))};
  const Speculation spec =
      MakeSpeculation(o.spec, model, {.max_context = so.max_context, .kv_dtype = so.kv_dtype, .pool = pool}, o.device);
  Generator plain(model, tok, pool, so), specd(model, tok, pool, so);
  GenerateOptions go;
  go.ignore_eos = true;
  GenerateOptions gs = go;
  gs.drafter = spec.drafter.get();
  gs.speculative = spec.options;
  SpecBench b;
  const auto run = [&](Generator& g, const GenerateOptions& opt, int n) {
    g.Reset(opt.drafter);
    GenerateOptions one = opt;
    one.max_new_tokens = n + 1;  // the first token comes from the prompt's logits
    const GenerateStats st = g.Generate(prompt, one, nullptr);
    b.stats = st.speculative;
    return n / st.decode_seconds;
  };
  run(plain, go, std::min(gen, 8));  // warm-up
  run(specd, gs, std::min(gen, 8));
  for (int r = 0; r < repetitions; ++r) {
    b.plain.push_back(run(plain, go, gen));
    b.spec.push_back(run(specd, gs, gen));
  }
  return b;
}

// A --kernels entry: a matmul level, then optionally ":f32" or ":bf16" for
// the attention products (--attention-precision otherwise). Each attention
// precision in use gets its own ModelState, so its own KV cache. Without
// --kernels the run has one entry, unlabelled: the process's level and
// --attention-precision.
struct KernelEntry {
  std::string label, level, attention;
  std::size_t state = 0;  // index into the run's states
};

std::vector<KernelEntry> ParseKernelEntries(const BenchCliOptions& o, std::vector<std::string>* attentions) {
  const std::string start = MatMulKernelName();
  if (o.kernels.empty()) {
    attentions->push_back(o.attention_precision);
    return {KernelEntry{"", start, o.attention_precision}};
  }
  std::vector<KernelEntry> entries;
  for (const std::string& k : o.kernels) {
    const std::size_t colon = k.find(':');
    KernelEntry e{k, k.substr(0, colon), colon == std::string::npos ? o.attention_precision : k.substr(colon + 1)};
    if (e.attention != "f32" && e.attention != "bf16")
      throw Error("--kernels entry '" + k + "': the attention precision after ':' must be f32 or bf16");
    // Both throw for what this CPU cannot run, naming what it can.
    SetMatMulKernel(e.level);
    ParseAttentionPrecision(e.attention, ParseKvDtype(o.kv_dtype));
    const auto at = std::find(attentions->begin(), attentions->end(), e.attention);
    e.state = static_cast<std::size_t>(at - attentions->begin());
    if (at == attentions->end()) attentions->push_back(e.attention);
    entries.push_back(e);
  }
  SetMatMulKernel(start);
  return entries;
}

void RunBench(const BenchCliOptions& o) {
  if (o.threads.empty()) throw Error("--threads needs at least one thread count, e.g. --threads 1,2");
  for (int t : o.threads) {
    if (t < 1 || t > 1024) throw Error("--threads entries must be in [1, 1024], got " + std::to_string(t));
  }
  CheckSpecFlags(o.spec, o.device);
  if (!o.kernels.empty()) {
    if (o.device != "cpu")
      throw Error("--kernels compares the CPU's matmul kernel levels; drop it with --device " + o.device);
    if (SpecRequest(o.spec).enabled())
      throw Error("--kernels cannot be combined with --spec or --draft-model; measure speculation at one level");
  }
  std::vector<std::string> attentions;  // one ModelState each
  const std::vector<KernelEntry> entries = ParseKernelEntries(o, &attentions);
  const std::string path = ResolveModel(o.model);
  const std::unique_ptr<Model> model =
      Placement(o.device).Apply(LoadModel(path, {.weight_precision = ParseWeightPrecision(o.weight_precision)}));
  const Tokenizer tok(ReadVocab(model->gguf()));
  const std::vector<std::int32_t> prompt = BenchPrompt(tok, o.prompt_tokens);
  const int max_depth = *std::max_element(o.depths.begin(), o.depths.end());
  // The batched tests append the prompt and then gen tokens to each row.
  const int context = max_depth + std::max(o.prompt_tokens, o.gen_tokens) + (o.batches.empty() ? 0 : o.gen_tokens);
  if (context > model->config().context_length) {
    throw Error(
        "the deepest --depth plus the longer of --prompt-tokens and --gen-tokens (plus --gen-tokens again with "
        "--batch) is " +
        std::to_string(context) + " tokens, more than the model's context length " +
        std::to_string(model->config().context_length));
  }
  // Sliding layers keep every position when there is depth, so each test starts
  // from the same context by a Rewind instead of a new fill.
  const int max_batch = o.batches.empty() ? 1 : *std::max_element(o.batches.begin(), o.batches.end());
  std::vector<std::unique_ptr<ModelState>> states;
  for (const std::string& attention : attentions) {
    const ModelStateOptions so{.max_context = context,
                               .kv_dtype = ParseKvDtype(o.kv_dtype),
                               .attention_precision = ParseAttentionPrecision(attention, ParseKvDtype(o.kv_dtype)),
                               .max_batch = max_batch,
                               .exact_rewind = max_depth > 0,
                               .prefill_shortcut = !o.no_prefill_shortcut};
    states.push_back(model->NewState(so));
  }
  ModelState* const state = states.front().get();
  const std::string name(model->gguf().GetStringOpt("general.name").value_or(model->config().architecture));
  const auto load_before = LoadAverage();
  std::string kernel = MatMulKernelName();
  if (!o.kernels.empty()) {
    kernel.clear();
    for (const KernelEntry& e : entries) kernel += (kernel.empty() ? "" : ", ") + e.label;
    kernel += " (alternating within each repetition)";
  }
  const std::string revision = Revision();
  const unsigned cpus = std::thread::hardware_concurrency();
  const std::string pp = "pp" + std::to_string(o.prompt_tokens), tg = "tg" + std::to_string(o.gen_tokens);

  std::printf("kvshare bench  model %s (%s)  kvshare %s\n", path.c_str(), name.c_str(), revision.c_str());
  std::printf("cpu %s, %u logical CPUs, matmul kernel %s, load average %.2f %.2f %.2f\n", CpuModel().c_str(), cpus,
              kernel.c_str(), load_before[0], load_before[1], load_before[2]);
  std::printf("%s: prompt of %d tokens in one Forward; %s: %d greedy decode steps; each after d tokens of context\n",
              pp.c_str(), o.prompt_tokens, tg.c_str(), o.gen_tokens);
  std::printf("device %s, KV cache %s, %zu bytes (%zu without KV sharing), attention %s, float weights %s%s%s\n",
              o.device.c_str(), o.kv_dtype.c_str(), state->kv_bytes(), state->kv_cache().Memory().bytes_without_sharing,
              o.attention_precision.c_str(), o.weight_precision.c_str(),
              max_depth > 0 ? ", sliding layers full length" : "",
              o.no_prefill_shortcut ? ", prefill short-cut off" : "");
  std::printf("%d repetitions after a warm-up; tok/s median [min, max]\n\n", o.repetitions);
  std::printf("%7s  %-24s %10s %10s %10s\n", "threads", "test", "tok/s", "min", "max");
  std::fflush(stdout);

  nlohmann::json results = nlohmann::json::array();
  nlohmann::json spec_info = nlohmann::json::array();
  std::vector<std::int32_t> filler;  // context for the depths: the prompt text, repeated
  for (std::size_t i = 0; static_cast<int>(filler.size()) < max_depth; ++i) filler.push_back(prompt[i % prompt.size()]);
  for (int threads : o.threads) {
    ThreadPool pool(threads);
    for (int depth : o.depths) {
      // The context (untimed; the same for every thread count), then a warm-up
      // that faults in the weights and the cache buffers.
      for (const auto& st : states) {
        st->Reset();
        if (depth > 0)
          model->Forward(*st, std::span<const std::int32_t>(filler).first(static_cast<std::size_t>(depth)), &pool);
      }
      // With --kernels, every entry runs once per repetition, in an order
      // rotating with the repetition: their ratios come from runs seconds
      // apart.
      const std::size_t levels = entries.size();
      // Entry k's level set, and its state.
      const auto use = [&](std::size_t k) -> ModelState& {
        SetMatMulKernel(entries[k].level);
        return *states[entries[k].state];
      };
      const auto tag = [&](std::size_t k) {
        return entries[k].label.empty() ? std::string() : " [" + entries[k].label + "]";
      };
      for (std::size_t k = 0; k < levels; ++k) {
        ModelState& st = use(k);
        RunOnce(*model, st, depth,
                std::vector<std::int32_t>(prompt.begin(), prompt.begin() + std::min(o.prompt_tokens, 64)),
                std::min(o.gen_tokens, 8), &pool);
      }
      std::vector<std::vector<double>> pre(levels), dec(levels);
      for (int r = 0; r < o.repetitions; ++r) {
        for (std::size_t i = 0; i < levels; ++i) {
          const std::size_t k = (static_cast<std::size_t>(r) + i) % levels;
          const RunTimes t = RunOnce(*model, use(k), depth, prompt, o.gen_tokens, &pool);
          pre[k].push_back(o.prompt_tokens / t.prefill_seconds);
          dec[k].push_back(o.gen_tokens / t.decode_seconds);
        }
      }
      const std::string at = depth > 0 ? " @ d" + std::to_string(depth) : "";
      std::vector<BenchTest> tests;
      for (std::size_t k = 0; k < levels; ++k) {
        const int f = k > 0 ? 0 : -1;
        tests.push_back({pp + at + tag(k), entries[k].level, entries[k].attention, 1, o.prompt_tokens, pre[k], f});
        tests.push_back(
            {tg + at + tag(k), entries[k].level, entries[k].attention, 1, o.gen_tokens, dec[k], f < 0 ? -1 : 1});
      }
      // Batched decode: each row after the depth's context and the prompt.
      std::vector<std::int32_t> row_context(filler.begin(), filler.begin() + depth);
      row_context.insert(row_context.end(), prompt.begin(), prompt.end());
      for (int b : o.batches) {
        for (std::size_t k = 0; k < levels; ++k) {
          BatchedDecodeSeconds(*model, use(k), b, row_context, std::min(o.gen_tokens, 8), &pool);  // warm-up
        }
        std::vector<std::vector<double>> agg(levels);
        for (int r = 0; r < o.repetitions; ++r) {
          for (std::size_t i = 0; i < levels; ++i) {
            const std::size_t k = (static_cast<std::size_t>(r) + i) % levels;
            agg[k].push_back(static_cast<double>(b) * o.gen_tokens /
                             BatchedDecodeSeconds(*model, use(k), b, row_context, o.gen_tokens, &pool));
          }
        }
        const int first = static_cast<int>(tests.size());
        for (std::size_t k = 0; k < levels; ++k) {
          tests.push_back({tg + " b" + std::to_string(b) + at + tag(k), entries[k].level, entries[k].attention, b,
                           o.gen_tokens, agg[k], k > 0 ? first : -1});
        }
      }
      if (SpecRequest(o.spec).enabled() && depth == o.depths.front()) {
        const SpecBench sb = RunSpecBench(*model, tok, prompt, o.gen_tokens, o.repetitions, o, &pool);
        const std::string name = o.spec.spec.empty() ? "draft" : o.spec.spec;
        tests.push_back({tg + " gen", MatMulKernelName(), o.attention_precision, 1, o.gen_tokens, sb.plain});
        tests.push_back({tg + " gen+" + name, MatMulKernelName(), o.attention_precision, 1, o.gen_tokens, sb.spec});
        spec_info.push_back({{"threads", threads},
                             {"drafter", name},
                             {"verify_steps", sb.stats.rounds},
                             {"drafted", sb.stats.drafted},
                             {"accepted", sb.stats.accepted},
                             {"speedup_median", Summarize(sb.spec).median / Summarize(sb.plain).median}});
      }
      for (const auto& [test, level, attn, batch, tokens, rates, first] : tests) {
        const Stat s = Summarize(rates);
        std::printf("%7d  %-24s %10.1f %10.1f %10.1f", threads, test.c_str(), s.median, s.min, s.max);
        // Paired: this level's tok/s over the first level's, repetition by
        // repetition (runs seconds apart).
        std::vector<double> paired;
        if (first >= 0) {
          const std::vector<double>& base = tests[static_cast<std::size_t>(first)].rates;
          for (std::size_t r = 0; r < rates.size(); ++r) paired.push_back(rates[r] / base[r]);
          std::printf("   %.2fx %s (paired median)", Summarize(paired).median, o.kernels.front().c_str());
        }
        std::printf("\n");
        std::fflush(stdout);
        results.push_back({{"threads", threads},
                           {"test", test},
                           {"kernel", level},
                           {"attention_precision", attn},
                           {"depth", depth},
                           {"batch", batch},
                           {"tokens", tokens},
                           {"tok_s_median", s.median},
                           {"tok_s_min", s.min},
                           {"tok_s_max", s.max},
                           {"tok_s", rates}});
        if (first >= 0) {
          results.back()["ratio_to_kernel"] = o.kernels.front();
          results.back()["ratios"] = paired;
        }
      }
    }
  }
  const auto load_after = LoadAverage();
  for (const nlohmann::json& j : spec_info) {
    std::printf(
        "\nspeculative (%s, %d threads): accepted %lld / drafted %lld (%.1f%%) in %lld verify steps; "
        "speed-up %.2fx (medians)",
        j["drafter"].get<std::string>().c_str(), j["threads"].get<int>(), j["accepted"].get<long long>(),
        j["drafted"].get<long long>(), 100.0 * j["accepted"].get<double>() / std::max(1.0, j["drafted"].get<double>()),
        j["verify_steps"].get<long long>(), j["speedup_median"].get<double>());
  }
  std::printf("\nload average after: %.2f %.2f %.2f\n", load_after[0], load_after[1], load_after[2]);

  if (!o.json.empty()) {
    const nlohmann::json doc = {
        {"model", path},
        {"model_name", name},
        {"architecture", model->config().architecture},
        {"kvshare_revision", revision},
        {"cpu_model", CpuModel()},
        {"cpu_count", cpus},
        {"matmul_kernel", kernel},
        {"load_average_before", load_before},
        {"load_average_after", load_after},
        {"prompt_tokens", o.prompt_tokens},
        {"gen_tokens", o.gen_tokens},
        {"depths", o.depths},
        {"kv_dtype", o.kv_dtype},
        {"attention_precision", o.attention_precision},
        {"weight_precision", o.weight_precision},
        {"device", o.device},
        {"kv_bytes", state->kv_bytes()},
        {"kv_bytes_without_sharing", state->kv_cache().Memory().bytes_without_sharing},
        {"prefill_shortcut", !o.no_prefill_shortcut},
        {"repetitions", o.repetitions},
        {"results", results},
        {"speculative", spec_info},
    };
    std::ofstream out(o.json);
    out << doc.dump(2) << "\n";
    if (!out) throw Error("could not write --json file '" + o.json + "'");
    std::printf("wrote %s\n", o.json.c_str());
  }
}

}  // namespace

void RegisterBench(CLI::App& app) {
  static BenchCliOptions o;
  auto* cmd = app.add_subcommand(
      "bench",
      "Prefill and decode speed (tok/s; llama-bench's pp / tg) of a GGUF model per thread count, context depth "
      "and batch size; with --spec / --draft-model, decode without and with speculative decoding");
  AddModelOption(*cmd, o.model);
  cmd->add_option("--prompt-tokens", o.prompt_tokens, "Prompt length for the prefill test")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--gen-tokens", o.gen_tokens, "Decode steps for the generation test")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "Comma-separated thread counts, each run in turn")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--repetitions", o.repetitions, "Timed runs per thread count (median, min and max reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--depth", o.depths,
                  "Comma-separated context depths: each test runs after d tokens of context (llama-bench -d)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1 << 22))
      ->capture_default_str();
  cmd->add_option("--batch", o.batches,
                  "Comma-separated batch sizes B: also tg with B rows decoding at once, one ForwardBatch per step "
                  "(a server's step; aggregate tok/s over all rows; each row holds the depth's context and the prompt)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  AddKvDtypeOption(*cmd, o.kv_dtype);
  AddAttentionPrecisionOption(*cmd, o.attention_precision);
  AddWeightPrecisionOption(*cmd, o.weight_precision);
  AddDeviceOption(*cmd, o.device);
  AddSpecFlags(*cmd, o.spec);
  cmd->add_option("--kernels", o.kernels,
                  "Comma-separated matmul kernel levels (KVSHARE_KERNEL's names: amx, avx512vnni, avx2, scalar, "
                  "float), each run once per repetition in an order rotating with it, so their ratios come from "
                  "runs seconds apart in one process; the tests are named with the level, e.g. pp512 [amx]. An "
                  "entry LEVEL:f32 or LEVEL:bf16 also sets the attention precision (its own KV cache), e.g. "
                  "avx512vnni:f32,amx:bf16")
      ->delimiter(',');
  cmd->add_flag("--no-prefill-shortcut", o.no_prefill_shortcut,
                "Run every layer on every prompt token (to measure what the prefill short-cut saves)");
  cmd->add_option("--json", o.json, "Also write the results and machine info to this JSON file");
  cmd->callback([] { RunBench(o); });
}

}  // namespace kvshare::cli
