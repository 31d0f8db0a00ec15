// DiskPrefixStore: the PrefixStore on this machine's local disk (serve --prefix-disk PATH), an
// LMDB environment in directory PATH (Debian liblmdb). It holds the prefixes the in-process
// prefix cache evicts and each finished turn's cache, so a conversation that went idle and lost
// its place in RAM is read back instead of recomputed, also after a restart.
//
// Why LMDB (docs/architecture.md, "Prefix tiers"): one writer and any number of readers without
// locks between them (readers see the last committed state through a read-only memory map), a
// copy-on-write B-tree whose commits are atomic, so a process killed mid-write leaves the store
// as of the last commit and it opens as it was, no log to replay, no compaction thread, a C API
// of a few calls. Values are written with one fdatasync per commit (MDB_NOMETASYNC: a power loss
// may undo the last commit, never tear the tree); the values' own XXH3 checksums
// (prefix_value.hpp) catch what a disk damages underneath.
//
// Layout: database "values" maps key -> value (the prefix value as the Redis tier stores it),
// database "stamps" maps key -> the last-use stamp (uint64, little-endian) that orders the LRU
// across restarts. The index of keys, sizes and stamps lives in memory (rebuilt by a scan at
// start), so exists() touches no disk.
//
// Budget: the values' bytes are kept within budget_bytes; a write evicts the least recently
// used (got or written) values first, and before them the prefixes a stored value supersedes
// (put_superseding: demoted below every stamp when the superseding value's batch is taken).
// The map (the file's largest size) is the budget plus a quarter plus 64 MiB for the B-tree's
// pages and LMDB's free pages; when LMDB still finds no room (free space too fragmented for a
// value's contiguous pages) more values are evicted and the write retried once, then counted as
// failed. A value larger than the budget is refused.
//
// Writes go through a bounded queue to one writer thread that commits them in batches; a full
// queue drops the write and a failing disk fails it (both counted): the tier is a cache.
//
// One process at a time: PATH/turbokv.lock is flock()ed (released by the kernel when the process
// dies, kill -9 included); a second server on the same PATH gets an error at start.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/prefix/prefix_store.hpp"

struct MDB_env;

namespace turbokv::server {

struct DiskStoreOptions {
  size_t budget_bytes = 8ull << 30;        // values' bytes kept at most (--prefix-disk-budget)
  size_t max_queued_bytes = 256ull << 20;  // pending writes beyond this are dropped
};

class DiskPrefixStore : public PrefixStore {
 public:
  // Opens the store in directory `path` (created if missing) and reads its index. Throws
  // turbokv::Error when it cannot (not a directory, not an LMDB store, another process has it).
  DiskPrefixStore(std::string path, DiskStoreOptions options);
  // Writes what is still queued (a clean stop keeps it), then closes.
  ~DiskPrefixStore() override;
  DiskPrefixStore(const DiskPrefixStore&) = delete;
  DiskPrefixStore& operator=(const DiskPrefixStore&) = delete;

  std::vector<bool> exists(const std::vector<std::string>& keys) override;
  std::optional<std::string> get(const std::string& key) override;
  void put(std::string key, std::string value) override;
  void put_superseding(std::string key, std::string value, std::vector<std::string> shorter) override;
  void refused(const std::string& key) override;
  void flush(int ms) override;
  StoreCounters counters() const override;
  std::string describe() const override;

  const std::string& path() const { return path_; }

 private:
  struct Batch {
    std::vector<std::pair<std::string, std::string>> values;
    std::vector<std::string> evict;                         // keys to delete first
    std::vector<std::pair<std::string, uint64_t>> stamps;   // last-use stamps to persist
    uint64_t first_stamp = 0;                               // values[i] gets first_stamp + i
  };
  void open_env();
  void load_index();  // (re)reads keys, sizes and stamps from the store
  void writer_loop();
  // Under mutex_: moves the next batch out of the queue, picks the victims it needs.
  Batch take_batch();
  void choose_victims(size_t incoming, Batch& batch);
  void forget(const std::string& key);  // under mutex_: drops a key from the index
  bool enqueue(std::string& key, std::string& value);  // under mutex_: false when refused or dropped
  void demote(const std::string& key);  // under mutex_: first in line for eviction
  int commit(const Batch& batch);       // one write transaction; an LMDB return code
  void write(Batch batch);
  void log_failure(const std::string& what);

  std::string path_;
  DiskStoreOptions options_;
  int lock_fd_ = -1;
  MDB_env* env_ = nullptr;
  unsigned int values_dbi_ = 0, stamps_dbi_ = 0;

  mutable std::mutex mutex_;  // guards everything below
  struct Held {
    uint64_t stamp = 0;
    size_t bytes = 0;
  };
  std::unordered_map<std::string, Held> index_;
  std::set<std::pair<uint64_t, std::string>> lru_;  // (stamp, key): oldest first
  uint64_t clock_ = 0;
  size_t stored_bytes_ = 0;
  std::unordered_map<std::string, uint64_t> touched_;  // stamps not yet persisted
  std::vector<std::string> dropped_;                   // refused keys not yet deleted
  // Queued values' shorter prefixes, demoted when the value's batch is taken (put_superseding).
  std::unordered_map<std::string, std::vector<std::string>> supersedes_;
  std::deque<std::pair<std::string, std::string>> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool stopping_ = false;
  int64_t next_log_ns_ = 0;
  StoreCounters counters_;
  std::condition_variable wake_;
  std::thread writer_;
};

}  // namespace turbokv::server
