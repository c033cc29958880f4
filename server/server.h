// kvshare's OpenAI-compatible HTTP server (server layer, docs/architecture.md §1-2): HTTP,
// JSON, SSE, metrics and the chat page over the runtime's Scheduler.
//
// Endpoints:
//   POST /v1/chat/completions, /v1/completions   OpenAI (streaming SSE or not;
//        openai_request.h lists the parameters, openai_response.h the bodies)
//   GET  /v1/models                               the one served model ("capabilities":
//        ["completion"], with "multimodal" when an mmproj is loaded, as llama-server says it)
//   GET  /health, /v1/health                      503 while loading or draining, then 200 {"status":"ok"}
//   GET  /metrics                                 Prometheus text (metrics.h)
//   POST /v1/embeddings                           OpenAI (embeddings.cc; pooling below)
//   POST /tokenize   {"content", "add_special"=false, "with_pieces"=false} -> {"tokens"}
//        (also vLLM's {"prompt", "add_special_tokens"=true}; tokenize.cc)
//   POST /detokenize {"tokens"} -> {"content", "prompt"}
//   GET  /tokenizer_info                          vLLM's: {"bos_token", "eos_token", ...}
//   GET  /                                        the chat page (chat_page.h)
// Errors are {"error": {"message", "type", "param", "code"}} with their HTTP
// status (api_error.h); a full queue is 503 with Retry-After. With api_keys,
// every path but /, /health and /v1/health needs "Authorization: Bearer KEY"
// or "X-Api-Key: KEY" (401 otherwise).
//
// Threads: cpp-httplib runs one thread per connection (a fixed pool sized for
// every slot, the whole queue and a few control requests); the scheduler runs
// on its own thread and owns the model state; connection threads hand
// requests over with Scheduler::Submit and read their events. A client that
// disconnects is noticed within about 20 ms and its request cancelled, which
// frees its slot at the scheduler's next step.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvshare/grammar/grammar_cache.h"
#include "kvshare/runtime/device_support.h"
#include "kvshare/runtime/drafter_factory.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/vision/image.h"

namespace kvshare::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (Bind returns it)
  std::string model_path;
  // How the model's weights are prepared (the CLI's --weight-precision).
  ModelLoadOptions load;
  // Where the model runs: Load() hands the loaded model to placement.Apply
  // (the CLI's --device cuda: MoveModelToCuda). What the device refuses
  // (runtime/device_support.h) is refused here too: an mmproj at Load, image
  // and audio parts and /v1/embeddings with a 400 naming the device.
  ModelPlacement placement;
  // The served model name (/v1/models, the "model" field requests must
  // give). Empty: the file name without its directory and ".gguf".
  std::string model_id;
  // A ChatFormatNames() entry; nullopt: as the file's tokenizer.chat_template says.
  std::optional<std::string> chat_template;
  SchedulerOptions scheduler;
  // Speculative decoding (kvshare/runtime/drafter_factory.h): method "ngram"
  // drafts by prompt lookup; draft_path names a draft model GGUF with the
  // served model's vocabulary or a Gemma 4 assistant GGUF. Neither: none.
  // Load() sets scheduler.drafter and scheduler.speculative from it. Requests
  // opt out with "speculative": false.
  SpeculationRequest speculation;
  int threads = 0;       // compute threads; 0: every core
  int http_threads = 0;  // connection threads; 0: slots + max_queue + 8
  std::vector<std::string> api_keys;
  std::size_t max_body_bytes = 8u << 20;
  // OpenAI's strictness (--strict-openai): requests must name the served
  // model (another name is a 404), and unknown fields are a 400. Off: any
  // model name (or none) gets the served model, named in the response header
  // X-Kvshare-Served-Model and a log line; unknown fields are ignored, named
  // in a log line and in the response header X-Kvshare-Ignored-Fields
  // (openai_request.h).
  bool strict_openai = false;
  // Images: the mmproj GGUF of the served model (empty: image parts are a
  // 400 naming --mmproj); Load() checks that it fits the text model (its
  // width, the family's markers in the vocabulary). http(s) image URLs are
  // refused either way (allow_image_urls changes the message: fetching is
  // not built). image_max_soft_tokens: Gemma 4's budget for requests that
  // name none. image_max_pixels: the largest image (width x height) a
  // request may send, checked from its header before decoding.
  // image_threads: the threads that encode an image (its connection thread
  // included; 0: as many as `threads`), a pool of their own beside the
  // scheduler's, serving one request's images at a time.
  // Browser origins allowed to call the API (CORS, --cors-origin; "*": any);
  // empty: no CORS headers.
  std::vector<std::string> cors_origins;
  std::string mmproj_path;
  bool allow_image_urls = false;
  int image_max_soft_tokens = 280;
  std::int64_t image_max_pixels = ImageLimits{}.max_pixels;
  int image_threads = 0;
  // Embeddings (/v1/embeddings, --pooling): nullopt pools as the file says
  // (gemma-embedding: its pooling type; a text generation model names none,
  // and its embeddings are refused until a pooling is given, as llama-server
  // does). Requests run one at a time on a pool of `threads` of their own.
  std::optional<Pooling> pooling;
  // /v1/responses: responses kept for previous_response_id and GET
  // /v1/responses/{id} (--responses-kept), the oldest evicted first; 0: none.
  std::size_t responses_kept = 256;
  // Compiled grammars (response_format schemas, tool-call grammars, strict
  // tools' parameters) kept across requests, by entries and bytes
  // (--grammar-cache, --grammar-cache-mb; 0 entries: none).
  GrammarCacheOptions grammar_cache;
  // Log lines (startup, requests, prompt-cache fallbacks); null: silent.
  std::function<void(std::string_view)> log;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns its port. Throws kvshare::Error
  // naming host and port when that fails.
  int Bind();
  // Serves HTTP on a new thread; until Load() finishes, /health and the
  // completion endpoints answer 503 "Loading model".
  void StartHttp();
  // Loads the model (and moves it: placement), its tokenizer and chat format
  // (and the drafter), and starts the scheduler. Throws kvshare::Error (a
  // missing file, a bad chat template name, a draft model that does not fit,
  // a device that is missing or refuses what the options ask for).
  void Load();
  // Draining: /health and new completion requests answer 503; requests in
  // flight go on.
  void BeginDrain();
  // Waits until no request is queued or running, up to timeout; returns
  // whether that happened.
  bool WaitIdle(std::chrono::milliseconds timeout);
  // Cancels every request in flight (streams end with finish_reason "abort").
  void CancelAll();
  // Waits (up to 5 s) for responses still being written, then stops HTTP and
  // the scheduler.
  void Stop();

  const std::string& model_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvshare::server
