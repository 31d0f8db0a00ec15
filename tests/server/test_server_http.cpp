// HttpServer (server/http/http_server.hpp) against hostile and careless clients, over raw
// sockets on 127.0.0.1: header floods, body bombs, bad lengths, smuggling-shaped framing,
// slowloris, pipelining, clients that leave while their answer is generated, and a stop() that
// ends whatever the sockets do. Issue 26's findings 1-4 and its weaker framing points; each of
// these failed against the cpp-httplib front end it replaces (measured there: RSS to 1 GB, a
// 100 MiB chunked body buffered whole, 30 s waits on bad lengths, starvation, a stop that never
// ended).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "raw_http_client.hpp"
#include "server/http/http_server.hpp"

using namespace turbokv::server;
using namespace turbokv::test;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

size_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// A deferred answer the test controls: ready when `ready` is set; counts cancels.
struct TestPending : PendingAnswer {
  std::mutex mutex;
  std::function<void()> wake;
  bool ready = false;
  std::atomic<int> cancels{0};
  void set_wake(std::function<void()> w) override {
    std::lock_guard lock(mutex);
    wake = std::move(w);
  }
  void cancel() override { ++cancels; }
  std::optional<HttpResponse> poll() override {
    std::lock_guard lock(mutex);
    if (!ready) return std::nullopt;
    return HttpResponse{200, "text/plain", "done", {}};
  }
  void finish() {
    std::function<void()> w;
    {
      std::lock_guard lock(mutex);
      ready = true;
      w = wake;
    }
    if (w) w();
  }
};

// A stream of `pieces` pieces, one every 20 ms from a producer thread; counts cancels.
struct TestStream : StreamBody {
  std::mutex mutex;
  std::function<void()> wake;
  int produced = 0, sent = 0, pieces = 0;
  std::atomic<int> cancels{0};
  std::atomic<bool> stop{false};
  std::thread producer;
  explicit TestStream(int n) : pieces(n) {}
  ~TestStream() override {
    stop = true;
    if (producer.joinable()) producer.join();
  }
  void set_wake(std::function<void()> w) override {
    {
      std::lock_guard lock(mutex);
      wake = std::move(w);
    }
    producer = std::thread([this] {
      for (int i = 0; i < pieces && !stop; ++i) {
        std::this_thread::sleep_for(20ms);
        std::function<void()> w2;
        {
          std::lock_guard lock(mutex);
          ++produced;
          w2 = wake;
        }
        w2();
      }
    });
  }
  void cancel() override { ++cancels; }
  Pull pull(std::string& out) override {
    std::lock_guard lock(mutex);
    while (sent < produced) out += "piece " + std::to_string(sent++) + "\n";
    if (sent == pieces) return Pull::end;
    return out.empty() ? Pull::wait : Pull::more;
  }
};

class Http : public ::testing::Test {
 protected:
  void start(HttpLimits limits = fast_limits()) {
    server_ = std::make_unique<HttpServer>(
        limits,
        [this](const HttpRequest& req) {
          Reply r;
          if (req.path == "/hello") {
            r.response = {200, "text/plain", "hi", {}};
          } else if (req.path == "/echo") {
            r.response = {200, "text/plain", std::to_string(req.body.size()), {}};
          } else if (req.path == "/wait") {
            r.pending = pending_;
          } else if (req.path == "/stream") {
            r.response = {200, "text/event-stream", "", {}};
            r.stream = stream_;
          } else {
            r.response = {404, "text/plain", "no", {}};
          }
          return r;
        },
        [this](int status) {
          std::lock_guard lock(statuses_mutex_);
          statuses_.push_back(status);
        });
    port_ = server_->listen("127.0.0.1", 0);
  }
  static HttpLimits fast_limits() {
    HttpLimits l;
    l.max_body_bytes = 64 << 10;
    l.header_timeout = 1000ms;
    l.body_timeout = 2000ms;
    l.poll_interval = 100ms;
    return l;
  }
  void TearDown() override {
    if (server_) server_->stop();
  }
  std::string request(const std::string& raw, std::chrono::milliseconds timeout = 2000ms) {
    const int fd = connect_to(port_);
    EXPECT_GE(fd, 0);
    send_all(fd, raw);
    std::string out = read_responses(fd, 1, timeout);
    close(fd);
    return out;
  }
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::shared_ptr<TestPending> pending_ = std::make_shared<TestPending>();
  std::shared_ptr<TestStream> stream_ = std::make_shared<TestStream>(5);
  std::mutex statuses_mutex_;
  std::vector<int> statuses_;
};

const std::string kGet = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";

}  // namespace

TEST_F(Http, AnswersAPlainRequest) {
  start();
  const std::string r = request(kGet);
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("\r\n\r\nhi"), std::string::npos) << r;
}

