#include "server/prefix/prefix_store_redis.hpp"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <charconv>
#include <cstdio>

namespace turbokv::server {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int parse_int(std::string_view text, int lo, int hi, const std::string& url, const char* what) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) {
    throw Error(fmt::format("--prefix-store {}: bad {} '{}' (expected redis://[:PASSWORD@]HOST:PORT[/DB])", url, what, text));
  }
  return v;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

}  // namespace

RedisAddress parse_redis_url(const std::string& url) {
  const std::string scheme = "redis://";
  if (url.rfind(scheme, 0) != 0) {
    throw Error(fmt::format("--prefix-store {}: expected redis://[:PASSWORD@]HOST:PORT[/DB]", url));
  }
  std::string_view rest(url);
  rest.remove_prefix(scheme.size());
  RedisAddress a;
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view auth = rest.substr(0, at);
    const size_t colon = auth.find(':');
    if (colon == std::string_view::npos) {
      a.password = std::string(auth);
    } else {
      a.user = std::string(auth.substr(0, colon));
      a.password = std::string(auth.substr(colon + 1));
    }
    rest.remove_prefix(at + 1);
  }
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    a.db = parse_int(rest.substr(slash + 1), 0, 1 << 20, url, "database");
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) {
    a.host = std::string(rest);
  } else {
    a.host = std::string(rest.substr(0, colon));
    a.port = parse_int(rest.substr(colon + 1), 1, 65535, url, "port");
  }
  if (a.host.empty()) throw Error(fmt::format("--prefix-store {}: no host", url));
  return a;
}

// A borrowed lookup connection, returned to the pool only after a clean round trip.
struct RedisPrefixStore::Connection {
  redisContext* ctx = nullptr;
};

RedisPrefixStore::RedisPrefixStore(RedisAddress address, RedisStoreOptions options)
    : address_(std::move(address)), options_(options) {
  if (options_.timeout_ms < 1) throw Error("--prefix-store-timeout must be >= 1 ms");
  writer_ = std::thread([this] { writer_loop(); });
}

RedisPrefixStore::~RedisPrefixStore() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  writer_.join();
  for (redisContext* c : idle_) redisFree(c);
}

std::string RedisPrefixStore::describe() const {
  return fmt::format("redis://{}:{}/{}{} (timeout {} ms, ttl {} s)", address_.host, address_.port, address_.db,
                     address_.password.empty() ? "" : " with AUTH", options_.timeout_ms, options_.ttl_seconds);
}

bool RedisPrefixStore::backing_off() const { return now_ns() < retry_after_ns_.load(std::memory_order_relaxed); }

void RedisPrefixStore::failed(const std::string& why) {
  retry_after_ns_.store(now_ns() + int64_t{options_.retry_ms} * 1000000, std::memory_order_relaxed);
  std::fprintf(stderr, "serve: prefix store %s:%d: %s; computing prompts without it for %d ms\n", address_.host.c_str(),
               address_.port, why.c_str(), options_.retry_ms);
}

redisContext* RedisPrefixStore::connect() {
  timeval tv{options_.timeout_ms / 1000, (options_.timeout_ms % 1000) * 1000};
  redisContext* c = redisConnectWithTimeout(address_.host.c_str(), address_.port, tv);
  if (c == nullptr) throw StoreUnavailable("cannot allocate a Redis context");
  auto fail = [&](const std::string& why) {
    redisFree(c);
    throw StoreUnavailable(why);
  };
  if (c->err != 0) fail(fmt::format("connect: {}", c->errstr));
  if (redisSetTimeout(c, tv) != REDIS_OK) fail("cannot set the socket timeout");
  auto simple = [&](Reply r, const char* what) {
    if (!r) fail(fmt::format("{}: {}", what, c->errstr));
    if (r->type == REDIS_REPLY_ERROR) fail(fmt::format("{}: {}", what, std::string(r->str, r->len)));
  };
  if (!address_.password.empty()) {
    if (address_.user.empty()) {
      simple(Reply(static_cast<redisReply*>(redisCommand(c, "AUTH %b", address_.password.data(), address_.password.size()))),
             "AUTH");
    } else {
      simple(Reply(static_cast<redisReply*>(redisCommand(c, "AUTH %b %b", address_.user.data(), address_.user.size(),
                                                         address_.password.data(), address_.password.size()))),
             "AUTH");
    }
  }
  if (address_.db != 0) simple(Reply(static_cast<redisReply*>(redisCommand(c, "SELECT %d", address_.db))), "SELECT");
  return c;
}

RedisPrefixStore::Connection RedisPrefixStore::borrow() {
  if (backing_off()) throw StoreUnavailable("skipped (the store failed recently)");
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      redisContext* c = idle_.back();
      idle_.pop_back();
      return {c};
    }
  }
  try {
    return {connect()};
  } catch (const StoreUnavailable& e) {
    {
      std::lock_guard lock(mutex_);
      ++counters_.calls_failed_total;
    }
    failed(e.what());
    throw;
  }
}

