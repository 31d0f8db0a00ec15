// `turbokv serve` as a process, attacked over raw sockets from 127.0.0.1 the way issue 26 found
// it falling: header floods, Range multiplication, body bombs, bad lengths, trickling clients
// that starved everyone, a SIGTERM that never ended, non-streaming clients that left unseen.
// Each test failed against the cpp-httplib front end (run this binary with TURBOKV_TOOL set to
// an older build to see it); the server's memory is read from /proc/PID/status.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "serve_process.hpp"
#include "skip_policy.hpp"

using namespace turbokv::test;

namespace {

// ASan keeps freed memory in quarantine (up to 256 MiB), so under it RSS says nothing about
// what the server holds: the memory bars apply to the normal build (the README's test command).
#ifdef __SANITIZE_ADDRESS__
constexpr bool kRssMeansHeld = false;
#else
constexpr bool kRssMeansHeld = true;
#endif

const std::string kCompletion = R"({"prompt": "In the beginning", "max_tokens": 8, "temperature": 0})";

}  // namespace

// Findings 1 and 2 together, then the RSS bar: after every flood and bomb the server's memory
// is within 1.2x of what it was before them.
TEST(HostileClients, FloodsAndBombsAreRefusedAndMemoryReturns) {
  if (!have_tool()) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  Serve s({"--parallel", "4", "--max-queue", "8"});
  ASSERT_TRUE(s.ready());
  ASSERT_EQ(status_of(s.post("/v1/completions", kCompletion)), 200);
  const size_t before = s.rss_bytes();

  // 1. 5,000 headers of 8 KB, 3 rounds of 8 requests at once (was: RSS 106 MB -> 1.06 GB).
  std::string flood = "GET /health HTTP/1.1\r\nHost: x\r\n";
  const std::string line = "X-Flood: " + std::string(8000, 'a') + "\r\n";
  for (int i = 0; i < 5000; ++i) flood += line;
  flood += "\r\n";
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> clients;
    std::atomic<int> accepted{0};
    for (int c = 0; c < 8; ++c) {
      clients.emplace_back([&] {
        const int fd = connect_to(s.port());
        send_all(fd, flood);
        if (status_of(read_responses(fd, 1, 5000ms)) == 200) ++accepted;
        close(fd);
      });
    }
    for (auto& t : clients) t.join();
    EXPECT_EQ(accepted.load(), 0) << "round " << round << ": a 40 MB header block was accepted";
  }

  // 1. Range: bytes=0-,0-,... on /metrics (was: a 10.6 MB multipart 206 per request).
  std::string ranges = "bytes=0-";
  for (int i = 0; i < 2000; ++i) ranges += ",0-";
  const std::string ranged = s.request("GET /metrics HTTP/1.1\r\nHost: x\r\nRange: " + ranges + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(ranged), 200) << ranged.substr(0, 100);
  EXPECT_LT(ranged.size(), 64u << 10);

  // 2. A 100 MiB chunked body (was: buffered whole, peak 132 MiB, before the 413).
  {
    const int fd = connect_to(s.port());
    send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string chunk = "100000\r\n" + std::string(1 << 20, ' ') + "\r\n";
    size_t sent = 0;
    while (sent < (100u << 20) && send_all(fd, chunk)) sent += 1 << 20;
    read_responses(fd, 1, 2000ms);
    close(fd);
    EXPECT_LT(sent, 32u << 20) << "the server read " << sent << " bytes of a body past --max-body";
  }

  // 2. A gzip body (was: a 100 KB body inflated to 100 MiB in memory).
  const std::string gz = s.request("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
                                   "Content-Length: 10\r\nConnection: close\r\n\r\n0123456789");
  EXPECT_EQ(status_of(gz), 415) << gz;

  // 2. Content-Length -5 or 999...9 (was: a 30 s wait before the answer).
  for (const std::string length : {"-5", "99999999999999999999"}) {
    const auto t0 = Clock::now();
    const std::string r = s.request("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + "\r\n\r\n", 5000ms);
    EXPECT_TRUE(status_of(r) == 400 || status_of(r) == 413) << length << ": " << r;
    EXPECT_LT(seconds_since(t0), 1.0) << length;
  }

  // Two different Content-Lengths: a smuggling shape behind a proxy.
  const std::string twice = s.request("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                                      "Content-Length: 60\r\nConnection: close\r\n\r\n{}");
  EXPECT_EQ(status_of(twice), 400) << twice;

  std::this_thread::sleep_for(300ms);
  const size_t after = s.rss_bytes();
  if (kRssMeansHeld) {
    EXPECT_LE(static_cast<double>(after), 1.2 * static_cast<double>(before)) << "RSS " << before << " -> " << after;
  }
  EXPECT_EQ(status_of(s.post("/v1/completions", kCompletion)), 200);
}

// Finding 3: 30 connections trickling a header byte every 2 s made every completion and
// /health time out (--parallel 4 --max-queue 8: 20 HTTP threads).
TEST(HostileClients, TricklingClientsStarveNobody) {
  if (!have_tool()) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  Serve s({"--parallel", "4", "--max-queue", "8"});
  ASSERT_TRUE(s.ready());
  std::vector<int> slow;
  for (int i = 0; i < 60; ++i) {
    const int fd = connect_to(s.port());
    send_all(fd, "POST /v1/completions HTTP/1.1\r\n");
    slow.push_back(fd);
  }
  for (int round = 0; round < 3; ++round) {
    for (const int fd : slow) send(fd, "X", 1, MSG_NOSIGNAL);
    auto t0 = Clock::now();
    EXPECT_EQ(status_of(s.get("/health")), 200) << "round " << round;
    EXPECT_LT(seconds_since(t0), 1.0) << "round " << round;
    t0 = Clock::now();
    EXPECT_EQ(status_of(s.post("/v1/completions", kCompletion)), 200) << "round " << round;
    EXPECT_LT(seconds_since(t0), 1.0) << "round " << round;
    std::this_thread::sleep_for(500ms);
  }
  for (const int fd : slow) close(fd);
}

// Finding 4: SIGTERM with one trickling connection open never exited (45 s+).
TEST(HostileClients, SigtermEndsWithinTheGracePeriodWhateverTheSocketsDo) {
  if (!have_tool()) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  Serve s({"--shutdown-grace", "2"});
  ASSERT_TRUE(s.ready());
  const int trickle = connect_to(s.port());
  send_all(trickle, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro");
  const int idle = connect_to(s.port());
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    while (!stop) {
      send(trickle, "m", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(200ms);
    }
  });
  const double took = s.terminate(10s);
  stop = true;
  trickler.join();
  close(trickle);
  close(idle);
  EXPECT_GE(took, 0.0) << "still running 10 s after SIGTERM";
  EXPECT_LT(took, 2.0 + 1.0);
}

// Finding 6: a non-streaming client that left while tokens kept coming faster than 5/s was
// never seen (the server generated all 200 tokens).
TEST(HostileClients, NonStreamingClientThatLeavesIsCancelled) {
  if (!have_tool()) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  // Random weights of a real shape: slow enough (~20 tokens/s here) to leave mid-generation.
  Serve s({"--model", "synthetic:qwen3-0.6b", "--weights", "q4_0", "--ctx", "512", "--threads", "1"});
  ASSERT_TRUE(s.ready());
  const std::string body = R"({"prompt": [1, 2, 3], "max_tokens": 200, "ignore_eos": true})";
  const int fd = connect_to(s.port());
  send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body);
  const auto t0 = Clock::now();
  while (s.metric("turbokv_generation_tokens_total") < 3 && seconds_since(t0) < 20) std::this_thread::sleep_for(20ms);
  close(fd);
  const auto left = Clock::now();
  // The cancel is counted when the scheduler drops the sequence; the running gauge follows at the
  // end of that step.
  while ((s.metric("turbokv_requests_cancelled_total") < 1 || s.metric("turbokv_requests_running") != 0) &&
         seconds_since(left) < 10) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(s.metric("turbokv_requests_cancelled_total"), 1);
  EXPECT_EQ(s.metric("turbokv_requests_running"), 0);
  EXPECT_LT(seconds_since(left), 2.0);
  EXPECT_LT(s.metric("turbokv_generation_tokens_total"), 150) << "generation went on after the client left";
}

