#include "server/prefix/prefix_store_disk.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <lmdb.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace turbokv::server {

namespace {

// Values written per commit at most: one fdatasync covers them, and the queue's lock is not held
// while they are written.
constexpr size_t kBatchBytes = 64ull << 20;
constexpr size_t kBatchValues = 64;
// LMDB refuses longer keys (its default MDB_MAXKEYSIZE); ours are 23 bytes.
constexpr size_t kMaxKeyBytes = 511;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

MDB_val as_val(const std::string& s) { return {s.size(), const_cast<char*>(s.data())}; }

std::string stamp_bytes(uint64_t stamp) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((stamp >> (8 * i)) & 0xFF);
  return out;
}

uint64_t stamp_of(const MDB_val& v) {
  if (v.mv_size != 8) return 0;  // not ours: the oldest
  uint64_t stamp = 0;
  for (int i = 0; i < 8; ++i) stamp |= static_cast<uint64_t>(static_cast<const uint8_t*>(v.mv_data)[i]) << (8 * i);
  return stamp;
}

// A read-only transaction, aborted when it goes out of scope.
struct ReadTxn {
  MDB_txn* txn = nullptr;
  explicit ReadTxn(MDB_env* env) {
    if (const int rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn); rc != 0) {
      txn = nullptr;
      throw StoreUnavailable(fmt::format("disk store: cannot begin a read: {}", mdb_strerror(rc)));
    }
  }
  ~ReadTxn() {
    if (txn != nullptr) mdb_txn_abort(txn);
  }
  ReadTxn(const ReadTxn&) = delete;
  ReadTxn& operator=(const ReadTxn&) = delete;
};

}  // namespace

DiskPrefixStore::DiskPrefixStore(std::string path, DiskStoreOptions options) : path_(std::move(path)), options_(options) {
  if (path_.empty()) throw Error("--prefix-disk: empty path");
  if (options_.budget_bytes < (1u << 20)) {
    throw Error(fmt::format("--prefix-disk-budget {} bytes: at least 1 MiB", options_.budget_bytes));
  }
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  if (!std::filesystem::is_directory(path_)) {
    throw Error(fmt::format("--prefix-disk {}: not a directory and cannot be created ({})", path_,
                            ec ? ec.message() : "a file is in the way"));
  }
  const std::string lock_path = path_ + "/turbokv.lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw Error(fmt::format("--prefix-disk {}: cannot open {}: {}", path_, lock_path, std::strerror(errno)));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd_);
    throw Error(fmt::format("--prefix-disk {}: {}", path_,
                            err == EWOULDBLOCK ? "another server has this store open (one process per path)"
                                               : std::string("cannot lock it: ") + std::strerror(err)));
  }
  try {
    open_env();
    load_index();
  } catch (...) {
    if (env_ != nullptr) mdb_env_close(env_);
    ::close(lock_fd_);
    throw;
  }
  writer_ = std::thread([this] { writer_loop(); });
}

DiskPrefixStore::~DiskPrefixStore() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  writer_.join();
  mdb_env_close(env_);
  ::close(lock_fd_);  // releases the flock
}

void DiskPrefixStore::open_env() {
  auto check = [&](int rc, const char* what) {
    if (rc != 0) {
      throw Error(fmt::format("--prefix-disk {}: {}: {}{}", path_, what, mdb_strerror(rc),
                              rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_VERSION_MISMATCH
                                  ? " (not a turbokv disk store, or damaged: move it away)"
                                  : ""));
    }
  };
  check(mdb_env_create(&env_), "cannot create an LMDB environment");
  check(mdb_env_set_maxdbs(env_, 2), "mdb_env_set_maxdbs");
  check(mdb_env_set_maxreaders(env_, 512), "mdb_env_set_maxreaders");
  const size_t map = options_.budget_bytes + options_.budget_bytes / 4 + (64ull << 20);
  check(mdb_env_set_mapsize(env_, map), "mdb_env_set_mapsize");
  // MDB_NOTLS: read transactions belong to the call, not the thread (HTTP threads are a pool).
  check(mdb_env_open(env_, path_.c_str(), MDB_NOTLS | MDB_NOMETASYNC, 0644), "cannot open the store");
  int stale = 0;
  mdb_reader_check(env_, &stale);  // reader slots of a killed process
  MDB_txn* txn = nullptr;
  check(mdb_txn_begin(env_, nullptr, 0, &txn), "cannot begin a transaction");
  int rc = mdb_dbi_open(txn, "values", MDB_CREATE, &values_dbi_);
  if (rc == 0) rc = mdb_dbi_open(txn, "stamps", MDB_CREATE, &stamps_dbi_);
  if (rc != 0) {
    mdb_txn_abort(txn);
    check(rc, "cannot open its databases");
  }
  check(mdb_txn_commit(txn), "cannot commit its databases");
}

