// Server lifecycle, routes, API keys, error bodies and the small endpoints
// (server.h); the completion endpoints are in completions.cc.
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>

#include "chat_page.h"
#include "connection.h"
#include "grammar_key.h"
#include "kvshare/common/error.h"
#include "kvshare/runtime/device_support.h"
#include "server_impl.h"

namespace kvshare::server {

using nlohmann::json;

namespace {

constexpr int kListenBacklog = 1024;
// Deepest JSON body taken: nlohmann's dump and copies (and the schema
// compiler) recurse once per level, so a body of 8 MiB of '[' would
// otherwise overflow a connection thread's stack. A response_format schema
// may be 256 deep (grammar.h) plus its 3 levels of wrapping.
constexpr int kMaxBodyDepth = 512;

bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

bool IsPublic(const std::string& path) { return path == "/" || path == "/health" || path == "/v1/health"; }

// The credentials of an "Authorization: Bearer KEY" header, or "": the scheme
// is case-insensitive (RFC 7235 §2.1), one or more spaces follow it.
std::string BearerToken(const std::string& auth) {
  constexpr std::string_view kScheme = "bearer";
  if (auth.size() <= kScheme.size() || auth[kScheme.size()] != ' ') return "";
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(auth[i])) != kScheme[i]) return "";
  }
  const std::size_t start = auth.find_first_not_of(' ', kScheme.size());
  return start == std::string::npos ? "" : auth.substr(start);
}

// Socket options of the listening socket: SO_REUSEADDR (restart while old
// connections sit in TIME_WAIT) but never cpp-httplib's default
// SO_REUSEPORT, with which a second server on the same port starts and the
// kernel splits connections between the two.
void ListenSocketOptions(int sock) {
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

// Mends two ways cpp-httplib 0.11 misreads a request body, before it reads
// it (the hook gets the server's own request object as const; it is not):
// - curl -d without -H labels a JSON body application/x-www-form-urlencoded,
//   and the library answers such a body over 8 KiB with a bare 413 (a
//   constant compiled into the shared library), whatever --max-body-kib
//   says. No endpoint here reads url-encoded forms (bodies are JSON, the
//   audio endpoints' multipart), so the label is dropped.
// - A request with neither Content-Length nor Transfer-Encoding has no body
//   (RFC 9112 6.3), but the library reads one until the client closes: a
//   `curl -X POST` without -d waited 30 s (the read timeout) for its 400.
void MendBodyHeaders(const httplib::Request& req) {
  auto& headers = const_cast<httplib::Request&>(req).headers;
  const auto type = headers.find("Content-Type");
  if (type != headers.end() && type->second.rfind("application/x-www-form-urlencoded", 0) == 0) headers.erase(type);
  if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
    headers.emplace("Content-Length", "0");
  }
}

// The error of a request cpp-httplib refused before any handler ran (it
// gives a status, no reason): what the request shows of the cause.
ApiError HttpLayerError(const httplib::Request& req, int status) {
  const std::string encoding = req.get_header_value("Content-Encoding");
  if (status == 414) {
    return ApiError(414, "Request URI too long: at most 8192 bytes.", "invalid_request_error", std::nullopt,
                    "uri_too_long");
  }
  if ((status == 400 || status == 415) && !encoding.empty() && encoding != "identity") {
    if (encoding != "gzip" && encoding != "deflate") {
      return ApiError(415, "Unsupported Content-Encoding '" + encoding + "': send the body as is, gzip or deflate.",
                      "invalid_request_error", std::nullopt, "unsupported_content_encoding");
    }
    return ApiError(400, "The body could not be decoded as its Content-Encoding '" + encoding + "'.",
                    "invalid_request_error", std::nullopt, "invalid_content_encoding");
  }
  if (status == 400) {
    return ApiError(400,
                    "The HTTP request could not be read: a malformed request line or header, a header line over "
                    "8 KiB, or a body that does not match its Content-Length or chunked framing.",
                    "invalid_request_error", std::nullopt, "invalid_http_request");
  }
  return ApiError(status, "Bad request.", status >= 500 ? "server_error" : "invalid_request_error");
}