void RedisPrefixStore::give_back(Connection connection) {
  std::lock_guard lock(mutex_);
  if (static_cast<int>(idle_.size()) < options_.pool) {
    idle_.push_back(connection.ctx);
  } else {
    redisFree(connection.ctx);
  }
}

std::vector<bool> RedisPrefixStore::exists(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  Connection conn = borrow();
  std::string error;
  std::vector<bool> found;
  for (const auto& k : keys) redisAppendCommand(conn.ctx, "EXISTS %b", k.data(), k.size());
  for (size_t i = 0; i < keys.size() && error.empty(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(conn.ctx, &raw) != REDIS_OK) {
      error = fmt::format("EXISTS: {}", conn.ctx->errstr);
      break;
    }
    Reply r(static_cast<redisReply*>(raw));
    if (r->type != REDIS_REPLY_INTEGER) {
      error = r->type == REDIS_REPLY_ERROR ? fmt::format("EXISTS: {}", std::string(r->str, r->len)) : "EXISTS: not an integer";
      break;
    }
    found.push_back(r->integer != 0);
  }
  if (!error.empty()) {
    redisFree(conn.ctx);  // a half-read pipeline cannot be reused
    {
      std::lock_guard lock(mutex_);
      ++counters_.calls_failed_total;
    }
    failed(error);
    throw StoreUnavailable(error);
  }
  give_back(conn);
  return found;
}

std::optional<std::string> RedisPrefixStore::get(const std::string& key) {
  Connection conn = borrow();
  Reply r(static_cast<redisReply*>(redisCommand(conn.ctx, "GET %b", key.data(), key.size())));
  std::string error;
  std::optional<std::string> value;
  if (!r) {
    error = fmt::format("GET: {}", conn.ctx->errstr);
  } else if (r->type == REDIS_REPLY_STRING) {
    value = std::string(r->str, r->len);
  } else if (r->type != REDIS_REPLY_NIL) {
    error = r->type == REDIS_REPLY_ERROR ? fmt::format("GET: {}", std::string(r->str, r->len)) : "GET: not a string";
  }
  if (!error.empty()) {
    redisFree(conn.ctx);
    {
      std::lock_guard lock(mutex_);
      ++counters_.calls_failed_total;
    }
    failed(error);
    throw StoreUnavailable(error);
  }
  give_back(conn);
  return value;
}

void RedisPrefixStore::put(std::string key, std::string value) {
  {
    std::lock_guard lock(mutex_);
    if (queued_bytes_ + value.size() > options_.max_queued_bytes) {
      ++counters_.writes_dropped_total;
      return;
    }
    queued_bytes_ += value.size();
    queue_.emplace_back(std::move(key), std::move(value));
  }
  wake_.notify_all();
}

void RedisPrefixStore::flush(int ms) {
  std::unique_lock lock(mutex_);
  wake_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return queue_.empty() && !writing_; });
}

StoreCounters RedisPrefixStore::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void RedisPrefixStore::writer_loop() {
  redisContext* c = nullptr;
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    // Stopping: what is still queued is dropped (a cache; the process is going away).
    if (stopping_) break;
    auto [key, value] = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= value.size();
    writing_ = true;
    lock.unlock();
    std::string error;
    bool refused = false;  // Redis answered with an error (e.g. OOM under noeviction): it is up
    if (backing_off()) {
      error = "skipped";
    } else {
      try {
        if (c == nullptr) c = connect();
        Reply r = options_.ttl_seconds > 0
                      ? Reply(static_cast<redisReply*>(redisCommand(c, "SET %b %b EX %d", key.data(), key.size(),
                                                                    value.data(), value.size(), options_.ttl_seconds)))
                      : Reply(static_cast<redisReply*>(
                            redisCommand(c, "SET %b %b", key.data(), key.size(), value.data(), value.size())));
        if (!r) {
          error = fmt::format("SET: {}", c->errstr);
        } else if (r->type == REDIS_REPLY_ERROR) {
          error = fmt::format("SET: {}", std::string(r->str, r->len));
          refused = true;
        }
      } catch (const StoreUnavailable& e) {
        error = e.what();
      }
      // A refused write keeps the connection and does not pause lookups; a broken one does.
      if (!error.empty() && !refused) {
        if (c != nullptr) redisFree(c);
        c = nullptr;
        failed(error);
      }
    }
    lock.lock();
    writing_ = false;
    if (error.empty()) {
      ++counters_.writes_total;
      counters_.write_bytes_total += value.size();
    } else {
      ++counters_.writes_failed_total;
    }
    wake_.notify_all();  // flush() waits on this
  }
  if (c != nullptr) redisFree(c);
}

}  // namespace turbokv::server
