// The server's internals shared by server.cc (lifecycle, routes, auth,
// errors, the small endpoints) and completions.cc (the two completion
// endpoints). Not a public header.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "api_error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/grammar/grammar_cache.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/chat_template.h"
#include "kvshare/runtime/drafter_factory.h"
#include "kvshare/runtime/audio_prompt.h"
#include "kvshare/runtime/image_prompt.h"
#include "kvshare/runtime/mmproj_towers.h"
#include "kvshare/runtime/scheduler.h"
#include "kvshare/tokenizer/tokenizer.h"
#include "metrics.h"
#include "openai_request.h"
#include "response_store.h"
#include "server.h"

namespace kvshare::server {

struct AudioForm;  // audio_form.h

// A request of an audio endpoint, submitted (audio_task.cc).
struct AudioSubmission {
  CompletionRequest request;
  std::shared_ptr<RequestHandle> handle;
  int fd = -1;  // the connection's socket, to notice the client leaving
};

// cpp-httplib's server with its listening socket reachable (for the backlog).
class HttpServer : public httplib::Server {
 public:
  int listen_socket() const { return svr_sock_; }
};

// cpp-httplib's ThreadPool, counting the connections accepted but still
// waiting for a thread (`waiting`): 0.11's queue is unbounded, so without
// the count a burst larger than the pool would queue there unseen by the
// scheduler's 503 limit. HandleCompletion passes it to Scheduler::Submit.
class CountingThreadPool : public httplib::TaskQueue {
 public:
  CountingThreadPool(std::size_t threads, std::atomic<int>& waiting);
  ~CountingThreadPool() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  void Work();
  std::atomic<int>& waiting_;
  std::vector<std::thread> threads_;
  std::deque<std::function<void()>> jobs_;
  bool shutdown_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
};

enum class Phase { kLoading, kReady, kDraining };

// Writes an error response.
inline void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(Dump(e.ToJson()), "application/json");
}

// The request body as JSON (ApiError 400 with OpenAI's wording otherwise).
nlohmann::json ParseBody(const httplib::Request& req);

// One call of a streaming content provider (completions.cc): writes `out`,
// the server-sent events since the last call, and ends the stream once
// `done`. When nothing came, checks whether the client went away (fd,
// PeerClosed). Calls `cancel` and returns false when the client is gone or a
// write fails; true to be called again.
bool PumpEvents(httplib::DataSink& sink, const std::string& out, bool done, int fd,
                const std::function<void()>& cancel);

// Makes `res` a server-sent event stream read from `provider`: chunked for
// HTTP/1.1. HTTP/1.0 has no chunked coding (RFC 9112 6.1: no
// Transfer-Encoding in an answer to a 1.0 request), so a 1.0 client gets the
// events unframed, ended by the connection's close (also when it asked for
// Keep-Alive).
void SetEventStream(const httplib::Request& req, httplib::Response& res, httplib::ContentProviderWithoutLength provider,
                    httplib::ContentProviderResourceReleaser release);

struct Server::Impl {
  explicit Impl(ServerOptions o) : opt(std::move(o)) {}

  ServerOptions opt;
  HttpServer http;
  std::thread http_thread;
  std::atomic<bool> http_done{false};  // listen_after_bind returned
  int port = 0;

  // Set once by Load() before phase becomes kReady.
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ChatTemplate> chat;
  std::unique_ptr<VisionEncoder> vision;  // --mmproj
  std::unique_ptr<ImageSplicer> splicer;
  std::unique_ptr<AudioEncoder> audio;  // --mmproj with an audio encoder
  std::unique_ptr<AudioSplicer> audio_splicer;
  std::unique_ptr<ThreadPool> image_pool;  // --image-threads; encodes one request's images at a time
  std::mutex image_pool_mu;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<ThreadPool> embed_pool;  // /v1/embeddings, one request at a time
  std::mutex embed_mu;
  Speculation speculation;  // the drafter (and the draft model or assistant it runs)
  std::unique_ptr<Scheduler> scheduler;
  ModelContext ctx;
  GrammarCache grammars{opt.grammar_cache};  // ctx.grammars, /metrics
  std::int64_t created = 0;

  std::atomic<Phase> phase{Phase::kLoading};
  // Load() is done: the fields above may be read (phase alone cannot say so:
  // a drain may begin while loading).
  std::atomic<bool> loaded{false};
  std::atomic<int> in_flight{0};
  std::atomic<int> http_waiting{0};  // connections waiting for a connection thread (CountingThreadPool)
  std::atomic<std::uint64_t> next_request{1};
  std::mutex stats_mu;
  std::map<int, std::uint64_t> responses;
  ResponseStore stored_responses{opt.responses_kept};  // /v1/responses (responses.cc)

  void Log(const std::string& line) const {
    if (opt.log) opt.log(line);
  }

  // Throws ApiError 503 unless serving.
  void CheckReady() const;

  void SetupRoutes();
  void HandleCompletion(const httplib::Request& req, httplib::Response& res, bool chat);
  void HandleEmbeddings(const httplib::Request& req, httplib::Response& res);  // embeddings.cc
  // tokenize.cc: POST /tokenize, /detokenize; GET /tokenizer_info.
  void HandleTokenize(const httplib::Request& req, httplib::Response& res);
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res);
  void HandleTokenizerInfo(const httplib::Request& req, httplib::Response& res);
  // responses.cc: POST /v1/responses; GET and DELETE /v1/responses/{id}; GET
  // /v1/responses/{id}/input_items.
  void HandleResponses(const httplib::Request& req, httplib::Response& res);
  void HandleStoredResponse(const httplib::Request& req, httplib::Response& res);
  // audio_task.cc: the audio endpoints' clip and instruction as a chat
  // request, submitted (BuildRequest's errors; 503 when busy; counted in
  // in_flight); then, not streamed, its whole text (in_flight released).
  AudioSubmission SubmitAudio(httplib::Response& res, const httplib::Request& req, const AudioForm& form,
                              const std::string& instruction);
  std::string AwaitAudioText(AudioSubmission& s, const std::string& what, double seconds);
  void HandleTranscription(const httplib::Request& req, httplib::Response& res);  // transcriptions.cc
  void HandleTranslation(const httplib::Request& req, httplib::Response& res);    // translations.cc
};

}  // namespace kvshare::server
