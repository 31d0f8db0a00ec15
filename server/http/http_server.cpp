#include "server/http/http_server.hpp"

#include <fmt/format.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "turbokv/error.hpp"

namespace turbokv::server {

using Clock = std::chrono::steady_clock;

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() &&
        std::equal(key.begin(), key.end(), name.begin(),
                   [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b)); })) {
      return value;
    }
  }
  return "";
}

namespace {

// True once the peer closed or reset its side (a half-close included): a client waiting for its
// answer has nothing more to send, so end-of-stream means it left.
bool peer_gone(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// The suspend/resume handshake of one waiting request. Its wake function outlives the request
// (the scheduler may push an event after the client left), so it holds this, not the request.
struct Waker {
  std::mutex mutex;
  MHD_Connection* connection = nullptr;  // null once the request is over
  bool suspended = false;
  bool woken = false;  // a wake arrived since the last poll
  std::atomic<int>* suspended_count = nullptr;

  // Resumes outside the lock: a suspended connection cannot end until it is resumed, and only the
  // wake that cleared `suspended` resumes it. The count drops only once the resume is done, so
  // stop(), which waits for it to reach zero, never stops the daemon under a resume.
  void wake() {
    MHD_Connection* resume = nullptr;
    {
      std::lock_guard lock(mutex);
      woken = true;
      if (suspended && connection != nullptr) {
        suspended = false;
        resume = connection;
      }
    }
    if (resume != nullptr) {
      MHD_resume_connection(resume);
      suspended_count->fetch_sub(1);
    }
  }
  void before_poll() {
    std::lock_guard lock(mutex);
    woken = false;
  }
  // On the connection's polling thread, after a poll found nothing: suspends unless a wake came
  // in between (then the caller polls again at once) or the server is stopping (false: close).
  bool suspend(const std::atomic<bool>& stopping) {
    std::lock_guard lock(mutex);
    if (stopping.load()) return false;
    if (woken) return true;
    suspended = true;
    suspended_count->fetch_add(1);
    MHD_suspend_connection(connection);
    return true;
  }
  void forget() {
    std::lock_guard lock(mutex);
    connection = nullptr;
  }
};

// One connection, for the deadlines: what it is doing since when.
struct Conn {
  enum class Phase { awaiting_request, receiving_body, answering };
  int fd = -1;
  Phase phase = Phase::awaiting_request;
  Clock::time_point since = Clock::now();
  std::shared_ptr<Waker> waker;  // while a deferred answer waits
};

// One request on a connection.
struct Exchange {
  HttpServer::Impl* impl = nullptr;
  MHD_Connection* connection = nullptr;
  Conn* conn = nullptr;
  HttpRequest request;
  bool body_complete = false;
  bool answered = false;  // a response (or a stream's head) was queued
  bool settled = false;   // the deferred answer was delivered or cancelled
  std::shared_ptr<Deferred> deferred;
  std::shared_ptr<PendingAnswer> pending;
  std::shared_ptr<StreamBody> stream;
  std::shared_ptr<Waker> waker;
  std::string out;  // stream bytes pulled, not yet sent
  size_t out_at = 0;
  std::optional<HttpResponse> refusal;  // answered once the (dropped) body is in
};

// A declared body over the limit that the client is already sending (no Expect: 100-continue)
// is read and dropped up to this many bytes before its 413: a server that closes on unread data
// makes the kernel reset the connection, and clients that are still writing (fetch()) lose the
// answer. Larger declared bodies get the 413 at once and the connection closed.
constexpr size_t kDrainBeforeRefusal = 64 << 20;

}  // namespace

struct HttpServer::Impl {
  HttpLimits limits;
  Handler handler;
  std::function<void(int)> on_status;
  MHD_Daemon* daemon = nullptr;
  std::atomic<bool> stopping{false};
  std::atomic<int> suspended{0};

  std::mutex conns_mutex;
  std::unordered_set<Conn*> conns;