// Runs a handler, turning exceptions into error responses.
template <class F>
httplib::Server::Handler Guarded(F f) {
  return [f](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (const ApiError& e) {
      SendError(res, e);
    } catch (const Error& e) {
      SendError(res, BadRequest(e.what()));
    } catch (const std::exception& e) {
      SendError(res, ApiError(500, std::string("internal error: ") + e.what(), "server_error"));
    }
  };
}

std::string DefaultModelId(const std::string& path) {
  std::string id = std::filesystem::path(path).filename().string();
  if (id.size() > 5 && id.compare(id.size() - 5, 5, ".gguf") == 0) id.resize(id.size() - 5);
  return id;
}

}  // namespace

CountingThreadPool::CountingThreadPool(std::size_t threads, std::atomic<int>& waiting) : waiting_(waiting) {
  for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
}

CountingThreadPool::~CountingThreadPool() { shutdown(); }

void CountingThreadPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    waiting_.fetch_add(1);
  }
  cv_.notify_one();
}

void CountingThreadPool::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void CountingThreadPool::Work() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !jobs_.empty() || shutdown_; });
      if (jobs_.empty()) return;  // shut down, and nothing left to serve
      fn = std::move(jobs_.front());
      jobs_.pop_front();
      waiting_.fetch_sub(1);
    }
    fn();
  }
}

void Server::Impl::CheckReady() const {
  switch (phase.load()) {
    case Phase::kLoading: throw ApiError(503, "Loading model", "unavailable_error", std::nullopt, "model_loading");
    case Phase::kDraining:
      throw ApiError(503, "The server is shutting down and takes no new requests.", "unavailable_error", std::nullopt,
                     "shutting_down");
    case Phase::kReady: return;
  }
}

json ParseBody(const httplib::Request& req) {
  try {
    return json::parse(req.body, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxBodyDepth) {
        throw BadRequest("The JSON body is nested deeper than " + std::to_string(kMaxBodyDepth) +
                             " levels of arrays and objects; send a flatter body.",
                         std::nullopt, "invalid_json");
      }
      return true;
    });
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number beyond double ("1e400"),
    // which would otherwise escape as a 500.
    throw BadRequest(
        std::string("We could not parse the JSON body of your request. (HINT: This likely means you aren't "
                    "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
                    "sent was not valid JSON.) Parser: ") +
            e.what(),
        std::nullopt, "invalid_json");
  }
}

