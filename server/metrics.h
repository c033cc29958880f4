// GET /metrics: Prometheus text exposition (version 0.0.4) of the scheduler's
// counters and gauges and the HTTP layer's responses. Every metric is
// prefixed kvshare_; counters end in _total.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kvshare/grammar/grammar_cache.h"
#include "kvshare/runtime/scheduler.h"

namespace kvshare::server {

struct HttpStats {
  std::map<int, std::uint64_t> responses_by_status;
  int requests_in_flight = 0;   // completion requests being answered
  int connections_waiting = 0;  // accepted connections waiting for a connection thread
};

// grammars: the compiled-grammar cache's counters (kvshare serve
// --grammar-cache), zero when there is none.
std::string PrometheusText(const SchedulerStats& s, const HttpStats& http, const GrammarCacheStats& grammars = {});

}  // namespace kvshare::server
