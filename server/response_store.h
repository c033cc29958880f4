// The Responses API's in-memory store (/v1/responses with "store": true, the
// default): per response id, the response object (GET /v1/responses/{id}) and
// the conversation that led to it as chat messages, its own output included,
// which a later request's previous_response_id continues, and the request's
// own input items (GET /v1/responses/{id}/input_items). Bounded by a count:
// the oldest response is evicted first (DELETE /v1/responses/{id} drops one);
// nothing survives a restart.
// Thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kvshare::server {

struct StoredResponse {
  nlohmann::json response;  // the response object as answered
  nlohmann::json messages;  // chat messages (openai_request.h's shape), instructions left out
  nlohmann::json input_items = nlohmann::json::array();  // the request's input (responses_format.h's InputItems)
};

class ResponseStore {
 public:
  // capacity: responses kept (kvshare serve --responses-kept); 0 keeps none.
  explicit ResponseStore(std::size_t capacity) : capacity_(capacity) {}

  // Keeps `r` under `id` (replacing an entry of that id), evicting the
  // oldest beyond the capacity.
  void Put(const std::string& id, StoredResponse r);
  // The entry, or nullopt when unknown or evicted.
  std::optional<StoredResponse> Get(const std::string& id) const;
  // Drops the entry; false when there was none.
  bool Erase(const std::string& id);
  std::size_t size() const;
  std::size_t capacity() const { return capacity_; }

 private:
  std::size_t capacity_;
  mutable std::mutex mu_;
  std::map<std::string, StoredResponse> entries_;
  std::deque<std::string> order_;  // ids, oldest first
};

}  // namespace kvshare::server
