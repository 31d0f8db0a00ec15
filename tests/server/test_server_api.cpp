// The API layer (ApiServer) against hostile clients (issue 26): a scheduler on the kjv model and
// its server in-process on 127.0.0.1 with a free port, and raw or httplib clients. The transport's
// own limits are tested in test_server_http.cpp.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model/model.hpp"
#include "raw_http_client.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "server/http/api_server.hpp"
#include "server/http/openai_request.hpp"
#include "server/scheduling/scheduler.hpp"
#include "kjv_api_fixture.hpp"

namespace turbokv::server {
namespace {

using test::kjv;

using test::connect_to;
using test::read_until_closed;
using test::send_all;

using nlohmann::json;
using Clock = std::chrono::steady_clock;


SchedulerOptions scheduler_options() {
  SchedulerOptions o = test::small_scheduler("turboquant:bits=4,window=32,sinks=1", 64 << 20);
  o.parallel = 4;
  return o;
}

// The kjv server of these tests: four sequences at a time.
struct Served : test::ServedKjv {
  explicit Served(HttpOptions http = {}) : ServedKjv(scheduler_options(), ChatFormat::plain, std::move(http)) {}
};

HttpOptions keyed(std::string key, bool metrics_public = false) {
  HttpOptions o;
  o.api_key = std::move(key);
  o.metrics_public = metrics_public;
  return o;
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Issue 26, finding 5: each message's mark encoded the whole text up to it again (quadratic:
// 4,000 messages took 14 s of CPU) before the context was even checked.
TEST(ServerApi, AChatOfThousandsOfMessagesIsRefusedInWellUnderASecond) {
  Served served;
  json messages = json::array();
  for (int i = 0; i < 4000; ++i) {
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "And God said, Let there be light."}});
  }
  const std::string body = json{{"messages", messages}, {"max_tokens", 4}}.dump();
  ASSERT_GT(body.size(), 180000u);
  auto client = served.client();
  const double cpu0 = process_cpu_seconds();
  const auto res = client.Post("/v1/chat/completions", body, "application/json");
  const double cpu = process_cpu_seconds() - cpu0;
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("context"), std::string::npos) << res->body;
  EXPECT_LT(cpu, 1.0) << "CPU seconds for one request";
}

// Issue 26, finding 6: the hang-up probe ran only after 200 ms without a token, so a client that
// left while tokens kept coming was never seen and its request ran to max_tokens.
TEST(ServerApi, ANonStreamingClientThatHangsUpMidGenerationIsCancelled) {
  Served served;
  const std::string body = R"({"prompt": "In the beginning", "max_tokens": 240, "ignore_eos": true, "temperature": 0})";
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = connect_to(served.port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, request));
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (served.scheduler.metrics().generated_tokens_total < 3 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  close(fd);
  SchedulerMetrics m;
  for (;;) {
    m = served.scheduler.metrics();
    if (m.requests_cancelled_total + m.requests_finished_total > 0 || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(m.requests_cancelled_total, 1u);
  EXPECT_EQ(m.requests_finished_total, 0u);
  EXPECT_LT(m.generated_tokens_total, 120u) << "tokens generated for a client that was gone";
}

// Sends `bytes` on a new connection and reads until the server closes it (or 10 s pass).
std::string exchange(int port, const std::string& bytes) {
  const int fd = connect_to(port);
  if (fd < 0) return "connect failed";
  send_all(fd, bytes);
  std::string response = read_until_closed(fd, std::chrono::seconds(10));
  close(fd);
  return response;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Two Content-Length headers that disagree: which one frames the body is ambiguous (request
// smuggling behind a proxy that reads the other one). Refused, and the connection closed so the
// bytes after the first body are never read as a request.
TEST(ServerApi, ConflictingContentLengthsAreRefusedAndTheConnectionClosed) {
  Served served;
  const std::string smuggled = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  // A short body, and one past httplib's 4 KiB read buffer: its rest and the smuggled request
  // are still unread in the socket when the 400 is out.
  for (const std::string& body : {std::string(R"({"prompt": "In", "max_tokens": 1})"),
                                 R"({"prompt": "In", "max_tokens": 1, "pad": ")" + std::string(6000, 'x') + "\"}"}) {
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n"
                                "Content-Length: " + std::to_string(body.size() + smuggled.size()) + "\r\n\r\n" +
                                body + smuggled;
    const auto t0 = Clock::now();
    const std::string response = exchange(served.port, request);
    EXPECT_EQ(response.rfind("HTTP/1.1 400", 0), 0u) << response;
    EXPECT_NE(response.find("Content-Length"), std::string::npos) << response;
    EXPECT_EQ(count(response, "HTTP/1.1 "), 1u) << "the bytes after the body were read as a request:\n" << response;
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2)) << "the connection was kept open";
  }
  // Repeating the same value is not a conflict.
  const std::string body = R"({"prompt": "In", "max_tokens": 1})";
  const std::string same = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                           "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  EXPECT_EQ(exchange(served.port, same).rfind("HTTP/1.1 200", 0), 0u);
}

TEST(ServerApi, MetricsNeedTheApiKeyUnlessMadePublic) {
  {
    Served served(keyed("sesame"));
    auto client = served.client();
    const auto open = client.Get("/metrics");
    ASSERT_TRUE(open);
    EXPECT_EQ(open->status, 401);
    EXPECT_EQ(open->body.find("turbokv_requests_running"), std::string::npos);
    const auto with_key = client.Get("/metrics", {{"Authorization", "Bearer sesame"}});
    ASSERT_TRUE(with_key);
    EXPECT_EQ(with_key->status, 200);
    EXPECT_NE(with_key->body.find("turbokv_requests_running"), std::string::npos);
    const auto health = client.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);  // what load balancers poll stays open
  }
  {
    Served served(keyed("sesame", true));
    const auto open = served.client().Get("/metrics");
    ASSERT_TRUE(open);
    EXPECT_EQ(open->status, 200);
  }
}