void DiskPrefixStore::load_index() {
  std::unordered_map<std::string, Held> index;
  std::set<std::pair<uint64_t, std::string>> lru;
  size_t bytes = 0;
  uint64_t clock = 0;
  {
    ReadTxn read(env_);
    MDB_cursor* cursor = nullptr;
    if (const int rc = mdb_cursor_open(read.txn, values_dbi_, &cursor); rc != 0) {
      throw Error(fmt::format("--prefix-disk {}: cannot read the index: {}", path_, mdb_strerror(rc)));
    }
    MDB_val k, v;
    for (int rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
      std::string key(static_cast<const char*>(k.mv_data), k.mv_size);
      MDB_val s;
      const uint64_t stamp = mdb_get(read.txn, stamps_dbi_, &k, &s) == 0 ? stamp_of(s) : 0;
      index[key] = {stamp, v.mv_size};
      lru.emplace(stamp, std::move(key));
      bytes += v.mv_size;
      clock = std::max(clock, stamp);
    }
    mdb_cursor_close(cursor);
  }
  std::lock_guard lock(mutex_);
  index_ = std::move(index);
  lru_ = std::move(lru);
  stored_bytes_ = bytes;
  clock_ = std::max(clock_, clock);
}

std::string DiskPrefixStore::describe() const {
  std::lock_guard lock(mutex_);
  return fmt::format("{} (LMDB, budget {} MiB; holds {} prefixes, {} MiB)", path_, options_.budget_bytes >> 20,
                     index_.size(), stored_bytes_ >> 20);
}

std::vector<bool> DiskPrefixStore::exists(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  std::vector<bool> found;
  found.reserve(keys.size());
  for (const auto& k : keys) found.push_back(index_.count(k) != 0);
  return found;
}

std::optional<std::string> DiskPrefixStore::get(const std::string& key) {
  if (key.empty() || key.size() > kMaxKeyBytes) return std::nullopt;
  std::optional<std::string> value;
  try {
    ReadTxn read(env_);
    MDB_val k = as_val(key), v;
    const int rc = mdb_get(read.txn, values_dbi_, &k, &v);
    if (rc == 0) {
      value.emplace(static_cast<const char*>(v.mv_data), v.mv_size);
    } else if (rc != MDB_NOTFOUND) {
      throw StoreUnavailable(fmt::format("disk store: read failed: {}", mdb_strerror(rc)));
    }
  } catch (const StoreUnavailable&) {
    std::lock_guard lock(mutex_);
    ++counters_.calls_failed_total;
    throw;
  }
  std::lock_guard lock(mutex_);
  if (!value) return value;
  counters_.read_bytes_total += value->size();
  // Most recently used now; the stamp reaches the disk with the next batch of writes.
  if (const auto it = index_.find(key); it != index_.end()) {
    lru_.erase({it->second.stamp, key});
    it->second.stamp = ++clock_;
    lru_.emplace(it->second.stamp, key);
    touched_[key] = it->second.stamp;
  }
  return value;
}

bool DiskPrefixStore::enqueue(std::string& key, std::string& value) {
  if (key.empty() || key.size() > kMaxKeyBytes || value.size() > options_.budget_bytes) {
    ++counters_.writes_failed_total;  // can never fit
    return false;
  }
  if (queued_bytes_ + value.size() > options_.max_queued_bytes) {
    ++counters_.writes_dropped_total;
    return false;
  }
  queued_bytes_ += value.size();
  queue_.emplace_back(std::move(key), std::move(value));
  return true;
}

