// RedisPrefixStore: the PrefixStore on a Redis server (Debian redis-server; client hiredis).
//
// Lookups borrow a connection from a small pool (hiredis contexts are single-threaded) and
// pipeline their commands: exists() sends one EXISTS per key and reads the answers in one round
// trip. Every call (connecting included) has the timeout as a whole, tens of milliseconds: each
// socket wait gets only what is left of it, so a slow, dead or trickling Redis costs a request
// at most that, then the request computes. The reply reader refuses arrays (no command of the
// store gets one; hiredis 0.14 would allocate whatever length one announces) and replies longer
// than max_value_bytes, so an impostor cannot make a replica allocate more than that.
// After a failure the store is skipped for `retry_ms` (no connect attempt per request while
// Redis is down) and reconnects after that.
//
// Writes go through a bounded queue to one writer thread with its own connection: SET key value
// EX ttl. A full queue drops the write (counted): the tier is a cache, losing a write costs a
// later recomputation, never a wrong answer.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/prefix/prefix_store.hpp"

struct redisContext;

namespace turbokv::server {

struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;      // Redis 6 ACL user (empty: the default user)
  std::string password;  // empty: no AUTH
};
// "redis://HOST:PORT[/DB]", "redis://:PASSWORD@HOST:PORT[/DB]", "redis://USER:PASSWORD@HOST:PORT";
// throws turbokv::Error on anything else.
RedisAddress parse_redis_url(const std::string& url);

struct RedisStoreOptions {
  int timeout_ms = 50;              // per call (connect, each read and write)
  int retry_ms = 1000;              // after a failure, skip the store this long
  int ttl_seconds = 3600;           // EX of every value (0: no TTL; rely on maxmemory LRU)
  size_t max_queued_bytes = 256ull << 20;  // pending writes beyond this are dropped
  int pool = 4;                     // idle lookup connections kept
  // Longest reply accepted (a GET's value). Redis itself refuses strings over 512 MB
  // (proto-max-bulk-len), so no stored value is longer.
  size_t max_value_bytes = 512ull << 20;
};

class RedisPrefixStore : public PrefixStore {
 public:
  RedisPrefixStore(RedisAddress address, RedisStoreOptions options);
  ~RedisPrefixStore() override;
  RedisPrefixStore(const RedisPrefixStore&) = delete;
  RedisPrefixStore& operator=(const RedisPrefixStore&) = delete;

  std::vector<bool> exists(const std::vector<std::string>& keys) override;
  std::optional<std::string> get(const std::string& key) override;
  void put(std::string key, std::string value) override;
  void flush(int ms) override;
  StoreCounters counters() const override;
  std::string describe() const override;

 private:
  struct Connection;
  using Deadline = std::chrono::steady_clock::time_point;
  Deadline call_deadline() const;  // now + the per-call timeout
  Connection borrow(Deadline deadline);    // throws StoreUnavailable
  void give_back(Connection connection);   // keeps it for the next lookup
  redisContext* connect(Deadline deadline);  // throws StoreUnavailable
  void call_failed(redisContext* c, const std::string& why);  // frees c, counts, backs off
  void failed(const std::string& why);     // starts the back-off
  bool backing_off() const;
  void writer_loop();

  RedisAddress address_;
  RedisStoreOptions options_;

  mutable std::mutex mutex_;  // guards everything below but the atomics
  std::vector<redisContext*> idle_;
  StoreCounters counters_;
  std::deque<std::pair<std::string, std::string>> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::atomic<int64_t> retry_after_ns_{0};  // steady_clock time before which calls are skipped
  std::thread writer_;
};

}  // namespace turbokv::server