// The issue's bar: under a 60 s slowloris of 200 connections (each trickling a header byte every
// 2 s, reconnecting when the server cuts it at the header deadline), /health and a completion
// still answer in under a second. TURBOKV_SLOWLORIS_SECONDS shortens it (the sanitizer pass).
TEST(HostileClients, SlowlorisOf200ConnectionsStarvesNobody) {
  if (!have_tool()) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  const char* env = std::getenv("TURBOKV_SLOWLORIS_SECONDS");
  const double duration = env != nullptr ? std::atof(env) : 60.0;
  Serve s({"--parallel", "4", "--max-queue", "8"});
  ASSERT_TRUE(s.ready());
  ASSERT_EQ(status_of(s.post("/v1/completions", kCompletion)), 200);  // the model's pages are in
  const size_t before = s.rss_bytes();
  std::atomic<bool> stop{false};
  std::atomic<int> reconnects{0};
  std::thread attacker([&] {
    std::vector<int> fds(200, -1);
    auto open_one = [&](int& fd) {
      fd = connect_to(s.port());
      if (fd >= 0) send_all(fd, "POST /v1/completions HTTP/1.1\r\n");
    };
    for (int& fd : fds) open_one(fd);
    size_t next = 0;
    while (!stop) {
      // 200 connections, one byte each every 2 s: one connection every 10 ms.
      int& fd = fds[next++ % fds.size()];
      if (fd < 0 || send(fd, "X", 1, MSG_NOSIGNAL) != 1) {
        if (fd >= 0) close(fd);
        open_one(fd);
        ++reconnects;
      }
      std::this_thread::sleep_for(10ms);
    }
    for (const int fd : fds) {
      if (fd >= 0) close(fd);
    }
  });
  double worst_health = 0, worst_completion = 0;
  int probes = 0, failures = 0;
  const auto t0 = Clock::now();
  while (seconds_since(t0) < duration) {
    auto t = Clock::now();
    failures += status_of(s.get("/health")) != 200;
    worst_health = std::max(worst_health, seconds_since(t));
    t = Clock::now();
    failures += status_of(s.post("/v1/completions", kCompletion)) != 200;
    worst_completion = std::max(worst_completion, seconds_since(t));
    ++probes;
    std::this_thread::sleep_for(500ms);
  }
  stop = true;
  attacker.join();
  std::this_thread::sleep_for(300ms);
  std::printf("slowloris %.0f s, 200 connections (%d reconnects after the header deadline): %d probes, worst /health "
              "%.3f s, worst completion %.3f s, RSS %zu -> %zu bytes\n",
              duration, reconnects.load(), probes, worst_health, worst_completion, before, s.rss_bytes());
  EXPECT_EQ(failures, 0);
  EXPECT_LT(worst_health, 1.0);
  EXPECT_LT(worst_completion, 1.0);
  if (duration >= 20) {
    EXPECT_GT(reconnects.load(), 0) << "the header deadline never cut a trickling connection";
  }
  if (kRssMeansHeld) {
    EXPECT_LE(static_cast<double>(s.rss_bytes()), 1.2 * static_cast<double>(before));
  }
}
