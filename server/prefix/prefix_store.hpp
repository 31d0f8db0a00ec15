// PrefixStore: the key-value store a shared prefix tier lives in (Redis in production:
// server/prefix/prefix_store_redis.hpp; MemoryPrefixStore for tests), behind the narrow interface the
// tier needs, so the scheduler is testable without a network.
//
// Contract: exists() and get() are the lookup path (called from HTTP threads, never from the
// engine loop); each is one round trip bounded by the store's per-call timeout and throws
// StoreUnavailable when the store is down, slow or answers nonsense. put() queues a write and
// returns at once: writes go out on the store's own thread and never delay a request; a write
// that fails or does not fit in the queue is dropped and counted.
//
// Two stores implement it in production: RedisPrefixStore (shared by replicas) and
// DiskPrefixStore (server/prefix/prefix_store_disk.hpp: this replica's local disk, LMDB).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "turbokv/error.hpp"

namespace turbokv::server {

class StoreUnavailable : public Error {
 public:
  using Error::Error;
};

struct StoreCounters {
  uint64_t writes_total = 0;          // values stored
  uint64_t write_bytes_total = 0;     // their bytes
  uint64_t writes_failed_total = 0;   // writes the store refused or that hit an error
  uint64_t writes_dropped_total = 0;  // writes dropped because the queue was full
  uint64_t calls_failed_total = 0;    // lookups that hit an error or a timeout
  uint64_t read_bytes_total = 0;      // bytes of the values get() returned
  uint64_t evictions_total = 0;       // values the store dropped for room (counted where it says so)
  size_t queued_writes = 0;           // gauge: writes waiting in the queue
  size_t stored_bytes = 0, stored_values = 0;  // gauges, where the store knows them (disk)
};

class PrefixStore {
 public:
  virtual ~PrefixStore() = default;
  // One flag per key: whether the store holds it (one pipelined round trip).
  virtual std::vector<bool> exists(const std::vector<std::string>& keys) = 0;
  // The value, or nullopt when the key is gone (e.g. evicted since exists()).
  virtual std::optional<std::string> get(const std::string& key) = 0;
  virtual void put(std::string key, std::string value) = 0;
  // put() of a value that holds the prefixes stored under `shorter` (a conversation's next turn
  // holds its earlier turns): a store that evicts for room (disk) evicts those first from this
  // value's write on, so an idle conversation's newest turn outlasts the older turns of the
  // conversations still going. A shorter prefix read again (a regenerated answer, a system prompt
  // many conversations share) is most recently used again. Redis keeps its own LRU and TTL.
  virtual void put_superseding(std::string key, std::string value, std::vector<std::string> /*shorter*/) {
    put(std::move(key), std::move(value));
  }
  // The value under `key` was refused by its reader (damaged, another model's): a store that
  // keeps values until evicted (disk) drops it, so it is neither refused again nor kept from
  // being replaced. Redis values expire on their own and are overwritten by the next offer.
  virtual void refused(const std::string& /*key*/) {}
  // Waits (up to `ms`) until every queued write has been attempted: tests and benchmarks.
  virtual void flush(int ms) = 0;
  virtual StoreCounters counters() const = 0;
  virtual std::string describe() const = 0;
};

// An in-process map with switchable faults: the unit tests' store.
class MemoryPrefixStore : public PrefixStore {
 public:
  std::vector<bool> exists(const std::vector<std::string>& keys) override;
  std::optional<std::string> get(const std::string& key) override;
  void put(std::string key, std::string value) override;
  void put_superseding(std::string key, std::string value, std::vector<std::string> shorter) override;
  void flush(int) override {}
  StoreCounters counters() const override;
  std::string describe() const override { return "memory"; }

  // Faults: every call throws StoreUnavailable while down; get() answers nullopt (an eviction
  // between exists() and get()) while evicting.
  std::atomic<bool> down{false};
  std::atomic<bool> evicting{false};
  // Direct access for tests that damage values.
  std::map<std::string, std::string> snapshot() const;
  void overwrite(const std::string& key, std::string value);
  // Per key put with put_superseding: the shorter keys it named.
  std::map<std::string, std::vector<std::string>> supersessions() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> supersessions_;
  StoreCounters counters_;
};

}  // namespace turbokv::server
