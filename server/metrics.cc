#include "metrics.h"

#include <cstdio>
#include <string>

namespace kvshare::server {
namespace {

void Add(std::string& out, const char* name, const char* type, const char* help, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  out += std::string("# HELP kvshare_") + name + " " + help + "\n# TYPE kvshare_" + name + " " + type + "\nkvshare_" +
         name + " " + buf + "\n";
}

}  // namespace

std::string PrometheusText(const SchedulerStats& s, const HttpStats& http, const GrammarCacheStats& grammars) {
  std::string o;
  Add(o, "requests_total", "counter", "Requests accepted by the scheduler.", static_cast<double>(s.requests_accepted));
  Add(o, "requests_rejected_total", "counter",
      "Requests refused because the queue was full or the server draining (503).",
      static_cast<double>(s.requests_rejected));
  Add(o, "requests_finished_total", "counter", "Requests finished, any reason.",
      static_cast<double>(s.requests_finished));
  Add(o, "requests_cancelled_total", "counter", "Requests cancelled (client gone, drain).",
      static_cast<double>(s.requests_cancelled));
  Add(o, "prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", static_cast<double>(s.prompt_tokens));
  Add(o, "prompt_tokens_cached_total", "counter", "Prompt tokens reused from the prompt cache.",
      static_cast<double>(s.cached_prompt_tokens));
  Add(o, "prefill_tokens_total", "counter", "Prompt tokens computed (not from the cache).",
      static_cast<double>(s.prefill_tokens));
  Add(o, "generation_tokens_total", "counter", "Tokens sampled.", static_cast<double>(s.generated_tokens));
  Add(o, "prompt_cache_hits_total", "counter", "Admissions that reused at least one cached prompt token.",
      static_cast<double>(s.prompt_cache_hits));
  Add(o, "prompt_cache_misses_total", "counter", "Admissions that reused none.",
      static_cast<double>(s.prompt_cache_misses));
  Add(o, "prompt_cache_fallbacks_total", "counter",
      "Cached prefixes lost because sliding-window rings no longer held them (see --swa-full).",
      static_cast<double>(s.prompt_cache_fallbacks));
  Add(o, "queue_depth", "gauge", "Requests waiting for a slot.", s.queue_depth);
  Add(o, "active_slots", "gauge", "Slots (KV cache rows) serving a request.", s.active_slots);
  Add(o, "slots", "gauge", "Slots (KV cache rows).", s.slots);
  Add(o, "kv_cache_bytes", "gauge", "KV cache bytes allocated.", static_cast<double>(s.kv_bytes));
  Add(o, "kv_cache_used_bytes", "gauge", "KV cache bytes holding cached positions, all slots.",
      static_cast<double>(s.kv_bytes_used));
  Add(o, "kv_cache_tokens", "gauge", "Cached positions, all slots.", static_cast<double>(s.kv_tokens));
  Add(o, "prefill_tokens_per_second", "gauge", "Prompt tokens computed per second over the last 10 s.",
      s.recent_prefill_tokens_per_second);
  Add(o, "decode_tokens_per_second", "gauge", "Tokens sampled per second over the last 10 s.",
      s.recent_decode_tokens_per_second);
  Add(o, "steps_total", "counter", "Batched forward steps.", static_cast<double>(s.steps));
  Add(o, "spec_verify_rows_total", "counter", "Speculative decoding: decode rows that verified at least one draft.",
      static_cast<double>(s.spec_verify_rows));
  Add(o, "spec_draft_tokens_total", "counter", "Speculative decoding: drafted tokens verified.",
      static_cast<double>(s.spec_drafted_tokens));
  Add(o, "spec_accepted_tokens_total", "counter", "Speculative decoding: drafted tokens accepted.",
      static_cast<double>(s.spec_accepted_tokens));
  Add(o, "busy_seconds_total", "counter", "Seconds spent in forward steps and sampling.", s.busy_seconds);
  Add(o, "http_requests_in_flight", "gauge", "Completion requests being answered.", http.requests_in_flight);
  Add(o, "http_connections_waiting", "gauge",
      "Connections accepted but waiting for a connection thread (they count toward the 503 queue limit).",
      http.connections_waiting);
  Add(o, "grammar_cache_hits_total", "counter",
      "Grammars taken from the compiled-grammar cache (or another request's compile).",
      static_cast<double>(grammars.hits));
  Add(o, "grammar_cache_misses_total", "counter", "Grammars compiled (not in the cache).",
      static_cast<double>(grammars.misses));
  Add(o, "grammar_cache_evictions_total", "counter",
      "Compiled grammars dropped to fit --grammar-cache / --grammar-cache-mb.",
      static_cast<double>(grammars.evictions));
  Add(o, "grammar_cache_entries", "gauge", "Compiled grammars kept.", static_cast<double>(grammars.entries));
  Add(o, "grammar_cache_bytes", "gauge", "Bytes of the compiled grammars kept (approximate).",
      static_cast<double>(grammars.bytes));
  o += "# HELP kvshare_http_responses_total HTTP responses by status code.\n# TYPE kvshare_http_responses_total "
       "counter\n";
  for (const auto& [status, n] : http.responses_by_status) {
    o += "kvshare_http_responses_total{code=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  }
  return o;
}

}  // namespace kvshare::server
