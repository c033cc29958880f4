#include "response_store.h"

#include <algorithm>

namespace kvshare::server {

void ResponseStore::Put(const std::string& id, StoredResponse r) {
  if (capacity_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) {
    it->second = std::move(r);
    return;
  }
  entries_.emplace(id, std::move(r));
  order_.push_back(id);
  while (order_.size() > capacity_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

bool ResponseStore::Erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.erase(id) == 0) return false;
  order_.erase(std::find(order_.begin(), order_.end(), id));
  return true;
}

std::size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace kvshare::server