// RFC 6750 (through RFC 7235): the auth scheme is case-insensitive.
TEST(ServerApi, TheBearerSchemeIsCaseInsensitive) {
  Served served(keyed("sesame"));
  auto client = served.client();
  for (const char* header : {"Bearer sesame", "bearer sesame", "BEARER sesame", "Bearer   sesame"}) {
    const auto res = client.Get("/v1/models", {{"Authorization", header}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << header;
  }
  for (const char* header : {"Bearer sesam", "Bearer sesamee", "Basic sesame", "Bearer", "Bearersesame", "sesame",
                             "Bearer SESAME"}) {
    const auto res = client.Get("/v1/models", {{"Authorization", header}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401) << header;
  }
}

// CVE-2025-59425 (vLLM): a comparison that stops at the first wrong byte tells an attacker, by
// its time, how much of a guess was right. With a 1 MiB key, memcmp answers a wrong first byte
// hundreds of times faster than a wrong last byte; a constant-time comparison takes as long.
TEST(ServerApi, TheApiKeyIsComparedInConstantTime) {
  const std::string key(1 << 20, 'k');
  std::string wrong_first = "Bearer " + key, wrong_last = "Bearer " + key;
  wrong_first[7] = 'x';
  wrong_last.back() = 'x';
  auto fastest = [&](const std::string& header) {
    double best = 1e9;
    for (int rep = 0; rep < 40; ++rep) {
      const auto t0 = Clock::now();
      const bool ok = bearer_token_matches(header, key);
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
      EXPECT_FALSE(ok);
    }
    return best;
  };
  const double first = fastest(wrong_first), last = fastest(wrong_last);
  EXPECT_LT(last / first, 3.0) << "wrong first byte " << first * 1e6 << " us, wrong last byte " << last * 1e6 << " us";
  EXPECT_TRUE(bearer_token_matches("Bearer " + key, key));
}

// max_tokens beyond int64 was read as a wrapped negative number ("got -9223372036854775808").
TEST(ServerApi, AbsurdMaxTokensAreReportedAsSent) {
  for (const std::string value : {"9223372036854775808", "18446744073709551615", "18446744073709551616",
                                  "100000000000000000000000000000"}) {
    try {
      parse_request(R"({"prompt": "x", "max_tokens": )" + value + "}", false, 256, 512);
      ADD_FAILURE() << value << " accepted";
    } catch (const ApiError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, "max_tokens");
      EXPECT_EQ(what.find("got -"), std::string::npos) << what;
      EXPECT_NE(what.find("too large"), std::string::npos) << what;
    }
  }
  try {
    parse_request(R"({"prompt": "x", "max_tokens": 9223372036854775808})", false, 256, 512);
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("9223372036854775808"), std::string::npos) << e.what();
  }
  for (const char* body : {R"({"prompt": "x", "max_tokens": 0})", R"({"prompt": "x", "max_tokens": -5})",
                           R"({"prompt": "x", "max_tokens": 257})", R"({"prompt": "x", "max_tokens": 2.5})"}) {
    EXPECT_THROW(parse_request(body, false, 256, 512), ApiError) << body;
  }
  EXPECT_EQ(parse_request(R"({"prompt": "x", "max_tokens": 256})", false, 256, 512).generation.max_tokens, 256);
  // Token ids too.
  try {
    parse_request(R"({"prompt": [1, 9223372036854775808]})", false, 256, 512);
    ADD_FAILURE() << "token id 2^63 accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 9223372036854775808"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_request(R"({"prompt": [1, 2147483647]})", false, 256, 512).prompts[0].tokens.back(), 2147483647);
}

}  // namespace
}  // namespace turbokv::server
