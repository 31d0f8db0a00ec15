// `turbokv serve-bench --url` against a stand-in for llama-server (an in-process httplib server
// that answers as llama-server does: the vocabulary as meta.n_vocab, no usage while streaming,
// null fields): serve-bench counts the tokens from the text pieces, measures the inter-token
// latency and each stream's longest stall from when the pieces arrive, and with --arrive-every
// sends the later requests one by one once the first ones stream. (It used to abort on the
// first null with "type must be number, but is null".)
#include <gtest/gtest.h>
#include <httplib.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "skip_policy.hpp"
#include "test_util.hpp"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
const std::string kTool = TURBOKV_TOOL_PATH;

std::pair<std::string, int> run(const std::string& args) {
  const turbokv::test::CommandOutput out = turbokv::test::run_command("'" + kTool + "' " + args + " 2>&1");
  return {out.text, out.status};
}

// Streams `tokens` one-letter pieces 20 ms apart, the fifth after a 250 ms stall, then a closing
// chunk with finish_reason "length" and no text; records when each request came and the largest
// token id of its prompt.
class FakeLlamaServer {
 public:
  explicit FakeLlamaServer(bool report_vocab) {
    server_.Get("/v1/models", [report_vocab](const httplib::Request&, httplib::Response& res) {
      json meta = {{"vocab_type", 2}, {"n_ctx_train", 4096}, {"n_embd", 64}};
      if (report_vocab) meta["n_vocab"] = 1000;
      res.set_content(json{{"object", "list"}, {"data", json::array({{{"id", "fake"}, {"meta", meta}}})}}.dump(),
                      "application/json");
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body);
      int largest = 0;
      for (const auto& t : body["prompt"]) largest = std::max(largest, t.get<int>());
      const int tokens = body["max_tokens"].get<int>();
      {
        std::lock_guard lock(mutex_);
        arrivals_.push_back(std::chrono::duration<double>(Clock::now() - t0_).count());
        largest_id_ = std::max(largest_id_, largest);
      }
      res.set_chunked_content_provider("text/event-stream", [tokens](size_t, httplib::DataSink& sink) {
        for (int i = 0; i <= tokens; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(i == 4 ? 250 : 20));
          const bool last = i == tokens;
          const json chunk = {{"choices", json::array({{{"text", last ? "" : "a"}, {"index", 0}, {"logprobs", nullptr},
                                                        {"finish_reason", last ? json("length") : json(nullptr)}}})},
                              {"created", 1}, {"model", "fake"}, {"object", "text_completion"}, {"id", nullptr}};
          const std::string event = "data: " + chunk.dump() + "\n\n";
          if (!sink.write(event.data(), event.size())) return false;
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeLlamaServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<double> arrivals() {
    std::lock_guard lock(mutex_);
    return arrivals_;
  }
  int largest_id() {
    std::lock_guard lock(mutex_);
    return largest_id_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<double> arrivals_;
  int largest_id_ = 0;
  Clock::time_point t0_ = Clock::now();
};

void require_tool() {
  if (kTool.empty() || !std::filesystem::exists(kTool)) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
}

json level_of(const std::string& out) {
  const json j = json::parse(out.substr(out.find('{')), nullptr, false);
  if (j.is_discarded() || !j.contains("results") || j["results"].empty()) return json::object();
  return j["results"][0];
}

// serve-bench --json against `fake` with `args`: the first level's results, or an empty object
// when the tool failed or reported none (the failure recorded). `printed` receives its output.
json bench_level(const FakeLlamaServer& fake, const std::string& args, std::string* printed = nullptr) {
  const auto [out, status] = run("serve-bench --url " + fake.url() + " " + args + " --json");
  if (printed != nullptr) *printed = out;
  EXPECT_EQ(status, 0) << out;
  const json r = level_of(out);
  EXPECT_FALSE(r.empty()) << out;
  return r;
}

TEST(ServeBenchClient, MeasuresAStreamFromALlamaServerLikeServer) {
  require_tool();
  FakeLlamaServer fake(true);
  std::string out;
  const json r = bench_level(fake, "--concurrency 2 --requests 2 --prompt-tokens 64 --max-tokens 10", &out);
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r["failed"], 0);
  EXPECT_EQ(r["generated_tokens"], 20) << "counted from the text pieces: the server sent no usage";
  EXPECT_NEAR(r["itl_p50_s"].get<double>(), 0.020, 0.015);
  EXPECT_NEAR(r["stall_max_s"].get<double>(), 0.250, 0.1) << "the fifth token came after a 250 ms stall";
  EXPECT_NEAR(r["stall_p50_s"].get<double>(), 0.250, 0.1) << "in both streams";
  EXPECT_GE(r["itl_p99_s"].get<double>(), r["itl_p90_s"].get<double>());
  ASSERT_EQ(r["stalls_s"].size(), 2u);
  EXPECT_LT(fake.largest_id(), 1000) << "prompt ids stay below the reported n_vocab";
  const json all = json::parse(out.substr(out.find('{')));
  EXPECT_EQ(all["model"], "fake at " + fake.url()) << "the served model, not serve-bench's own --model default";
  EXPECT_TRUE(all["kv_budget"].is_null());
  // Both streams decode at once: 2 x 9 tokens after the first in one ~0.41 s phase (3 x 20 ms,
  // the 250 ms stall, 5 x 20 ms), ~44 tokens/s; in sequence it would be half.
  EXPECT_EQ(r["peak_streaming"], 2);
  EXPECT_GT(r["decode_tokens_per_s"].get<double>(), 30.0);
  EXPECT_LT(r["decode_tokens_per_s"].get<double>(), 50.0);
}

TEST(ServeBenchClient, DecodeRateCountsTheTimeAnyStreamDecodesOnce) {
  require_tool();
  FakeLlamaServer fake(true);
  // One client, two requests one after the other: one stream at a time, ~22 tokens/s.
  const json r = bench_level(fake, "--concurrency 1 --requests 2 --prompt-tokens 64 --max-tokens 10");
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r["peak_streaming"], 1);
  EXPECT_GT(r["decode_tokens_per_s"].get<double>(), 15.0);
  EXPECT_LT(r["decode_tokens_per_s"].get<double>(), 25.0);
}

// A queued request gets no byte until a slot frees (llama-server with fewer slots than clients):
// --read-timeout sets how long that may last before the request counts as failed. The fake's
// 250 ms stall outlasts 0.1 s; the default (600 s) waits it out, as the tests above show.
TEST(ServeBenchClient, ReadTimeoutFailsARequestThatWaitsLongerForItsNextByte) {
  require_tool();
  FakeLlamaServer fake(true);
  EXPECT_EQ(bench_level(fake, "--concurrency 2 --requests 2 --max-tokens 10 --read-timeout 0.1")["failed"], 2);
  const json longer = bench_level(fake, "--concurrency 2 --requests 2 --max-tokens 10 --read-timeout 1");
  EXPECT_EQ(longer["failed"], 0);
  EXPECT_EQ(longer["generated_tokens"], 20);
}

TEST(ServeBenchClient, AVocabularyItCannotLearnIsAClearErrorUnlessGiven) {
  require_tool();
  FakeLlamaServer fake(false);
  const auto [out, status] = run("serve-bench --url " + fake.url() + " --concurrency 1 --requests 1 --json");
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("--vocab"), std::string::npos) << out;
  EXPECT_EQ(bench_level(fake, "--vocab 500 --concurrency 1 --requests 1 --max-tokens 6")["generated_tokens"], 6);
  EXPECT_LT(fake.largest_id(), 500);
}

TEST(ServeBenchClient, ArrivalsComeOneByOneOnceTheFirstStreamsRun) {
  require_tool();
  FakeLlamaServer fake(true);
  const json r = bench_level(fake, "--concurrency 2 --requests 4 --arrive-every 0.3 --max-tokens 10");
  EXPECT_EQ(r["generated_tokens"], 40);
  const auto at = fake.arrivals();
  ASSERT_EQ(at.size(), 4u);
  EXPECT_LT(at[1] - at[0], 0.1) << "the first two start together";
  // The third waits for both first tokens (~20 ms) and then 0.3 s; the fourth 0.3 s more.
  EXPECT_NEAR(at[2] - at[0], 0.32, 0.1);
  EXPECT_NEAR(at[3] - at[2], 0.3, 0.1);
}

}  // namespace
