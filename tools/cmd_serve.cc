// `kvshare serve`: the OpenAI-compatible HTTP server (server/server.h) with
// continuous batching and prompt caching, until SIGINT / SIGTERM drains it.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "device_flags.h"
#include "kv_options.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar_cache.h"
#include "kvshare/runtime/chat_template.h"
#include "model_path.h"
#include "server.h"
#include "spec_flags.h"

namespace kvshare::cli {
namespace {

struct ServeCliOptions {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string alias;
  std::string chat_template;
  int slots = 8;
  int max_context = 4096;
  int step_tokens = 256;
  int max_queue = 64;
  bool swa_full = false;
  bool no_prompt_cache = false;
  std::string kv_dtype = "f32";
  std::string attention_precision = "f32";
  std::string weight_precision = "f32";
  std::string device = "cpu";
  int kv_shared_layers = -1;
  int threads = 0;
  int http_threads = 0;
  std::vector<std::string> api_keys;
  std::vector<std::string> cors_origins;
  double drain_timeout = 30;
  int max_body_kib = 8192;
  bool quiet = false;
  bool strict_openai = false;
  int responses_kept = 256;
  int grammar_cache = static_cast<int>(GrammarCacheOptions{}.max_entries);
  int grammar_cache_mb = static_cast<int>(GrammarCacheOptions{}.max_bytes >> 20);
  SpecFlags spec;
  std::string mmproj;
  bool allow_image_urls = false;
  int image_max_soft_tokens = 280;
  int image_threads = 0;
  std::string pooling;
  std::int64_t image_max_pixels = ImageLimits{}.max_pixels;
};

void Say(const std::string& line) {
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);  // the signal thread logs too
  char ts[32];
  std::strftime(ts, sizeof ts, "%H:%M:%S", &local);
  std::fprintf(stderr, "[kvshare serve %s] %s\n", ts, line.c_str());
  std::fflush(stderr);
}

// Once the drain is over, how long stopping (HTTP keep-alive and read
// timeouts, the scheduler's last step) may take before the process exits
// regardless.
constexpr std::chrono::seconds kStopGrace{10};

// SIGINT / SIGTERM, received by one thread (sigtimedwait) while every other
// thread has them blocked: the mask is set before any other thread starts and
// threads inherit it, so compute, OpenMP/oneDNN and HTTP threads never take
// them. What a signal does depends on the phase (docs/serving.md):
//   loading: exit at once, status 0 (nothing is served yet, and a load that
//            reads or encodes cannot be interrupted; a stuck one must not
//            hold the process);
//   serving: the first drains, the second cancels what is left, a third
//            exits at once (status 1);
//   stopping (drain over): any signal, or kStopGrace passing, exits at once
//            (status 1).
class Signals {
 public:
  enum class Phase { kLoading, kServing, kStopping };

  Signals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // before any other thread starts
    signal(SIGPIPE, SIG_IGN);                    // a client gone mid-write is an error return, not a kill
    thread_ = std::thread([this] { Run(); });
  }
  ~Signals() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigtimedwait; the thread then returns
    thread_.join();
  }
  // The model is loaded: signals drain from now on.
  void Serving() {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = Phase::kServing;
  }
  // The drain is over: the process exits within kStopGrace whatever happens.
  void Stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = Phase::kStopping;
    stop_deadline_ = std::chrono::steady_clock::now() + kStopGrace;
  }
  // Waits for the n-th signal or the deadline; returns whether it came.
  bool Wait(int n, std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max()) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return count_ >= n; });
  }
  std::string name() {
    std::lock_guard<std::mutex> lock(mu_);
    return name_;
  }

 private:
  void Run() {
    for (;;) {
      // A short wait, so that the stopping deadline is checked without a signal.
      const timespec tick{0, 200 * 1000 * 1000};
      const int sig = sigtimedwait(&set_, nullptr, &tick);
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      if (sig == SIGTERM || sig == SIGINT) {
        ++count_;
        name_ = sig == SIGTERM ? "SIGTERM" : "SIGINT";
        if (phase_ == Phase::kLoading) Exit(name_ + " while loading: exiting", 0);
        if (phase_ == Phase::kStopping) Exit(name_ + " while stopping: exiting now", 1);
        if (count_ >= 3) Exit("third signal: exiting now", 1);
        cv_.notify_all();
      }
      if (phase_ == Phase::kStopping && std::chrono::steady_clock::now() >= stop_deadline_) {
        Exit("stopping took over " + std::to_string(kStopGrace.count()) + " s: exiting now", 1);
      }
    }
  }

  // Ends the process from this thread, whatever the others are doing (a
  // load or a stop that does not return): no destructors run.
  [[noreturn]] static void Exit(const std::string& why, int status) {
    Say(why);
    std::_Exit(status);
  }

  sigset_t set_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
  bool stop_ = false;
  Phase phase_ = Phase::kLoading;
  std::chrono::steady_clock::time_point stop_deadline_;
  std::string name_;
};