// Finding 1: thousands of large headers were accepted and kept (RSS 106 MB -> 1.06 GB).
TEST_F(Http, HeaderFloodIsRefusedAndMemoryStaysBounded) {
  start();
  const std::string header_line = "X-Flood: " + std::string(8000, 'a') + "\r\n";
  std::string flood = "GET /hello HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 2000; ++i) flood += header_line;  // 16 MB of headers
  flood += "\r\n";
  request(kGet);  // warm up: the server's threads and pools exist before the baseline
  const size_t before = rss_bytes();
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> clients;
    std::atomic<int> refused{0};
    for (int c = 0; c < 8; ++c) {
      clients.emplace_back([&] {
        const int fd = connect_to(port_);
        send_all(fd, flood);
        const std::string r = read_until_closed(fd, 3000ms);
        const int status = status_of(r);
        if (status == 431 || status == 413 || status == 400 || r.empty()) ++refused;
        close(fd);
      });
    }
    for (auto& t : clients) t.join();
    EXPECT_EQ(refused.load(), 8) << "round " << round;
  }
  const size_t after = rss_bytes();
  EXPECT_LT(after, before + (16u << 20)) << "RSS " << before << " -> " << after;
  EXPECT_EQ(status_of(request(kGet)), 200);
}

TEST_F(Http, TooManyHeaderFieldsGet431) {
  start();
  std::string raw = "GET /hello HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 100; ++i) raw += "X-" + std::to_string(i) + ": y\r\n";
  EXPECT_EQ(status_of(request(raw + "\r\n")), 431);
}

// Finding 1: Range on any route produced a multipart 206 per range; the transport does no ranges.
TEST_F(Http, RangeHeadersAreIgnored) {
  start();
  std::string ranges = "bytes=0-";
  for (int i = 0; i < 500; ++i) ranges += ",0-";
  const std::string r = request("GET /hello HTTP/1.1\r\nHost: x\r\nRange: " + ranges + "\r\n\r\n");
  EXPECT_EQ(status_of(r), 200) << r.substr(0, 200);
  EXPECT_LT(r.size(), 1000u);
}

// Finding 2: a 100 MiB chunked body was buffered whole before the 413.
TEST_F(Http, ChunkedBodyPastTheLimitClosesTheConnectionAtOnce) {
  start();
  request(kGet);
  const size_t before = rss_bytes();
  const int fd = connect_to(port_);
  ASSERT_GE(fd, 0);
  const auto t0 = Clock::now();
  ASSERT_TRUE(send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = "10000\r\n" + std::string(0x10000, 'z') + "\r\n";  // 64 KiB per chunk
  size_t sent = 0;
  while (sent < (100u << 20) && send_all(fd, chunk)) sent += 0x10000;
  const std::string r = read_until_closed(fd, 2000ms);
  close(fd);
  EXPECT_LT(sent, 16u << 20) << "the server kept reading a body past its limit";
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_NE(status_of(r), 200) << r;
  EXPECT_LT(rss_bytes(), before + (16u << 20));
  EXPECT_EQ(status_of(request(kGet)), 200);
}

TEST_F(Http, ChunkedBodyWithinTheLimitArrivesWhole) {
  start();
  const std::string r = request("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
                                "6\r\n world\r\n0\r\n\r\n");
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("\r\n\r\n11"), std::string::npos) << r;
}

TEST_F(Http, DeclaredBodyOverTheLimitGets413BeforeItIsSent) {
  start();
  const auto t0 = Clock::now();
  const std::string r = request("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n");
  EXPECT_EQ(status_of(r), 413) << r;
  EXPECT_LT(seconds_since(t0), 1.0);
}

// A client that sends a declared body a little over the limit in one go (no Expect: 100-continue,
// as fetch() does) must read its 413: closing on the unread body makes the kernel reset the
// connection, and the reset can destroy the answer before the client reads it (CI saw node's
// fetch fail so). Such a body is read and dropped first; 20 tries, each must see the 413.
TEST_F(Http, DeclaredBodyALittleOverTheLimitIsDrainedAndAnswered413) {
  start();
  const std::string body(2 << 20, 'x');  // the limit here is 64 KiB
  for (int i = 0; i < 20; ++i) {
    const int fd = connect_to(port_);
    ASSERT_GE(fd, 0);
    // Like fetch(), which gives up on the answer when its body cannot be written: the whole body
    // must go through.
    const bool sent = send_all(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                                       "\r\n\r\n" + body);
    const std::string r = read_responses(fd, 1, 2000ms);
    close(fd);
    ASSERT_TRUE(sent) << "try " << i << ": the connection was closed while the body was being sent";
    ASSERT_EQ(status_of(r), 413) << "try " << i << ": " << r.substr(0, 80);
  }
  EXPECT_EQ(status_of(request(kGet)), 200);
}