void DiskPrefixStore::put(std::string key, std::string value) {
  {
    std::lock_guard lock(mutex_);
    if (!enqueue(key, value)) return;
  }
  wake_.notify_all();
}

void DiskPrefixStore::put_superseding(std::string key, std::string value, std::vector<std::string> shorter) {
  {
    std::lock_guard lock(mutex_);
    const std::string k = key;
    if (!enqueue(key, value)) return;
    if (shorter.empty()) {
      supersedes_.erase(k);
    } else {
      supersedes_[k] = std::move(shorter);
    }
  }
  wake_.notify_all();
}

void DiskPrefixStore::demote(const std::string& key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return;
  // Below the least recently used (stamps never go under 0: demoted keys then tie, ordered by
  // key, and still go before every other). Persisted with the next batch, as get()'s touches.
  const uint64_t front = lru_.begin()->first;
  lru_.erase({it->second.stamp, key});
  it->second.stamp = front > 0 ? front - 1 : 0;
  lru_.emplace(it->second.stamp, key);
  touched_[key] = it->second.stamp;
}

void DiskPrefixStore::refused(const std::string& key) {
  {
    std::lock_guard lock(mutex_);
    if (index_.count(key) == 0) return;
    forget(key);
    dropped_.push_back(key);
  }
  wake_.notify_all();
}

void DiskPrefixStore::flush(int ms) {
  std::unique_lock lock(mutex_);
  wake_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return queue_.empty() && dropped_.empty() && !writing_; });
}

StoreCounters DiskPrefixStore::counters() const {
  std::lock_guard lock(mutex_);
  StoreCounters c = counters_;
  c.queued_writes = queue_.size();
  c.stored_bytes = stored_bytes_;
  c.stored_values = index_.size();
  return c;
}

void DiskPrefixStore::forget(const std::string& key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return;
  lru_.erase({it->second.stamp, key});
  stored_bytes_ -= it->second.bytes;
  touched_.erase(key);
  index_.erase(it);
}

void DiskPrefixStore::choose_victims(size_t incoming, Batch& batch) {
  while (stored_bytes_ + incoming > options_.budget_bytes && !lru_.empty()) {
    const std::string key = lru_.begin()->second;
    forget(key);
    batch.evict.push_back(key);
    ++counters_.evictions_total;
  }
}

DiskPrefixStore::Batch DiskPrefixStore::take_batch() {
  Batch batch;
  size_t incoming = 0;
  while (!queue_.empty() && batch.values.size() < kBatchValues && (batch.values.empty() || incoming < kBatchBytes)) {
    auto& [key, value] = queue_.front();
    queued_bytes_ -= value.size();
    forget(key);  // a rewrite replaces the old value (and its bytes)
    incoming += value.size();
    batch.values.emplace_back(std::move(key), std::move(value));
    queue_.pop_front();
  }
  // The prefixes these values hold go first, before the victims for the values are chosen (a
  // conversation's next turn takes its last turn's place). Demoted even if the write then fails:
  // they are still stored, only first in line.
  for (const auto& [key, value] : batch.values) {
    const auto it = supersedes_.find(key);
    if (it == supersedes_.end()) continue;
    for (const std::string& shorter : it->second) demote(shorter);
    supersedes_.erase(it);
  }
  batch.evict = std::move(dropped_);
  dropped_.clear();
  choose_victims(incoming, batch);
  batch.first_stamp = clock_ + 1;
  clock_ += batch.values.size();
  for (auto& [key, stamp] : touched_) batch.stamps.emplace_back(key, stamp);
  touched_.clear();
  return batch;
}