void RunServe(const ServeCliOptions& o) {
  CheckSpecFlags(o.spec, o.device);
  Signals signals;
  server::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.model_path = ResolveModel(o.model);
  so.placement = Placement(o.device);
  so.model_id = o.alias;
  if (!o.chat_template.empty()) so.chat_template = o.chat_template;
  so.scheduler.slots = o.slots;
  so.scheduler.max_context = o.max_context;
  so.scheduler.step_tokens = o.step_tokens;
  so.scheduler.max_queue = o.max_queue;
  so.scheduler.exact_rewind = o.swa_full;
  so.scheduler.prompt_cache = !o.no_prompt_cache;
  so.scheduler.kv_dtype = ParseKvDtype(o.kv_dtype);
  so.scheduler.attention_precision = ParseAttentionPrecision(o.attention_precision, so.scheduler.kv_dtype);
  so.load.weight_precision = ParseWeightPrecision(o.weight_precision);
  if (o.kv_shared_layers >= 0) so.scheduler.num_kv_shared_layers = o.kv_shared_layers;
  so.speculation = SpecRequest(o.spec, o.device);
  if (!o.spec.draft_model.empty()) so.speculation.draft_path = ResolveModel(o.spec.draft_model);
  if (so.scheduler.step_tokens <= so.scheduler.slots) {
    throw Error("--step-tokens " + std::to_string(o.step_tokens) + " must be larger than --slots " +
                std::to_string(o.slots) + " (every decoding slot takes one token of each step)");
  }
  so.threads = o.threads;
  so.http_threads = o.http_threads;
  so.api_keys = o.api_keys;
  so.cors_origins = o.cors_origins;
  so.max_body_bytes = static_cast<std::size_t>(o.max_body_kib) * 1024;
  so.strict_openai = o.strict_openai;
  so.responses_kept = static_cast<std::size_t>(o.responses_kept);
  so.grammar_cache = {.max_entries = static_cast<std::size_t>(o.grammar_cache),
                      .max_bytes = static_cast<std::size_t>(o.grammar_cache_mb) << 20};
  so.mmproj_path = o.mmproj;
  so.allow_image_urls = o.allow_image_urls;
  so.image_max_soft_tokens = o.image_max_soft_tokens;
  so.image_threads = o.image_threads;
  if (!o.pooling.empty()) so.pooling = PoolingFromName(o.pooling);
  so.image_max_pixels = o.image_max_pixels;
  if (!o.quiet) so.log = [](std::string_view l) { Say(std::string(l)); };

  server::Server srv(so);
  // Bound (and answering /health with "loading") before the model loads, but
  // "listening" is said only once it has loaded: a start-up error comes first.
  const int port = srv.Bind();
  Say("loading " + so.model_path);
  srv.StartHttp();
  srv.Load();
  signals.Serving();
  Say("listening on http://" + o.host + ":" + std::to_string(port) + ", ready: model " + srv.model_id() + ", " +
      std::to_string(o.slots) + " slots of " + std::to_string(o.max_context) + " tokens, " +
      std::to_string(o.step_tokens) + " tokens per step, queue " + std::to_string(o.max_queue) +
      (o.swa_full ? ", full-length sliding caches (--swa-full)" : "") +
      (o.api_keys.empty() ? "" : ", API key required"));

  signals.Wait(1);
  srv.BeginDrain();
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", o.drain_timeout);
  Say(signals.name() + ": draining (no new requests; finishing the ones in flight, up to " + secs +
      " s; a second signal cancels them)");
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long long>(o.drain_timeout * 1000));
  bool idle = false;
  while (!(idle = srv.WaitIdle(std::chrono::milliseconds(50)))) {
    if (std::chrono::steady_clock::now() >= deadline) {
      Say("drain timeout: cancelling the requests still running");
      break;
    }
    if (signals.Wait(2, std::chrono::steady_clock::now())) {
      Say("second signal: cancelling the requests still running");
      break;
    }
  }
  if (!idle) {
    srv.CancelAll();
    srv.WaitIdle(std::chrono::seconds(5));
  }
  signals.Stopping();
  srv.Stop();
  Say("stopped");
}

}  // namespace