  std::thread sweeper;
  std::mutex sweeper_mutex;
  std::condition_variable sweeper_cv;
  bool sweeper_stop = false;

  void set_phase(Conn* c, Conn::Phase phase) {
    if (c == nullptr) return;
    std::lock_guard lock(conns_mutex);
    c->phase = phase;
    c->since = Clock::now();
  }

  static void add_headers(MHD_Response* response, const HttpResponse& r) {
    if (!r.content_type.empty()) MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
    for (const auto& [k, v] : r.headers) MHD_add_response_header(response, k.c_str(), v.c_str());
  }

  enum MHD_Result queue(Exchange& ex, const HttpResponse& r) {
    MHD_Response* response =
        MHD_create_response_from_buffer(r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
    if (response == nullptr) return MHD_NO;
    add_headers(response, r);
    const enum MHD_Result ok = MHD_queue_response(ex.connection, static_cast<unsigned>(r.status), response);
    MHD_destroy_response(response);
    ex.answered = true;
    if (on_status) on_status(r.status);
    return ok;
  }

  // The transport's own refusals, as OpenAI error objects like the API's.
  static HttpResponse refusal(int status, const std::string& message) {
    HttpResponse r;
    r.status = status;
    r.body = fmt::format(R"({{"error":{{"message":"{}","type":"invalid_request_error","code":"{}","param":null}}}})",
                         message, status);
    return r;
  }

  // Framing checks on the head alone (a response queued now discards the body and closes).
  std::optional<HttpResponse> check_head(const HttpRequest& req) const {
    if (req.headers.size() > limits.max_headers) {
      return refusal(431, fmt::format("more than {} header fields", limits.max_headers));
    }
    // Lengths that disagree, or a length beside chunked framing: a proxy in front may frame the
    // body by the other one (request smuggling). The same length repeated is one length (RFC 9112).
    int lengths = 0;
    bool disagree = false;
    for (const auto& [k, v] : req.headers) {
      if (strcasecmp(k.c_str(), "Content-Length") != 0) continue;
      disagree |= lengths++ > 0 && v != req.header("Content-Length");
    }
    const bool chunked = !req.header("Transfer-Encoding").empty();
    if (disagree || (lengths > 0 && chunked)) {
      return refusal(400, "conflicting Content-Length / Transfer-Encoding headers");
    }
    const std::string encoding = req.header("Content-Encoding");
    if (!encoding.empty() && strcasecmp(encoding.c_str(), "identity") != 0) {
      return refusal(415, "Content-Encoding is not supported; send the body uncompressed");
    }
    if (lengths > 0) {
      const std::string text = req.header("Content-Length");
      if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return refusal(400, "Content-Length is not a number");
      }
      if (text.size() > 18 || std::stoull(text) > limits.max_body_bytes) {
        return refusal(413, fmt::format("the body is larger than {} bytes", limits.max_body_bytes));
      }
    }
    return std::nullopt;
  }