void Server::Impl::SetupRoutes() {
  // CORS (--cors-origin): the allowed origins get Access-Control-Allow-Origin
  // on every answer, and preflight OPTIONS requests a 204 naming the methods
  // and headers a browser client sends.
  if (!opt.cors_origins.empty()) {
    http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const std::string origin = req.get_header_value("Origin");
      const bool any = std::find(opt.cors_origins.begin(), opt.cors_origins.end(), "*") != opt.cors_origins.end();
      if (origin.empty() ||
          (!any && std::find(opt.cors_origins.begin(), opt.cors_origins.end(), origin) == opt.cors_origins.end())) {
        return;
      }
      res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
      if (!any) res.set_header("Vary", "Origin");
      res.set_header("Access-Control-Expose-Headers", "X-Kvshare-Ignored-Fields, X-Kvshare-Served-Model, Retry-After");
    });
    http.Options(".*", [](const httplib::Request& req, httplib::Response& res) {
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      const std::string asked = req.get_header_value("Access-Control-Request-Headers");
      res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type, X-Api-Key" : asked);
      res.set_header("Access-Control-Max-Age", "600");
    });
  }
  // Before a body is read: its headers (MendBodyHeaders), then API keys on
  // every path but the page and the health check.
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    MendBodyHeaders(req);
    if (opt.api_keys.empty() || IsPublic(req.path) || req.method == "OPTIONS") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::string key = req.get_header_value("X-Api-Key");
    const std::string auth = req.get_header_value("Authorization");
    if (key.empty()) key = BearerToken(auth);
    for (const std::string& k : opt.api_keys) {
      if (ConstantTimeEqual(key, k)) return httplib::Server::HandlerResponse::Unhandled;
    }
    SendError(res, ApiError(401,
                            key.empty() ? "Missing API key: give it as 'Authorization: Bearer KEY' or 'X-Api-Key: KEY'."
                                        : "Incorrect API key provided.",
                            "authentication_error", std::nullopt, "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Bodies for the errors cpp-httplib produces itself (unknown route, body too large).
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      SendError(
          res,
          ApiError(404, "Unknown request URL: " + req.method + " " + req.path + ". Please check the URL for typos.",
                   "invalid_request_error", std::nullopt, "unknown_url"));
    } else if (res.status == 413) {
      // Media in base64 is what usually crosses the limit: say what sets it and what base64 costs.
      SendError(res, ApiError(413,
                              "Request body too large: at most " + std::to_string(opt.max_body_bytes) +
                                  " bytes (this server's --max-body-kib; images and audio in base64 take 4/3 of "
                                  "their file size).",
                              "invalid_request_error", std::nullopt, "request_too_large"));
    } else {
      SendError(res, HttpLayerError(req, res.status));
    }
  });
  http.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    std::lock_guard<std::mutex> lock(stats_mu);
    ++responses[res.status];
  });

  auto health = Guarded([this](const httplib::Request&, httplib::Response& res) {
    CheckReady();
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/health", health);
  http.Get("/v1/health", health);

  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const std::string_view page = ChatPageHtml();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });

  const auto model_json = [this] {
    // "multimodal": images (llama-server's word); "audio": input_audio parts.
    json caps = json::array({model->config().causal ? "completion" : "embedding"});
    if (model->config().causal && ctx.images.encoder != nullptr) caps.push_back("multimodal");
    if (model->config().causal && ctx.audio.encoder != nullptr) caps.push_back("audio");
    return json{{"id", ctx.model_id},
                {"object", "model"},
                {"created", created},
                {"owned_by", "kvshare"},
                {"max_model_len", ctx.max_context},
                {"capabilities", caps}};
  };
  http.Get("/v1/models", Guarded([this, model_json](const httplib::Request&, httplib::Response& res) {
             CheckReady();
             res.set_content(Dump({{"object", "list"}, {"data", json::array({model_json()})}}), "application/json");
           }));
  // The SDK's models.retrieve: the served model under its own name, or (not
  // --strict-openai) under any name, as completions serve any name.
  http.Get(R"(/v1/models/(.+))", Guarded([this, model_json](const httplib::Request& req, httplib::Response& res) {
             CheckReady();
             const std::string id = req.matches[1];
             if (id != ctx.model_id) {
               if (opt.strict_openai) {
                 throw ApiError(404,
                                "The model `" + id + "` does not exist. This server serves `" + ctx.model_id + "`.",
                                "invalid_request_error", "model", "model_not_found");
               }
               res.set_header("X-Kvshare-Served-Model", ctx.model_id);
             }
             res.set_content(Dump(model_json()), "application/json");
           }));

  http.Get("/metrics", Guarded([this](const httplib::Request&, httplib::Response& res) {
             HttpStats hs;
             {
               std::lock_guard<std::mutex> lock(stats_mu);
               hs.responses_by_status = responses;
             }
             hs.requests_in_flight = in_flight.load();
             hs.connections_waiting = http_waiting.load();
             SchedulerStats ss;
             if (loaded.load()) ss = scheduler->Stats();
             res.set_content(PrometheusText(ss, hs, grammars.Stats()), "text/plain; version=0.0.4");
           }));

  http.Post("/tokenize",
            Guarded([this](const httplib::Request& req, httplib::Response& res) { HandleTokenize(req, res); }));
  http.Post("/detokenize",
            Guarded([this](const httplib::Request& req, httplib::Response& res) { HandleDetokenize(req, res); }));
  http.Get("/tokenizer_info",
           Guarded([this](const httplib::Request& req, httplib::Response& res) { HandleTokenizerInfo(req, res); }));

  // An embedding model (gemma-embedding) does not generate.
  const auto generates = [this] {
    CheckReady();
    if (!model->config().causal) {
      throw BadRequest("The served model `" + ctx.model_id + "` is an embedding model (" +
                           model->config().architecture + "): it answers /v1/embeddings only.",
                       "model", "model_not_supported");
    }
  };
  http.Post("/v1/chat/completions", Guarded([this, generates](const httplib::Request& req, httplib::Response& res) {
              generates();
              HandleCompletion(req, res, /*chat=*/true);
            }));
  http.Post("/v1/completions", Guarded([this, generates](const httplib::Request& req, httplib::Response& res) {
              generates();
              HandleCompletion(req, res, /*chat=*/false);
            }));
  http.Post("/v1/responses", Guarded([this, generates](const httplib::Request& req, httplib::Response& res) {
              generates();
              HandleResponses(req, res);
            }));
  const auto stored =
      Guarded([this](const httplib::Request& req, httplib::Response& res) { HandleStoredResponse(req, res); });
  http.Get(R"(/v1/responses/([^/]+))", stored);
  http.Get(R"(/v1/responses/([^/]+)/input_items)", stored);
  http.Delete(R"(/v1/responses/([^/]+))", stored);
  http.Post("/v1/embeddings",
            Guarded([this](const httplib::Request& req, httplib::Response& res) { HandleEmbeddings(req, res); }));
  http.Post("/v1/audio/transcriptions",
            Guarded([this](const httplib::Request& req, httplib::Response& res) { HandleTranscription(req, res); }));
  http.Post("/v1/audio/translations",
            Guarded([this](const httplib::Request& req, httplib::Response& res) { HandleTranslation(req, res); }));
}

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& m = *impl_;
  if (m.opt.model_id.empty()) m.opt.model_id = DefaultModelId(m.opt.model_path);
  const SchedulerOptions& so = m.opt.scheduler;
  const int threads = m.opt.http_threads > 0 ? m.opt.http_threads : so.slots + so.max_queue + 8;
  m.http.new_task_queue = [threads, &m] {
    return new CountingThreadPool(static_cast<std::size_t>(threads), m.http_waiting);
  };
  m.http.set_socket_options(ListenSocketOptions);
  m.http.set_tcp_nodelay(true);
  m.http.set_keep_alive_max_count(1000);
  m.http.set_keep_alive_timeout(5);
  m.http.set_read_timeout(30);
  m.http.set_write_timeout(30);
  m.http.set_payload_max_length(m.opt.max_body_bytes);
  m.SetupRoutes();
}

