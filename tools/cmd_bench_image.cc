// `kvshare bench-image`: how long an mmproj's vision encoder takes on one
// image, per thread count: Preprocess (resize and normalize) and Encode (the
// tower and projector: what llama-mtmd-cli logs as "image slice encoded in"),
// median / min / max over repetitions after warm-up runs, thread counts taken
// in turn each repetition (so a drifting machine hits them alike); also the
// process CPU seconds of Encode (all threads): on a shared machine the wall
// time of a 1-thread run grows with the load, its CPU time much less. Checks that
// every run gives bit-identical soft tokens, whatever the thread count.
// bench/vision_peer.py compares it with llama.cpp on the same files.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_report.h"
#include "commands.h"
#include "image_flags.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/vision/image.h"
#include "kvshare/vision/vision_encoder.h"

namespace kvshare::cli {
namespace {

struct BenchImageOptions {
  std::string mmproj;
  std::string image;
  std::vector<int> threads = {1, 2};
  int repetitions = 3;
  int warmup = 1;
  int max_soft_tokens = 280;
  std::string precision = "auto";
  std::string json;
  std::string dump;
};

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void RunBenchImage(const BenchImageOptions& o) {
  std::ifstream in(o.image, std::ios::binary);
  if (!in) throw Error("--image " + o.image + ": cannot open the file");
  const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const Image image = DecodeImage(bytes);
  auto t0 = std::chrono::steady_clock::now();
  const std::unique_ptr<VisionEncoder> enc =
      VisionEncoder::Load(o.mmproj, {.precision = EncoderPrecisionFromName(o.precision, "vision")});
  const double load_s = Since(t0);
  const VisionConfig& c = enc->config();
  const PreprocessOptions po{.max_soft_tokens = o.max_soft_tokens};
  const auto load_before = LoadAverage();

  std::map<int, std::vector<double>> pre, encode, encode_cpu;
  std::vector<float> first;
  bool identical = true;
  int tokens = 0, height = 0, width = 0;
  for (int rep = -o.warmup; rep < o.repetitions; ++rep) {  // rep < 0: warm-up (pages in the weights)
    for (int threads : o.threads) {
      ThreadPool pool(threads);
      t0 = std::chrono::steady_clock::now();
      const std::vector<PixelTensor> px = enc->Preprocess(image, po);
      const double pre_s = Since(t0);
      t0 = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      const std::vector<float> out = enc->Encode(px.front(), &pool);
      const double enc_s = Since(t0);
      const double cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
      if (first.empty()) {
        first = out;
        tokens = enc->TokensFor(px.front());
        height = px.front().height;
        width = px.front().width;
      } else if (out != first) {
        identical = false;
      }
      if (rep >= 0) {
        pre[threads].push_back(pre_s);
        encode[threads].push_back(enc_s);
        encode_cpu[threads].push_back(cpu_s);
      }
    }
  }
  const auto load_after = LoadAverage();

  std::printf("mmproj %s (%s, %d layers, width %d, precision %s), image %s -> %d x %d px, %d tokens; load %.2f s\n",
              o.mmproj.c_str(), ProjectorTypeName(c.projector), c.n_layer, c.n_embd,
              EncoderPrecisionName(enc->precision()), o.image.c_str(), width, height, tokens, load_s);
  std::printf("%7s  %-10s %10s %10s %10s\n", "threads", "step", "median s", "min s", "max s");
  nlohmann::json results = nlohmann::json::array();
  for (int threads : o.threads) {
    for (const auto& [step, times] : {std::pair{"preprocess", &pre[threads]}, std::pair{"encode", &encode[threads]},
                                      std::pair{"encode_cpu", &encode_cpu[threads]}}) {
      const Stat s = Summarize(*times);
      std::printf("%7d  %-10s %10.3f %10.3f %10.3f\n", threads, step, s.median, s.min, s.max);
      results.push_back({{"threads", threads},
                         {"step", step},
                         {"seconds_median", s.median},
                         {"seconds_min", s.min},
                         {"seconds_max", s.max},
                         {"seconds", *times}});
    }
  }
  std::printf("soft tokens identical across runs and thread counts: %s\n", identical ? "yes" : "NO");
  std::printf("load average before %.2f, after %.2f\n", load_before[0], load_after[0]);
  if (!o.json.empty()) {
    const nlohmann::json doc = {{"mmproj", o.mmproj},
                                {"projector", ProjectorTypeName(c.projector)},
                                {"precision", EncoderPrecisionName(enc->precision())},
                                {"image", o.image},
                                {"pixels", {height, width}},
                                {"tokens", tokens},
                                {"kvshare_revision", Revision()},
                                {"cpu_model", CpuModel()},
                                {"load_average_before", load_before},
                                {"load_average_after", load_after},
                                {"load_seconds", load_s},
                                {"repetitions", o.repetitions},
                                {"identical_across_threads", identical},
                                {"results", results}};
    std::ofstream out(o.json);
    out << doc.dump(2) << "\n";
    if (!out) throw Error("could not write --json file '" + o.json + "'");
  }
  if (!o.dump.empty()) {
    std::ofstream out(o.dump, std::ios::binary);
    out.write(reinterpret_cast<const char*>(first.data()), static_cast<std::streamsize>(first.size() * sizeof(float)));
    if (!out) throw Error("could not write --dump file '" + o.dump + "'");
  }
  if (!identical) throw Error("the soft tokens differ between runs or thread counts");
}

}  // namespace

void RegisterBenchImage(CLI::App& app) {
  static BenchImageOptions o;
  auto* cmd = app.add_subcommand("bench-image",
                                 "Preprocessing and encoding time of one image through an mmproj's vision encoder, "
                                 "per thread count (llama-mtmd-cli's \"image slice encoded\" time)");
  cmd->add_option("--mmproj", o.mmproj, "The vision encoder: an mmproj GGUF")->required();
  cmd->add_option("--image", o.image, "The image (JPEG, PNG, GIF, BMP, WebP)")->required();
  cmd->add_option("--threads", o.threads, "Comma-separated thread counts, each run in turn")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--repetitions", o.repetitions, "Timed runs per thread count")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed runs per thread count first (page in the weights)")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_option("--image-max-soft-tokens", o.max_soft_tokens, "Gemma 4: the soft-token budget")
      ->check(CLI::IsMember({70, 140, 280, 560, 1120}))
      ->capture_default_str();
  AddVisionPrecisionFlag(*cmd, o.precision);
  cmd->add_option("--json", o.json, "Also write the results and machine info to this JSON file");
  cmd->add_option("--dump", o.dump,
                  "Also write the first run's soft tokens, float32 [tokens, n_embd_text] row-major, to this file "
                  "(bench/vision_precision.py compares precisions)");
  cmd->callback([] { RunBenchImage(o); });
}

}  // namespace kvshare::cli