  enum MHD_Result access(MHD_Connection* connection, const char* url, const char* method, const char* upload,
                         size_t* upload_size, void** con_cls) {
    auto* holder = static_cast<std::shared_ptr<Exchange>*>(*con_cls);
    if (holder == nullptr) {  // the head is complete: a new request
      auto ex = std::make_shared<Exchange>();
      ex->impl = this;
      ex->connection = connection;
      const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
      ex->conn = info != nullptr ? static_cast<Conn*>(info->socket_context) : nullptr;
      ex->request.method = method;
      ex->request.path = url;
      MHD_get_connection_values(
          connection, MHD_HEADER_KIND,
          [](void* cls, enum MHD_ValueKind, const char* key, const char* value) -> enum MHD_Result {
            static_cast<HttpRequest*>(cls)->headers.emplace_back(key, value != nullptr ? value : "");
            return MHD_YES;
          },
          &ex->request);
      *con_cls = new std::shared_ptr<Exchange>(ex);
      set_phase(ex->conn, Conn::Phase::receiving_body);
      if (auto refused = check_head(ex->request)) {
        if (refused->status == 413 && drain_first(ex->request)) {
          ex->refusal = std::move(refused);
          return MHD_YES;
        }
        return queue(*ex, *refused);
      }
      return MHD_YES;
    }
    Exchange& ex = **holder;
    if (*upload_size > 0) {
      if (ex.refusal) {  // dropped: bounded by the declared length (drain_first) and the body deadline
        *upload_size = 0;
        return MHD_YES;
      }
      // Past the limit mid-body (chunked): no status can be sent before the body ends, and
      // reading it to the end is what a bomb wants, so the connection is closed.
      if (ex.answered || ex.request.body.size() + *upload_size > limits.max_body_bytes) return MHD_NO;
      ex.request.body.append(upload, *upload_size);
      *upload_size = 0;
      return MHD_YES;
    }
    if (ex.answered) return MHD_YES;
    if (ex.refusal) return queue(ex, *ex.refusal);
    if (!ex.body_complete) {
      ex.body_complete = true;
      set_phase(ex.conn, Conn::Phase::answering);
      return start(*holder);
    }
    return poll_pending(ex);  // resumed: a wake, the periodic check, or stop()
  }

  enum MHD_Result start(const std::shared_ptr<Exchange>& ex) {
    if (stopping.load()) {
      HttpResponse r = refusal(503, "the server is shutting down");
      r.headers.emplace_back("Retry-After", "1");
      return queue(*ex, r);
    }
    Reply reply;
    try {
      reply = handler(ex->request);
    } catch (const std::exception&) {
      return queue(*ex, refusal(500, "internal error"));
    }
    if (!reply.pending && !reply.stream) return queue(*ex, reply.response);

    ex->pending = reply.pending;
    ex->stream = reply.stream;
    ex->deferred = reply.pending ? std::static_pointer_cast<Deferred>(reply.pending)
                                 : std::static_pointer_cast<Deferred>(reply.stream);
    ex->waker = std::make_shared<Waker>();
    ex->waker->connection = ex->connection;
    ex->waker->suspended_count = &suspended;
    if (ex->conn != nullptr) {
      std::lock_guard lock(conns_mutex);
      ex->conn->waker = ex->waker;
    }
    ex->deferred->set_wake([w = std::weak_ptr<Waker>(ex->waker)] {
      if (auto waker = w.lock()) waker->wake();
    });
    if (ex->pending) return poll_pending(*ex);

    // Streaming: the head now, the body as the source produces it.
    auto* cls = new std::shared_ptr<Exchange>(ex);
    MHD_Response* response = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 4096,
        [](void* c, uint64_t, char* buf, size_t max) -> ssize_t {
          Exchange& e = **static_cast<std::shared_ptr<Exchange>*>(c);
          return e.impl->read_stream(e, buf, max);
        },
        cls, [](void* c) { delete static_cast<std::shared_ptr<Exchange>*>(c); });
    if (response == nullptr) {
      delete cls;
      return MHD_NO;
    }
    add_headers(response, reply.response);
    const enum MHD_Result ok = MHD_queue_response(ex->connection, static_cast<unsigned>(reply.response.status), response);
    MHD_destroy_response(response);
    ex->answered = true;
    if (on_status) on_status(reply.response.status);
    return ok;
  }

  // Whether a declared body over the limit is read (and dropped) before its 413, see
  // kDrainBeforeRefusal; check_head has checked the length is a number.
  static bool drain_first(const HttpRequest& req) {
    if (strcasecmp(req.header("Expect").c_str(), "100-continue") == 0) return false;  // it waits: nothing to drain
    const std::string length = req.header("Content-Length");
    return length.size() <= 18 && std::stoull(length) <= kDrainBeforeRefusal;
  }

