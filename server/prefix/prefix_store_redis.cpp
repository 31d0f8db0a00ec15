#include "server/prefix/prefix_store_redis.hpp"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <algorithm>
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
using Clock = std::chrono::steady_clock;

// Status, integer and error replies: EXISTS, SET, AUTH, SELECT.
constexpr size_t kSmallReply = 4096;

// Set by refuse_array (the reader runs on the calling thread), read by await_reply.
thread_local bool refused_array = false;

// hiredis 0.14 has no bound on an array reply's length (1.x's maxelements) and allocates the
// element pointers as soon as it reads one: "*2147483647" is 16 GiB, then it keeps reading
// elements for as long as they come. No command of the store is answered with an array.
void* refuse_array(const redisReadTask*, int) {
  refused_array = true;
  return nullptr;  // the reader fails ("Out of memory"); await_reply says what happened
}

redisReplyObjectFunctions* without_arrays(const redisReplyObjectFunctions* defaults) {
  static redisReplyObjectFunctions functions = [&] {
    redisReplyObjectFunctions f = *defaults;
    f.createArray = refuse_array;
    return f;
  }();
  return &functions;
}

// Sends the context's pending commands and reads one reply, all before `deadline`: each socket
// wait gets only what is left (a per-read timeout let a server that trickles bytes hold a call
// forever), and at most `max_bytes` of a reply not yet complete are held. Throws
// StoreUnavailable naming `what`.
Reply await_reply(redisContext* c, Clock::time_point deadline, int timeout_ms, size_t max_bytes, const char* what) {
  auto fail = [&](const std::string& why) { throw StoreUnavailable(fmt::format("{}: {}", what, why)); };
  const std::string timed_out = fmt::format("timed out (--prefix-store-timeout {} ms)", timeout_ms);
  auto wait_for_the_rest = [&] {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
    if (left <= 0) fail(timed_out);
    const timeval tv{static_cast<time_t>(left / 1000000), static_cast<suseconds_t>(left % 1000000)};
    if (redisSetTimeout(c, tv) != REDIS_OK) fail("cannot set the socket timeout");
  };
  auto io_failed = [&] { fail(Clock::now() >= deadline ? timed_out : std::string(c->errstr)); };
  for (int done = 0; !done;) {
    wait_for_the_rest();
    if (redisBufferWrite(c, &done) != REDIS_OK) io_failed();
  }
  refused_array = false;
  for (;;) {
    void* reply = nullptr;
    if (redisGetReplyFromReader(c, &reply) != REDIS_OK) {
      fail(refused_array ? "an array reply, which no command of the store gets (is this Redis?)" : c->errstr);
    }
    if (reply != nullptr) return Reply(static_cast<redisReply*>(reply));
    if (c->reader->len - c->reader->pos > max_bytes) fail(fmt::format("a reply of more than {} bytes", max_bytes));
    wait_for_the_rest();
    if (redisBufferRead(c) != REDIS_OK) io_failed();
  }
}

// The error for a reply of the wrong type.
StoreUnavailable unexpected(const char* what, const redisReply& r, const char* wanted) {
  if (r.type == REDIS_REPLY_ERROR) return StoreUnavailable(fmt::format("{}: {}", what, std::string(r.str, r.len)));
  return StoreUnavailable(fmt::format("{}: not {}", what, wanted));
}

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

RedisPrefixStore::Deadline RedisPrefixStore::call_deadline() const {
  return Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
}

redisContext* RedisPrefixStore::connect(Deadline deadline) {
  const auto left = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count());
  const timeval tv{static_cast<time_t>(left / 1000000), static_cast<suseconds_t>(left % 1000000)};
  redisContext* c = redisConnectWithTimeout(address_.host.c_str(), address_.port, tv);
  if (c == nullptr) throw StoreUnavailable("cannot allocate a Redis context");
  try {
    if (c->err != 0) throw StoreUnavailable(fmt::format("connect: {}", c->errstr));
    c->reader->fn = without_arrays(c->reader->fn);
    auto simple = [&](const char* what) {
      const Reply r = await_reply(c, deadline, options_.timeout_ms, kSmallReply, what);
      if (r->type == REDIS_REPLY_ERROR) throw unexpected(what, *r, "");
    };
    if (!address_.password.empty()) {
      if (address_.user.empty()) {
        redisAppendCommand(c, "AUTH %b", address_.password.data(), address_.password.size());
      } else {
        redisAppendCommand(c, "AUTH %b %b", address_.user.data(), address_.user.size(), address_.password.data(),
                           address_.password.size());
      }
      simple("AUTH");
    }
    if (address_.db != 0) {
      redisAppendCommand(c, "SELECT %d", address_.db);
      simple("SELECT");
    }
  } catch (const StoreUnavailable&) {
    redisFree(c);
    throw;
  }
  return c;
}

RedisPrefixStore::Connection RedisPrefixStore::borrow(Deadline deadline) {
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
    return {connect(deadline)};
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

void RedisPrefixStore::call_failed(redisContext* c, const std::string& why) {
  redisFree(c);  // a half-read reply or pipeline cannot be reused
  {
    std::lock_guard lock(mutex_);
    ++counters_.calls_failed_total;
  }
  failed(why);
}

std::vector<bool> RedisPrefixStore::exists(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  const Deadline deadline = call_deadline();
  Connection conn = borrow(deadline);
  std::vector<bool> found;
  try {
    for (const auto& k : keys) redisAppendCommand(conn.ctx, "EXISTS %b", k.data(), k.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const Reply r = await_reply(conn.ctx, deadline, options_.timeout_ms, kSmallReply, "EXISTS");
      if (r->type != REDIS_REPLY_INTEGER) throw unexpected("EXISTS", *r, "an integer");
      found.push_back(r->integer != 0);
    }
  } catch (const StoreUnavailable& e) {
    call_failed(conn.ctx, e.what());
    throw;
  }
  give_back(conn);
  return found;
}

std::optional<std::string> RedisPrefixStore::get(const std::string& key) {
  const Deadline deadline = call_deadline();
  Connection conn = borrow(deadline);
  std::optional<std::string> value;
  try {
    redisAppendCommand(conn.ctx, "GET %b", key.data(), key.size());
    // A value and its header ("$<length>\r\n", "\r\n").
    const Reply r = await_reply(conn.ctx, deadline, options_.timeout_ms, options_.max_value_bytes + 32, "GET");
    if (r->type == REDIS_REPLY_STRING) {
      value = std::string(r->str, r->len);
    } else if (r->type != REDIS_REPLY_NIL) {
      throw unexpected("GET", *r, "a string");
    }
  } catch (const StoreUnavailable& e) {
    call_failed(conn.ctx, e.what());
    throw;
  }
  give_back(conn);
  if (value) {
    std::lock_guard lock(mutex_);
    counters_.read_bytes_total += value->size();
  }
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
  StoreCounters c = counters_;
  c.queued_writes = queue_.size();
  return c;
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
        // One deadline for connecting, sending the value and the answer.
        const Deadline deadline = call_deadline();
        if (c == nullptr) c = connect(deadline);
        if (options_.ttl_seconds > 0) {
          redisAppendCommand(c, "SET %b %b EX %d", key.data(), key.size(), value.data(), value.size(),
                             options_.ttl_seconds);
        } else {
          redisAppendCommand(c, "SET %b %b", key.data(), key.size(), value.data(), value.size());
        }
        const Reply r = await_reply(c, deadline, options_.timeout_ms, kSmallReply, "SET");
        if (r->type == REDIS_REPLY_ERROR) {
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
