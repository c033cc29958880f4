// POST /v1/chat/completions and /v1/completions: parse, build the scheduler
// request, submit, then either stream server-sent events as the scheduler's
// events arrive or answer once it has finished. The connection's socket is
// watched while waiting: a client that went away cancels its request.
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "choice_set.h"
#include "connection.h"
#include "kvshare/common/error.h"
#include "openai_response.h"
#include "server_impl.h"

namespace kvshare::server {
namespace {

// How long a connection thread waits for events before it looks at the socket.
constexpr std::chrono::milliseconds kPoll(20);

std::string NewId(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return prefix + std::string(buf);
}

std::int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One streamed response, shared by cpp-httplib's content provider and releaser.
struct Stream {
  std::unique_ptr<ChoiceSet> set;
  int fd = -1;
  bool started = false;
  bool done = false;
};

// The echo text of prompt p: as sent, or its ids decoded.
std::string EchoText(const CompletionRequest& cr, std::size_t p, const Tokenizer& tok) {
  const CompletionRequest::Prompt& prompt = cr.prompts[p];
  return prompt.text ? *prompt.text : tok.Decode(prompt.tokens);
}

}  // namespace

void Server::Impl::HandleCompletion(const httplib::Request& req, httplib::Response& res, bool chat) {
  CheckReady();
  CompletionRequest cr = ParseCompletionRequest(
      ParseBody(req), chat,
      {.strict = opt.strict_openai, .allow_image_urls = opt.allow_image_urls, .grammars = &grammars});
  KeepSchemaKeyOrder(cr, req.body);
  const std::size_t n_prompts = chat ? 1 : cr.prompts.size();
  const std::size_t per_prompt = static_cast<std::size_t>(cr.best_of);
  const std::size_t total = n_prompts * per_prompt;
  const std::size_t room = static_cast<std::size_t>(opt.scheduler.max_queue + opt.scheduler.slots);
  if (total > room) {
    throw BadRequest("This request needs " + std::to_string(total) + " generations (" + std::to_string(n_prompts) +
                         (n_prompts == 1 ? " prompt x " : " prompts x ") + std::to_string(per_prompt) +
                         (cr.best_of > cr.n ? " best_of" : " n") + "); this server takes at most " +
                         std::to_string(room) +
                         " at once (--slots + --max-queue). Send fewer prompts or choices per request.",
                     chat ? "n" : "prompt", "too_many_choices");
  }
  std::vector<RequestOptions> built;  // every prompt checked before anything is submitted
  for (std::size_t p = 0; p < n_prompts; ++p) built.push_back(BuildRequest(cr, ctx, p));
  if (!cr.model.empty() && cr.model != ctx.model_id) {
    res.set_header("X-Kvshare-Served-Model", ctx.model_id);
    Log("request names model '" + cr.model + "'; serving " + ctx.model_id + " (--strict-openai answers 404)");
  }
  if (!cr.ignored.empty()) {
    std::string names;
    for (const std::string& f : cr.ignored) names += (names.empty() ? "" : ", ") + f;
    res.set_header("X-Kvshare-Ignored-Fields", names);
    Log(std::string(chat ? "chat" : "completion") + " request: ignored unknown fields " + names +
        " (--strict-openai refuses them)");
  }
  std::size_t prompt_tokens = 0;
  for (const RequestOptions& ro : built) prompt_tokens += ro.prompt.size();
  const std::string response_id = NewId(chat ? "chatcmpl-" : "cmpl-");
  const std::int64_t created = UnixNow();
  auto set = std::make_unique<ChoiceSet>(cr);
  std::optional<ToolCallParserOptions> tools;
  if (chat && ctx.chat) {
    if (auto offer = OfferedTools(cr)) {
      tools = ToolCallParsing(ctx.chat->format(), *offer);
      // With a format the reply is one JSON document: a call or the answer (build_request.cc).
      if (cr.response_format.type != CompletionRequest::ResponseFormat::Type::kText)
        tools->syntax = ToolCallSyntax::kJson;
    }
  }
  std::uint64_t id = 0;
  for (std::size_t p = 0; p < n_prompts; ++p) {
    std::uint64_t leader = 0;
    for (std::size_t i = 0; i < per_prompt; ++i) {
      RequestOptions ro = built[p];
      ro.sampler.seed = built[p].sampler.seed + i;  // choice i: seed + i (openai_request.h)
      ro.prefill_from = leader;
      SubmitResult sub;
      try {
        sub = scheduler->Submit(std::move(ro), http_waiting.load());
      } catch (const Error& e) {
        set->CancelAll();
        throw BadRequest(e.what());
      }
      if (sub.status != SubmitStatus::kAccepted) {
        set->CancelAll();
        if (sub.status == SubmitStatus::kDraining) CheckReady();
        res.set_header("Retry-After", "1");
        throw ApiError(503,
                       "The server is busy: " + std::to_string(opt.scheduler.max_queue) +
                           " requests (or connections not yet read) are already waiting for a slot. Retry later.",
                       "unavailable_error", std::nullopt, "server_busy");
      }
      if (leader == 0) leader = sub.handle->id();
      if (id == 0) id = sub.handle->id();
      ChoiceOptions co{.index = static_cast<int>(p) * cr.n + static_cast<int>(i),
                       .ends_stream = total == 1,
                       .echo = cr.echo,
                       .drop_output = cr.max_tokens_zero};
      if (cr.echo) {
        co.prompt_text = EchoText(cr, p, *tok);
        co.prompt = built[p].prompt;
      }
      auto fmt = std::make_unique<CompletionFormatter>(cr, response_id, created, ctx.model_id, *tok, std::move(co));
      if (tools) fmt->EnableToolCalls(*tools);
      set->Add(sub.handle, std::move(fmt), p);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = FindConnectionSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  auto log_done = [this, id, chat, prompt_tokens, t0, total](const ChoiceSet& s, bool stream, bool gone) {
    const RequestEvent& e = s.last();
    const RequestUsage u = s.Usage();
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "request %llu %s%s: prompt %zu tokens (%lld cached), output %lld tokens, %s (%s)%s%s, %.2f s",
                  static_cast<unsigned long long>(id), chat ? "chat" : "completion", stream ? " stream" : "",
                  prompt_tokens, static_cast<long long>(u.cached_tokens), static_cast<long long>(u.completion_tokens),
                  FinishReasonName(e.reason), e.detail.c_str(), gone ? ", client gone" : "",
                  total > 1 ? (", " + std::to_string(total) + " choices").c_str() : "",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    Log(buf);
  };

  if (!cr.stream) {
    in_flight.fetch_add(1);
    bool gone = false;
    while (!set->finished()) {
      set->Collect(kPoll);
      // Checked on every wake-up, not only on idle ones: when a step takes
      // less than kPoll, every Wait returns events.
      if (!gone && !set->finished() && PeerClosed(fd)) {
        gone = true;
        set->CancelAll();
      }
    }
    log_done(*set, false, gone);
    in_flight.fetch_sub(1);
    if (set->last().error) throw ApiError(500, set->last().detail, "server_error");
    res.set_content(Dump(set->Final()), "application/json");
    return;
  }

  auto st = std::make_shared<Stream>();
  st->set = std::move(set);
  st->fd = fd;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // nginx: pass events through unbuffered
  in_flight.fetch_add(1);
  SetEventStream(
      req, res,
      [st](std::size_t, httplib::DataSink& sink) {
        if (!st->started) {
          st->started = true;
          const std::string head = st->set->StreamStart();
          if (!head.empty() && !sink.write(head.data(), head.size())) {
            st->set->CancelAll();
            return false;
          }
        }
        const std::string out = st->set->CollectStream(kPoll);
        st->done = st->set->finished();
        return PumpEvents(sink, out, st->done, st->fd, [&] { st->set->CancelAll(); });
      },
      [this, st, log_done](bool) {
        const bool gone = !st->done;
        if (gone) {
          // The client went away: cancel, and take the final events (one
          // step away) for the log line.
          st->set->CancelAll();
          for (int i = 0; i < 100 && !st->set->finished(); ++i) st->set->Collect(kPoll);
        }
        log_done(*st->set, true, gone);
        in_flight.fetch_sub(1);
      });
}

bool PumpEvents(httplib::DataSink& sink, const std::string& out, bool done, int fd,
                const std::function<void()>& cancel) {
  if (out.empty() && !done) {
    if (!PeerClosed(fd)) return true;
    cancel();
    return false;
  }
  // An empty write would tell cpp-httplib the stream ended (events of tokens
  // whose text is still held back produce no bytes).
  if (!out.empty() && !sink.write(out.data(), out.size())) {
    cancel();
    return false;
  }
  if (done) sink.done();
  return true;
}

void SetEventStream(const httplib::Request& req, httplib::Response& res, httplib::ContentProviderWithoutLength provider,
                    httplib::ContentProviderResourceReleaser release) {
  if (req.version != "HTTP/1.0") {
    res.set_chunked_content_provider("text/event-stream", std::move(provider), std::move(release));
    return;
  }
  // cpp-httplib closes a 1.0 connection after the answer unless it asked
  // for Keep-Alive; then the stream's end is told by shutting the write side.
  const int fd = FindConnectionSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  res.set_header("Connection", "close");
  res.set_content_provider("text/event-stream", std::move(provider), [fd, release = std::move(release)](bool success) {
    if (release) release(success);
    if (fd >= 0) shutdown(fd, SHUT_WR);
  });
}

}  // namespace kvshare::server
