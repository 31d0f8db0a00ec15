// HttpServer: the HTTP/1.1 transport of `turbokv serve`, on libmicrohttpd (Debian's
// libmicrohttpd-dev): a few event-driven polling threads serve every connection, so a slow or
// idle socket costs a file descriptor and a bounded memory pool, never a thread.
//
// What it guarantees whatever a client sends (docs/reliability.md, "HTTP limits"):
//   - request line and headers: at most `max_header_bytes` (the connection's memory pool) and
//     `max_headers` fields, received within `header_timeout` of the connection being ready for
//     a request; else 431 or the connection is closed;
//   - body: Content-Length above `max_body_bytes` -> 413 (a body already on its way, up to 64 MiB,
//     is read and dropped first, so the client can read the answer); a chunked body
//     that grows past it -> the connection is closed once the limit is crossed (the status cannot
//     be sent mid-upload); the whole body within `body_timeout`; Content-Encoding other than
//     identity -> 415 (no decompression, so no inflation bombs); Content-Lengths that disagree, or
//     one with Transfer-Encoding -> 400;
//   - at most `max_connections` connections; MHD closes connections idle for `idle_timeout`;
//   - stop() closes every connection, whatever its state, within a bounded time.
//
// The handler runs on a polling thread and must not block: an answer that needs waiting (a
// generation) is returned as a PendingAnswer or a StreamBody, whose connection is suspended
// until it calls the wake function it was given. While a request waits, the server checks its
// socket for a hang-up at every wake and at least every `poll_interval`, and cancels the
// answer when the client has gone (a half-closed socket counts as gone, as for nginx's 499).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace turbokv::server {

struct HttpLimits {
  size_t max_header_bytes = 16 << 10;
  size_t max_headers = 64;
  size_t max_body_bytes = 1 << 20;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{30'000};
  std::chrono::seconds idle_timeout{30};
  unsigned max_connections = 512;
  unsigned threads = 2;  // polling threads
  std::chrono::milliseconds poll_interval{1000};  // hang-up checks and wakes of waiting answers
};

struct HttpRequest {
  std::string method;
  std::string path;  // without the query string
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The first header of that name (case-insensitive), or "" when absent.
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Shared by the two kinds of deferred answer: `wake` (given once, before the first poll or pull)
// may be called from any thread, any number of times, to have the server poll again soon;
// cancel() is called once if the client leaves or the server stops before the answer is done.
class Deferred {
 public:
  virtual ~Deferred() = default;
  virtual void set_wake(std::function<void()> wake) = 0;
  virtual void cancel() = 0;
};

// A whole response that is not ready yet.
class PendingAnswer : public Deferred {
 public:
  // The response once ready (then it is not called again), else nullopt.
  virtual std::optional<HttpResponse> poll() = 0;
};

// A body sent as it is produced (chunked), after the head the handler returned.
class StreamBody : public Deferred {
 public:
  enum class Pull { more, wait, end };
  // Appends what is ready to `out`; `wait`: nothing now (wake will be called); `end`: `out` holds
  // the last bytes.
  virtual Pull pull(std::string& out) = 0;
};

// What a handler returns: `response` alone, or with `pending` (then `response` is unused), or with
// `stream` (then `response` gives the status, type and headers of the head).
struct Reply {
  HttpResponse response;
  std::shared_ptr<PendingAnswer> pending;
  std::shared_ptr<StreamBody> stream;
};

class HttpServer {
 public:
  using Handler = std::function<Reply(const HttpRequest&)>;
  // `on_status` is told the status of every response this server sends (metrics).
  HttpServer(HttpLimits limits, Handler handler, std::function<void(int)> on_status);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (0: any free port) and starts serving; returns the bound port. Throws
  // turbokv::Error.
  int listen(const std::string& host, int port);
  // Closes every connection (cancelling what they wait for) and the listener. Idempotent.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace turbokv::server