  // Cancels the answer if the client left or the server stops; true then.
  bool abandon_if_gone(Exchange& ex) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(ex.connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!stopping.load() && (info == nullptr || !peer_gone(info->connect_fd))) return false;
    ex.deferred->cancel();
    ex.settled = true;
    return true;
  }

  // Whether to suspend after an empty poll: false when a wake arrived meanwhile (poll again).
  // On stop the wait ends (the caller's next abandon_if_gone closes it).
  bool suspended_now(Exchange& ex) {
    if (!ex.waker->suspend(stopping)) return false;
    std::lock_guard lock(ex.waker->mutex);
    return ex.waker->suspended;
  }

  enum MHD_Result poll_pending(Exchange& ex) {
    for (;;) {
      if (abandon_if_gone(ex)) return MHD_NO;  // closes the connection
      ex.waker->before_poll();
      if (std::optional<HttpResponse> r = ex.pending->poll()) {
        ex.settled = true;
        return queue(ex, *r);
      }
      if (suspended_now(ex)) return MHD_YES;
    }
  }

  ssize_t read_stream(Exchange& ex, char* buf, size_t max) {
    for (;;) {
      if (ex.out_at < ex.out.size()) {
        const size_t n = std::min(max, ex.out.size() - ex.out_at);
        std::memcpy(buf, ex.out.data() + ex.out_at, n);
        ex.out_at += n;
        if (ex.out_at == ex.out.size()) {
          ex.out.clear();
          ex.out_at = 0;
        }
        return static_cast<ssize_t>(n);
      }
      if (ex.settled) return MHD_CONTENT_READER_END_OF_STREAM;
      if (abandon_if_gone(ex)) return MHD_CONTENT_READER_END_WITH_ERROR;
      ex.waker->before_poll();
      const StreamBody::Pull pulled = ex.stream->pull(ex.out);
      if (pulled == StreamBody::Pull::end) {
        ex.settled = true;
        continue;
      }
      if (!ex.out.empty()) continue;
      if (suspended_now(ex)) return 0;
    }
  }

  void completed(void** con_cls) {
    auto* holder = static_cast<std::shared_ptr<Exchange>*>(*con_cls);
    if (holder == nullptr) return;
    Exchange& ex = **holder;
    if (ex.deferred && !ex.settled) ex.deferred->cancel();  // the client left mid-answer
    if (ex.waker) ex.waker->forget();
    if (ex.conn != nullptr) {
      std::lock_guard lock(conns_mutex);
      ex.conn->waker.reset();
      ex.conn->phase = Conn::Phase::awaiting_request;
      ex.conn->since = Clock::now();
    }
    delete holder;
    *con_cls = nullptr;
  }

  void connection_event(MHD_Connection* connection, void** socket_context, enum MHD_ConnectionNotificationCode code) {
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      auto* c = new Conn;
      const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      c->fd = info != nullptr ? info->connect_fd : -1;
      std::lock_guard lock(conns_mutex);
      conns.insert(c);
      *socket_context = c;
    } else if (auto* c = static_cast<Conn*>(*socket_context)) {
      std::lock_guard lock(conns_mutex);
      conns.erase(c);
      delete c;
      *socket_context = nullptr;
    }
  }

  // Deadlines MHD does not keep (its timeout restarts at every byte, so a trickle never ends),
  // and the periodic wake of waiting answers (hang-up checks, stream keep-alives). A socket past
  // its deadline is shut down; MHD then sees the end of the stream and closes the connection.
  void sweep() {
    std::unique_lock lk(sweeper_mutex);
    auto next_wake = Clock::now() + limits.poll_interval;
    while (!sweeper_stop) {
      sweeper_cv.wait_for(lk, std::chrono::milliseconds(100));
      const auto now = Clock::now();
      const bool wake_all = now >= next_wake;
      if (wake_all) next_wake = now + limits.poll_interval;
      std::vector<std::shared_ptr<Waker>> wakers;
      {
        std::lock_guard lock(conns_mutex);
        for (Conn* c : conns) {
          const bool late = (c->phase == Conn::Phase::awaiting_request && now - c->since > limits.header_timeout) ||
                            (c->phase == Conn::Phase::receiving_body && now - c->since > limits.body_timeout);
          if (late && c->fd >= 0) ::shutdown(c->fd, SHUT_RDWR);
          if (wake_all && c->waker) wakers.push_back(c->waker);
        }
      }
      for (const auto& w : wakers) w->wake();
    }
  }

  std::vector<std::shared_ptr<Waker>> all_wakers() {
    std::lock_guard lock(conns_mutex);
    std::vector<std::shared_ptr<Waker>> out;
    for (Conn* c : conns) {
      if (c->waker) out.push_back(c->waker);
    }
    return out;
  }
};