// Finding 2: Content-Length -5 or 999...9 waited 30 s before an answer.
TEST_F(Http, BadContentLengthsAreAnsweredAtOnce) {
  start();
  for (const std::string length : {"-5", "99999999999999999999999", "12abc", "0x10"}) {
    const auto t0 = Clock::now();
    const std::string r = request("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + "\r\n\r\n", 3000ms);
    const int status = status_of(r);
    EXPECT_TRUE(status == 400 || status == 413) << length << ": " << r;
    EXPECT_LT(seconds_since(t0), 1.0) << length;
  }
}

// Finding 2: a 100 KB gzip body inflated to 100 MiB in memory; bodies are not decompressed.
TEST_F(Http, CompressedBodiesAreRefused) {
  start();
  const std::string r = request("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nabcd");
  EXPECT_EQ(status_of(r), 415) << r;
}

TEST_F(Http, ConflictingLengthsAreRefused) {
  start();
  EXPECT_EQ(status_of(request("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nabcd")), 400);
  EXPECT_EQ(status_of(request("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "4\r\nabcd\r\n0\r\n\r\n")),
            400);
}

TEST_F(Http, PipelinedRequestsAreAllAnswered) {
  start();
  const int fd = connect_to(port_);
  ASSERT_TRUE(send_all(fd, kGet + kGet + "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"));
  const std::string r = read_responses(fd, 3, 3000ms);
  close(fd);
  size_t count = 0;
  for (size_t at = r.find("HTTP/1.1 200"); at != std::string::npos; at = r.find("HTTP/1.1 200", at + 1)) ++count;
  EXPECT_EQ(count, 3u) << r;
}

// Finding 3: 30 connections trickling a header byte every 2 s starved every other client; and
// half-sent requests were held 35 s. Now a trickle costs no thread, and is cut at the header deadline.
TEST_F(Http, SlowlorisStarvesNobodyAndIsCutAtTheHeaderDeadline) {
  start();
  std::vector<int> slow;
  for (int i = 0; i < 200; ++i) {
    const int fd = connect_to(port_);
    ASSERT_GE(fd, 0);
    send_all(fd, "GET /hello HTTP/1.1\r\n");
    slow.push_back(fd);
  }
  const auto t0 = Clock::now();
  for (int round = 0; round < 4; ++round) {
    for (const int fd : slow) send(fd, "X", 1, MSG_NOSIGNAL);
    const auto asked = Clock::now();
    EXPECT_EQ(status_of(request(kGet)), 200);
    EXPECT_LT(seconds_since(asked), 1.0) << "round " << round;
    std::this_thread::sleep_for(200ms);
  }
  // Past the 1 s header deadline every trickling connection has been closed by the server.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500) - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0));
  std::this_thread::sleep_for(500ms);
  int closed = 0;
  for (const int fd : slow) {
    send(fd, "X", 1, MSG_NOSIGNAL);
    pollfd p{fd, POLLIN, 0};
    char c;
    if (poll(&p, 1, 1000) > 0 && recv(fd, &c, 1, 0) <= 0) ++closed;
    close(fd);
  }
  EXPECT_EQ(closed, 200);
}

// Finding 4: SIGTERM with one trickling connection open never ended.
TEST_F(Http, StopEndsWhateverTheSocketsDo) {
  start();
  const int trickle = connect_to(port_);
  send_all(trickle, "GET /hello HTTP/1.1\r\nHo");
  const int idle = connect_to(port_);
  const int waiting = connect_to(port_);
  send_all(waiting, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(100ms);
  const auto t0 = Clock::now();
  server_->stop();
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(pending_->cancels.load(), 1);
  for (const int fd : {trickle, idle, waiting}) {
    char c;
    EXPECT_LE(recv(fd, &c, 1, 0), 0);
    close(fd);
  }
}

TEST_F(Http, PendingAnswerIsDeliveredWhenWoken) {
  start();
  const int fd = connect_to(port_);
  send_all(fd, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(150ms);
  pending_->finish();
  const std::string r = read_responses(fd, 1, 2000ms);
  close(fd);
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("done"), std::string::npos) << r;
  EXPECT_EQ(pending_->cancels.load(), 0);
}

// Finding 6: a client that left while its (non-streamed) answer was generated went unseen.
TEST_F(Http, PendingAnswerIsCancelledWhenTheClientLeaves) {
  start();
  const int fd = connect_to(port_);
  send_all(fd, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(100ms);
  close(fd);
  const auto t0 = Clock::now();
  while (pending_->cancels.load() == 0 && seconds_since(t0) < 2.0) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(pending_->cancels.load(), 1);
  EXPECT_LT(seconds_since(t0), 0.5);  // the periodic check runs every 100 ms here
}

TEST_F(Http, StreamArrivesChunkedAndEnds) {
  start();
  const int fd = connect_to(port_);
  send_all(fd, "GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string r = read_until_closed(fd, 3000ms);
  close(fd);
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  for (int i = 0; i < 5; ++i) EXPECT_NE(r.find("piece " + std::to_string(i)), std::string::npos) << r;
  EXPECT_EQ(stream_->cancels.load(), 0);
}

TEST_F(Http, StreamIsCancelledWhenTheClientLeaves) {
  stream_ = std::make_shared<TestStream>(1000);  // 20 s of pieces
  start();
  const int fd = connect_to(port_);
  send_all(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(150ms);
  close(fd);
  const auto t0 = Clock::now();
  while (stream_->cancels.load() == 0 && seconds_since(t0) < 2.0) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(stream_->cancels.load(), 1);
}