Server::~Server() { Stop(); }

int Server::Bind() {
  Impl& m = *impl_;
  m.port = m.opt.port == 0 ? m.http.bind_to_any_port(m.opt.host)
                           : (m.http.bind_to_port(m.opt.host, m.opt.port) ? m.opt.port : -1);
  if (m.port <= 0) {
    throw Error("cannot listen on " + m.opt.host + ":" + std::to_string(m.opt.port) +
                " (in use, or not an address of this machine); choose another --host / --port");
  }
  SetListenBacklog(m.http.listen_socket(), kListenBacklog);
  return m.port;
}

void Server::StartHttp() {
  Impl& m = *impl_;
  m.http_thread = std::thread([&m] {
    m.http.listen_after_bind();
    m.http_done.store(true);
  });
  // cpp-httplib's stop() does nothing until its accept loop has begun, and
  // the loop then runs until a stop() nobody sends: a model that failed to
  // load at once left Stop() joining forever (and the process hung). From
  // here on Stop() ends it.
  while (!m.http.is_running() && !m.http_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Server::Load() {
  Impl& m = *impl_;
  const DeviceSupport support = SupportOn(m.opt.placement.device);
  if (!support.media_inputs && !m.opt.mmproj_path.empty()) {  // before the load: fail fast
    throw Error(DeviceRefusal(support.device, "--mmproj (images and audio)",
                              std::string("drop --mmproj or --device ") + DeviceName(support.device)));
  }
  m.opt.speculation.device = support.device;
  CheckSpeculation(m.opt.speculation);  // before the load too: an assistant on the device
  m.model = m.opt.placement.Apply(Model::Load(m.opt.model_path, m.opt.load));
  for (const std::string& w : m.model->warnings()) m.Log("warning: " + w);
  if (support.device != Device::kCpu) m.Log(std::string("model on device ") + DeviceName(support.device));
  if (!support.media_inputs)
    m.ctx.media_unavailable = DeviceRefusal(support.device, "images and audio", "send text only");
  m.tok = std::make_unique<Tokenizer>(ReadVocab(m.model->gguf()));
  std::optional<std::string_view> name;
  if (m.opt.chat_template) name = *m.opt.chat_template;
  const ChatFormatChoice choice = ChooseChatFormat(m.model->gguf(), name);
  m.chat = std::make_unique<ChatTemplate>(choice.format, *m.tok);
  if (choice.source == ChatFormatSource::kFileUnrecognized) {
    m.Log("warning: " + choice.reason +
          "; chat requests are refused (name a format with --chat-template gemma|gemma4)");
  }
  m.ctx.model_id = m.opt.model_id;
  m.ctx.strict_model = m.opt.strict_openai;
  m.ctx.tokenizer = m.tok.get();
  m.ctx.chat = m.chat.get();
  m.ctx.grammars = &m.grammars;
  m.ctx.tool_grammar_identity = ToolGrammarIdentity(choice.format, *m.tok);
  m.ctx.max_context = m.opt.scheduler.max_context;
  if (choice.format == ChatFormat::kNone) {
    m.ctx.chat_unavailable =
        choice.source == ChatFormatSource::kNamed ? "--chat-template none was given" : choice.reason;
  }
  const int threads =
      m.opt.threads > 0 ? m.opt.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!m.opt.mmproj_path.empty()) {
    MmprojTowers t = LoadMmprojTowers(m.opt.mmproj_path, *m.tok, *m.model);
    m.vision = std::move(t.vision);
    m.splicer = std::move(t.image_splicer);
    m.audio = std::move(t.audio);
    m.audio_splicer = std::move(t.audio_splicer);
    if (!t.audio_error.empty()) m.Log("warning: audio disabled: " + t.audio_error);
  }
  if (m.audio) {
    m.ctx.audio.encoder = m.audio.get();
    m.ctx.audio.splicer = m.audio_splicer.get();
    // A clip's span runs in one step, as an image's: room for 30 s (Gemma
    // 4: 750 tokens; Gemma 3n: 188 and its end marker).
    const int largest = m.audio->config().projector == AudioProjectorType::kGemma3nA ? 189 : 750;
    const int need = largest + m.opt.scheduler.slots - 1;
    if (m.opt.scheduler.step_tokens < need) {
      m.Log("step tokens raised from " + std::to_string(m.opt.scheduler.step_tokens) + " to " + std::to_string(need) +
            " so that a 30 s audio clip runs in one step beside every slot");
      m.opt.scheduler.step_tokens = need;
    }
  }
  if (m.vision) {
    m.ctx.images.encoder = m.vision.get();
    m.ctx.images.splicer = m.splicer.get();
    m.ctx.images.max_soft_tokens = m.opt.image_max_soft_tokens;
    m.ctx.images.limits.max_pixels = m.opt.image_max_pixels;
    m.ctx.images.limits.max_pixels_hint = "the server's limit (kvshare serve --image-max-pixels)";
    // An image runs in one step beside every other slot's decode token: make
    // room for the largest one (fixed-size encoders: their token count;
    // Gemma 4: the default budget, which bounds its tokens).
    const VisionConfig& vc = m.vision->config();
    const int largest =
        vc.image_size > 0 ? m.vision->TokensForSize(vc.image_size, vc.image_size) : m.opt.image_max_soft_tokens;
    const int need = largest + m.opt.scheduler.slots - 1;
    if (m.opt.scheduler.step_tokens < need) {
      m.Log("step tokens raised from " + std::to_string(m.opt.scheduler.step_tokens) + " to " + std::to_string(need) +
            " so that an image of " + std::to_string(largest) + " tokens runs in one step beside every slot");
      m.opt.scheduler.step_tokens = need;
    }
  }
  if (!m.opt.mmproj_path.empty()) {
    m.ctx.images.max_image_tokens = m.opt.scheduler.step_tokens - m.opt.scheduler.slots + 1;
    m.ctx.audio.max_clip_tokens = m.ctx.images.max_image_tokens;
    // Its own pool: the scheduler's is not reentrant and is busy with the
    // batch's steps, which an encode (seconds at real geometry) would stall.
    const int image_threads = m.opt.image_threads > 0 ? m.opt.image_threads : threads;
    m.image_pool = std::make_unique<ThreadPool>(image_threads);
    m.ctx.images.pool = m.image_pool.get();
    m.ctx.images.pool_mu = &m.image_pool_mu;
    std::string towers;
    if (m.vision) towers = "images: " + std::string(ProjectorTypeName(m.vision->config().projector)) + " encoder";
    if (m.audio) {
      towers += (towers.empty() ? "audio: " : ", audio: ") +
                std::string(AudioProjectorTypeName(m.audio->config().projector)) + " encoder";
    }
    m.Log(towers + " from " + m.opt.mmproj_path + ", " + std::to_string(image_threads) + " encode threads");
  }
  m.pool = std::make_unique<ThreadPool>(threads);
  m.embed_pool = std::make_unique<ThreadPool>(threads);  // the scheduler's is not reentrant
  SchedulerOptions so = m.opt.scheduler;
  if (!so.log) so.log = [&m](std::string_view l) { m.Log(std::string(l)); };
  m.speculation = MakeSpeculation(
      m.opt.speculation, *m.model,
      {.max_batch = so.slots, .max_context = so.max_context, .kv_dtype = so.kv_dtype, .pool = m.pool.get()});
  so.drafter = m.speculation.drafter.get();
  so.speculative = m.speculation.options;
  m.scheduler = std::make_unique<Scheduler>(*m.model, *m.tok, m.pool.get(), so);
  m.scheduler->Start();
  m.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  m.Log("chat template: " + std::string(ChatFormatName(choice.format)) + " (" + choice.reason + ")");
  if (so.drafter) {
    m.Log(
        "speculative decoding: " + so.drafter->name() + " drafter, up to " + std::to_string(so.speculative.draft_max) +
        " drafts per row and step" + (so.speculative.adaptive ? " (adaptive)" : "") +
        (support.bitwise_verify ? "" : "; greedy output equals plain greedy up to the device's rounding, not bitwise"));
  }
  m.loaded.store(true);
  Phase loading = Phase::kLoading;
  // A drain begun while loading holds: the scheduler refuses from the start.
  if (!m.phase.compare_exchange_strong(loading, Phase::kReady)) m.scheduler->Drain();
}

void Server::BeginDrain() {
  Impl& m = *impl_;
  m.phase.store(Phase::kDraining);
  if (m.loaded.load()) m.scheduler->Drain();
}

bool Server::WaitIdle(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  return !m.scheduler || m.scheduler->WaitIdle(timeout);
}

void Server::CancelAll() {
  if (impl_->scheduler) impl_->scheduler->CancelAll();
}

void Server::Stop() {
  Impl& m = *impl_;
  // Responses being written (the final chunks of cancelled streams) first.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (m.in_flight.load() > 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (m.http.is_running() || m.http_thread.joinable()) m.http.stop();
  if (m.http_thread.joinable()) m.http_thread.join();
  if (m.scheduler) m.scheduler->Stop();
}

const std::string& Server::model_id() const { return impl_->opt.model_id; }

}  // namespace kvshare::server