HttpServer::HttpServer(HttpLimits limits, Handler handler, std::function<void(int)> on_status)
    : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  impl_->handler = std::move(handler);
  impl_->on_status = std::move(on_status);
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::listen(const std::string& host, int port) {
  if (impl_->daemon != nullptr) throw Error("the HTTP server is already listening");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    throw Error(fmt::format("cannot bind {}:{}: {}", host, port, gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, &freeaddrinfo);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
  if (found->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  const HttpLimits& l = impl_->limits;
  // The connection's memory pool holds the request head and the read and write buffers.
  const size_t pool = l.max_header_bytes + (16 << 10);
  Impl* self = impl_.get();
  MHD_OptionItem options[] = {
      {MHD_OPTION_SOCK_ADDR, 0, found->ai_addr},
      {MHD_OPTION_CONNECTION_LIMIT, static_cast<intptr_t>(l.max_connections), nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, static_cast<intptr_t>(l.idle_timeout.count()), nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<intptr_t>(pool), nullptr},
      {MHD_OPTION_STRICT_FOR_CLIENT, 1, nullptr},
      {MHD_OPTION_THREAD_POOL_SIZE, static_cast<intptr_t>(std::max(1u, l.threads)), nullptr},
      {MHD_OPTION_END, 0, nullptr},
  };
  impl_->daemon = MHD_start_daemon(
      flags, static_cast<uint16_t>(port), nullptr, nullptr,
      [](void* cls, MHD_Connection* c, const char* url, const char* method, const char*, const char* upload,
         size_t* upload_size, void** con_cls) {
        return static_cast<Impl*>(cls)->access(c, url, method, upload, upload_size, con_cls);
      },
      self, MHD_OPTION_ARRAY, options, MHD_OPTION_NOTIFY_COMPLETED,
      +[](void* cls, MHD_Connection*, void** con_cls, enum MHD_RequestTerminationCode) {
        static_cast<Impl*>(cls)->completed(con_cls);
      },
      self, MHD_OPTION_NOTIFY_CONNECTION,
      +[](void* cls, MHD_Connection* c, void** socket_context, enum MHD_ConnectionNotificationCode code) {
        static_cast<Impl*>(cls)->connection_event(c, socket_context, code);
      },
      self, MHD_OPTION_END);
  if (impl_->daemon == nullptr) {
    throw Error(fmt::format("cannot bind {}:{} (in use, or not an address of this machine)", host, port));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(impl_->daemon, MHD_DAEMON_INFO_BIND_PORT);
  impl_->sweeper = std::thread([self] { self->sweep(); });
  return info != nullptr ? info->port : port;
}

void HttpServer::stop() {
  if (impl_->daemon == nullptr) return;
  impl_->stopping.store(true);
  {
    std::lock_guard lock(impl_->sweeper_mutex);
    impl_->sweeper_stop = true;
  }
  impl_->sweeper_cv.notify_all();
  if (impl_->sweeper.joinable()) impl_->sweeper.join();
  // MHD must not be stopped with suspended connections: wake them, and each one, seeing the
  // server stop, cancels its answer and closes.
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  do {
    for (const auto& w : impl_->all_wakers()) w->wake();
    if (impl_->suspended.load() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (Clock::now() < give_up);
  MHD_stop_daemon(impl_->daemon);
  impl_->daemon = nullptr;
}

}  // namespace turbokv::server
