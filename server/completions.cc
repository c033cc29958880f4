// POST /v1/chat/completions and /v1/completions: parse, build the scheduler
// request, submit, then either stream server-sent events as the scheduler's
// events arrive or answer once it has finished. The connection's socket is
// watched while waiting: a client that went away cancels its request.
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

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
  std::shared_ptr<RequestHandle> handle;
  std::unique_ptr<CompletionFormatter> fmt;
  int fd = -1;
  bool started = false;
  bool done = false;
  RequestEvent last;
  std::chrono::steady_clock::time_point t0;
};

}  // namespace

void Server::Impl::HandleCompletion(const httplib::Request& req, httplib::Response& res, bool chat) {
  CheckReady();
  CompletionRequest cr = ParseCompletionRequest(
      ParseBody(req), chat, {.strict = opt.strict_openai, .allow_image_urls = opt.allow_image_urls});
  KeepSchemaKeyOrder(cr, req.body);
  RequestOptions ro = BuildRequest(cr, ctx);
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
  const std::size_t prompt_tokens = ro.prompt.size();
  SubmitResult sub;
  try {
    sub = scheduler->Submit(std::move(ro), http_waiting.load());
  } catch (const Error& e) {
    throw BadRequest(e.what());
  }
  if (sub.status == SubmitStatus::kDraining) CheckReady();
  if (sub.status != SubmitStatus::kAccepted) {
    res.set_header("Retry-After", "1");
    throw ApiError(503,
                   "The server is busy: " + std::to_string(opt.scheduler.max_queue) +
                       " requests (or connections not yet read) are already waiting for a slot. Retry later.",
                   "unavailable_error", std::nullopt, "server_busy");
  }
  const std::uint64_t id = sub.handle->id();
  const auto t0 = std::chrono::steady_clock::now();
  auto fmt =
      std::make_unique<CompletionFormatter>(cr, NewId(chat ? "chatcmpl-" : "cmpl-"), UnixNow(), ctx.model_id, *tok);
  if (chat && ctx.chat) {
    if (auto offer = OfferedTools(cr)) fmt->EnableToolCalls(ToolCallParsing(ctx.chat->format(), *offer));
  }
  const int fd = FindConnectionSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  auto log_done = [this, id, chat, prompt_tokens, t0](const RequestEvent& e, bool stream, bool gone) {
    char buf[256];
    std::snprintf(
        buf, sizeof buf, "request %llu %s%s: prompt %zu tokens (%lld cached), output %lld tokens, %s (%s)%s, %.2f s",
        static_cast<unsigned long long>(id), chat ? "chat" : "completion", stream ? " stream" : "", prompt_tokens,
        static_cast<long long>(e.usage.cached_tokens), static_cast<long long>(e.usage.completion_tokens),
        FinishReasonName(e.reason), e.detail.c_str(), gone ? ", client gone" : "",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    Log(buf);
  };

  if (!cr.stream) {
    in_flight.fetch_add(1);
    bool gone = false;
    std::vector<RequestEvent> events;
    while (!fmt->finished()) {
      events.clear();
      if (sub.handle->Wait(events, kPoll)) {
        for (const RequestEvent& e : events) fmt->Add(e);
      }
      // Checked on every wake-up, not only on idle ones: when a step takes
      // less than kPoll, every Wait returns events.
      if (!gone && !fmt->finished() && PeerClosed(fd)) {
        gone = true;
        sub.handle->Cancel();
      }
    }
    log_done(fmt->last(), false, gone);
    in_flight.fetch_sub(1);
    if (fmt->last().error) throw ApiError(500, fmt->last().detail, "server_error");
    res.set_content(Dump(fmt->Final()), "application/json");
    return;
  }

  auto st = std::make_shared<Stream>();
  st->handle = sub.handle;
  st->fmt = std::move(fmt);
  st->fd = fd;
  st->t0 = t0;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // nginx: pass events through unbuffered
  in_flight.fetch_add(1);
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](std::size_t, httplib::DataSink& sink) {
        if (!st->started) {
          st->started = true;
          const std::string head = st->fmt->StreamStart();
          if (!head.empty() && !sink.write(head.data(), head.size())) {
            st->handle->Cancel();
            return false;
          }
        }
        std::vector<RequestEvent> events;
        if (!st->handle->Wait(events, kPoll)) {
          if (PeerClosed(st->fd)) {
            st->handle->Cancel();
            return false;
          }
          return true;
        }
        std::string out;
        for (const RequestEvent& e : events) {
          out += st->fmt->StreamEvent(e);
          if (e.finished) {
            st->done = true;
            st->last = e;
          }
        }
        // An empty write would tell cpp-httplib the stream ended (events of
        // tokens whose text is still held back produce no bytes).
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          st->handle->Cancel();
          return false;
        }
        if (st->done) sink.done();
        return true;
      },
      [this, st, log_done](bool) {
        const bool gone = !st->done;
        if (gone) {
          // The client went away: cancel, and take the final event (one step
          // away) for the log line.
          st->handle->Cancel();
          std::vector<RequestEvent> events;
          for (int i = 0; i < 100 && !st->done; ++i) {
            events.clear();
            st->handle->Wait(events, kPoll);
            for (const RequestEvent& e : events) {
              if (e.finished) st->done = true, st->last = e;
            }
          }
        }
        log_done(st->last, true, gone);
        in_flight.fetch_sub(1);
      });
}

}  // namespace kvshare::server
