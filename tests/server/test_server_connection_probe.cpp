// ConnectionProbe (server/connection_probe.*): a blocking request's handler finds its own socket
// and sees the client hang up, on a real httplib server and a raw TCP client.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "server/http/connection_probe.hpp"

namespace turbokv::server {
namespace {

using Clock = std::chrono::steady_clock;

// What the handler saw, for one request.
struct Seen {
  std::atomic<bool> done{false};
  std::atomic<bool> found{false};
  std::atomic<bool> gone_while_connected{false};  // peer_gone() before the client closed
  std::atomic<bool> gone{false};
  std::atomic<long long> gone_after_close_ms{-1};
};

class ProbeServer {
 public:
  ProbeServer() {
    server_.Post("/wait", [this](const httplib::Request& req, httplib::Response& res) {
      const ConnectionProbe probe(req);
      seen_.found = probe.found();
      const auto start = Clock::now();
      // Bounded: at most 3 s; the client closes after 300 ms in the hang-up case.
      while (Clock::now() - start < std::chrono::seconds(3)) {
        if (probe.peer_gone()) {
          seen_.gone = true;
          const auto closed = client_closed_at_.load();
          if (closed.time_since_epoch().count() == 0) {
            seen_.gone_while_connected = true;
          } else {
            seen_.gone_after_close_ms =
                std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - closed).count();
          }
          break;
        }
        if (answer_after_ms_ >= 0 && Clock::now() - start > std::chrono::milliseconds(answer_after_ms_)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      res.set_content("ok", "text/plain");
      seen_.done = true;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ~ProbeServer() {
    server_.stop();
    thread_.join();
  }

  int port() const { return port_; }
  Seen& seen() { return seen_; }
  void answer_after(int ms) { answer_after_ms_ = ms; }
  void mark_client_closed() { client_closed_at_ = Clock::now(); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  Seen seen_;
  std::atomic<int> answer_after_ms_{-1};
  std::atomic<Clock::time_point> client_closed_at_{Clock::time_point{}};
};

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool wait_done(Seen& seen) {
  for (int i = 0; i < 500 && !seen.done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return seen.done;
}

const std::string kRequest = "POST /wait HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n";

TEST(ConnectionProbe, SeesTheClientHangUp) {
  ProbeServer server;
  const int fd = connect_to(server.port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, kRequest.data(), kRequest.size(), 0), static_cast<ssize_t>(kRequest.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the handler polls meanwhile
  server.mark_client_closed();
  close(fd);
  ASSERT_TRUE(wait_done(server.seen()));
  EXPECT_TRUE(server.seen().found);
  EXPECT_FALSE(server.seen().gone_while_connected);
  EXPECT_TRUE(server.seen().gone);
  EXPECT_GE(server.seen().gone_after_close_ms.load(), 0);
  EXPECT_LT(server.seen().gone_after_close_ms.load(), 1000);
}

TEST(ConnectionProbe, AConnectedClientIsNotGoneAndGetsItsAnswer) {
  ProbeServer server;
  server.answer_after(300);
  const int fd = connect_to(server.port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, kRequest.data(), kRequest.size(), 0), static_cast<ssize_t>(kRequest.size()));
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string response;
  char buffer[512];
  while (response.find("ok") == std::string::npos) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  ASSERT_TRUE(wait_done(server.seen()));
  EXPECT_TRUE(server.seen().found);
  EXPECT_FALSE(server.seen().gone);
  EXPECT_NE(response.find("200"), std::string::npos) << response;
}

}  // namespace
}  // namespace turbokv::server