void RegisterServe(CLI::App& app) {
  static ServeCliOptions o;
  auto* cmd = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server: continuous batching, prompt caching, a chat page at /");
  AddModelOption(*cmd, o.model);
  cmd->add_option("--host", o.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o.port, "Port (0: any free port, printed at start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--alias", o.alias,
                  "Model name served in /v1/models and expected in requests (default: the file name)");
  cmd->add_option("--chat-template", o.chat_template,
                  "Chat format for /v1/chat/completions: gemma, gemma4 or none. Default: the file's "
                  "tokenizer.chat_template (chat requests are refused when it has none)")
      ->check(CLI::IsMember(std::vector<std::string>(ChatFormatNames().begin(), ChatFormatNames().end())));
  cmd->add_option("--slots,--parallel", o.slots, "Requests decoded together (KV cache rows; llama-server -np)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--max-context", o.max_context, "Tokens per slot: prompt + output of one request")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--step-tokens", o.step_tokens,
                  "Most tokens per batched step: decoding slots first, then prompt chunks (chunked prefill)")
      ->check(CLI::Range(2, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--max-queue", o.max_queue, "Requests waiting for a slot beyond which new ones get 503 + Retry-After")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  cmd->add_flag("--swa-full", o.swa_full,
                "Full-length sliding-window caches, so every cached prefix can be reused (more KV memory). Without "
                "it, sliding layers keep rings and an old prefix falls back to a full prefill (logged)");
  cmd->add_flag("--no-prompt-cache", o.no_prompt_cache, "Prefill every prompt in full (no prefix reuse)");
  AddKvDtypeOption(*cmd, o.kv_dtype);
  AddAttentionPrecisionOption(*cmd, o.attention_precision);
  AddWeightPrecisionOption(*cmd, o.weight_precision);
  AddDeviceOption(*cmd, o.device);
  AddSpecFlags(*cmd, o.spec);
  cmd->add_option("--kv-shared-layers", o.kv_shared_layers, "KV-shared trailing layers (default: the model's own)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--threads", o.threads, "Compute threads (0 = all cores)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_option("--http-threads", o.http_threads, "Connection threads (0 = slots + max-queue + 8)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--cors-origin", o.cors_origins,
                  "A browser origin allowed to call the API (CORS; repeatable; * for any), e.g. "
                  "http://localhost:3000; preflight OPTIONS requests are answered")
      ->take_all();
  cmd->add_option("--api-key", o.api_keys,
                  "Require this key as 'Authorization: Bearer KEY' or 'X-Api-Key: KEY' (repeat for several); / and "
                  "/health stay open");
  cmd->add_option("--drain-timeout", o.drain_timeout,
                  "Seconds SIGINT/SIGTERM waits for requests in flight before cancelling them")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--max-body-kib", o.max_body_kib, "Largest request body in KiB (413 beyond)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--strict-openai", o.strict_openai,
                "OpenAI's strictness: requests must name the model, unknown fields are a 400 (default: a request "
                "without a model goes to the served one, unknown fields are ignored and named in the log and in the "
                "X-Kvshare-Ignored-Fields response header)");
  cmd->add_option("--responses-kept", o.responses_kept,
                  "Responses /v1/responses keeps in memory for previous_response_id (oldest evicted; 0: none)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--grammar-cache", o.grammar_cache,
                  "Compiled grammars (response_format schemas, tool-call grammars) kept across requests, least "
                  "recently used evicted first (0: none, every request compiles its schema)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--grammar-cache-mb", o.grammar_cache_mb,
                  "The compiled grammars' memory bound, MiB (a larger grammar is used once, not kept)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--pooling", o.pooling,
                  "How /v1/embeddings pools a text's hidden states: mean or last (default: the file's pooling "
                  "type; a text generation model names none and serves embeddings only with --pooling)")
      ->check(CLI::IsMember({"mean", "last"}));
  cmd->add_option("--mmproj", o.mmproj,
                  "The model's vision projector GGUF (llama.cpp's mmproj): chat requests may send image_url parts "
                  "as data: URLs");
  cmd->add_flag("--allow-image-urls", o.allow_image_urls,
                "Accept http(s) image URLs (fetching is not built yet: they are refused with a message saying so)");
  cmd->add_option("--image-max-soft-tokens", o.image_max_soft_tokens,
                  "Gemma 4: an image's token budget when a request names none (its max_soft_tokens)")
      ->check(CLI::IsMember({70, 140, 280, 560, 1120}))
      ->capture_default_str();
  cmd->add_option("--image-max-pixels", o.image_max_pixels,
                  "The largest image (width x height pixels) a request may send; larger ones are a 400 before "
                  "decoding")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--image-threads", o.image_threads,
                  "Threads that encode an image (0 = as many as --threads): a pool of its own beside the "
                  "scheduler's, one request's images at a time")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o.quiet, "No log lines (startup and shutdown lines stay)");
  cmd->callback([] { RunServe(o); });
}

}  // namespace kvshare::cli
