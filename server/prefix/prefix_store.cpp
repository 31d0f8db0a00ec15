#include "server/prefix/prefix_store.hpp"

namespace turbokv::server {

std::vector<bool> MemoryPrefixStore::exists(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  if (down) {
    ++counters_.calls_failed_total;
    throw StoreUnavailable("memory store: down");
  }
  std::vector<bool> found;
  for (const auto& k : keys) found.push_back(values_.count(k) != 0);
  return found;
}

std::optional<std::string> MemoryPrefixStore::get(const std::string& key) {
  std::lock_guard lock(mutex_);
  if (down) {
    ++counters_.calls_failed_total;
    throw StoreUnavailable("memory store: down");
  }
  const auto it = values_.find(key);
  if (evicting || it == values_.end()) return std::nullopt;
  counters_.read_bytes_total += it->second.size();
  return it->second;
}

void MemoryPrefixStore::put(std::string key, std::string value) {
  std::lock_guard lock(mutex_);
  if (down) {
    ++counters_.writes_failed_total;
    return;
  }
  ++counters_.writes_total;
  counters_.write_bytes_total += value.size();
  values_[std::move(key)] = std::move(value);
}

void MemoryPrefixStore::put_superseding(std::string key, std::string value, std::vector<std::string> shorter) {
  {
    std::lock_guard lock(mutex_);
    if (!down) supersessions_[key] = std::move(shorter);
  }
  put(std::move(key), std::move(value));
}

std::map<std::string, std::vector<std::string>> MemoryPrefixStore::supersessions() const {
  std::lock_guard lock(mutex_);
  return supersessions_;
}

StoreCounters MemoryPrefixStore::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

std::map<std::string, std::string> MemoryPrefixStore::snapshot() const {
  std::lock_guard lock(mutex_);
  return values_;
}

void MemoryPrefixStore::overwrite(const std::string& key, std::string value) {
  std::lock_guard lock(mutex_);
  values_[key] = std::move(value);
}

}  // namespace turbokv::server