int DiskPrefixStore::commit(const Batch& batch) {
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env_, nullptr, 0, &txn);
  if (rc != 0) return rc;
  for (const auto& key : batch.evict) {
    MDB_val k = as_val(key);
    for (const unsigned int dbi : {values_dbi_, stamps_dbi_}) {
      rc = mdb_del(txn, dbi, &k, nullptr);
      if (rc != 0 && rc != MDB_NOTFOUND) break;
      rc = 0;
    }
    if (rc != 0) break;
  }
  for (size_t i = 0; rc == 0 && i < batch.stamps.size(); ++i) {
    MDB_val k = as_val(batch.stamps[i].first);
    const std::string s = stamp_bytes(batch.stamps[i].second);
    MDB_val v = as_val(s);
    rc = mdb_put(txn, stamps_dbi_, &k, &v, 0);
  }
  for (size_t i = 0; rc == 0 && i < batch.values.size(); ++i) {
    MDB_val k = as_val(batch.values[i].first), v = as_val(batch.values[i].second);
    rc = mdb_put(txn, values_dbi_, &k, &v, 0);
    // Its stamp: the order it was written in (the index gives the same one after the commit).
    const std::string s = stamp_bytes(batch.first_stamp + i);
    MDB_val sv = as_val(s);
    if (rc == 0) rc = mdb_put(txn, stamps_dbi_, &k, &sv, 0);
  }
  if (rc != 0) {
    mdb_txn_abort(txn);
    return rc;
  }
  return mdb_txn_commit(txn);
}

void DiskPrefixStore::write(Batch batch) {
  int rc = commit(batch);
  if (rc == MDB_MAP_FULL && !batch.values.empty()) {
    // The values' bytes fit the budget but LMDB found no run of free pages long enough: evict
    // an eighth of the budget more (committed on its own, so the pages are free), then retry.
    Batch room;
    room.evict = std::move(batch.evict);
    batch.evict.clear();
    {
      std::lock_guard lock(mutex_);
      size_t incoming = options_.budget_bytes / 8;
      for (const auto& [k, v] : batch.values) incoming += v.size();
      choose_victims(incoming, room);
    }
    rc = commit(room);
    if (rc == 0) rc = commit(batch);
  }
  {
    std::lock_guard lock(mutex_);
    if (rc == 0) {
      for (size_t i = 0; i < batch.values.size(); ++i) {
        auto& [key, value] = batch.values[i];
        index_[key] = {batch.first_stamp + i, value.size()};
        lru_.emplace(batch.first_stamp + i, key);
        stored_bytes_ += value.size();
        ++counters_.writes_total;
        counters_.write_bytes_total += value.size();
      }
      return;
    }
    counters_.writes_failed_total += batch.values.size();
    log_failure(fmt::format("writing {} prefixes failed: {}", batch.values.size(), mdb_strerror(rc)));
  }
  // The index dropped the victims of a transaction that did not commit: read it back from the
  // store, which is as of the last commit.
  try {
    load_index();
  } catch (const Error& e) {
    std::lock_guard lock(mutex_);
    log_failure(e.what());
  }
}

void DiskPrefixStore::log_failure(const std::string& what) {
  // Once a minute at most: a full or failing disk fails every write.
  const int64_t now = now_ns();
  if (now < next_log_ns_) return;
  next_log_ns_ = now + 60'000'000'000;
  std::fprintf(stderr, "serve: prefix disk %s: %s (the prefixes are recomputed when needed)\n", path_.c_str(), what.c_str());
}

void DiskPrefixStore::writer_loop() {
  std::unique_lock lock(mutex_);
  // A store left over budget (restarted with a smaller --prefix-disk-budget) is trimmed first.
  bool trim = stored_bytes_ > options_.budget_bytes;
  for (;;) {
    wake_.wait(lock, [&] { return trim || stopping_ || !queue_.empty() || !dropped_.empty(); });
    trim = false;
    // Stopping: what is queued is still written (a clean stop keeps it), then the loop ends.
    if (stopping_ && queue_.empty() && dropped_.empty() && touched_.empty()) break;
    Batch batch = take_batch();
    writing_ = true;
    lock.unlock();
    write(std::move(batch));
    lock.lock();
    writing_ = false;
    wake_.notify_all();  // flush() waits on this
  }
}

}  // namespace turbokv::server
