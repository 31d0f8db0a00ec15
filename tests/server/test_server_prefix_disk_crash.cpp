// The disk tier across crashes: `turbokv serve --prefix-disk DIR --no-prefix-cache` (every
// restored prefix comes from disk) is killed with SIGKILL at random points while two clients send
// prompts in random order (each computed prompt's last whole page and each answer's are being
// written all the time, so kills land mid-write), restarted on the same directory, killed again,
// six times; every answer that came back, and every answer of a last, clean run over all prompts,
// equals the answer of computing the prompt whole, the restarted servers serve prefixes from disk,
// and a clean stop (SIGTERM) keeps them for the next server too. The seed of the kill points is
// printed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve_process.hpp"
#include "skip_policy.hpp"

using namespace turbokv::test;
using nlohmann::json;

namespace {

constexpr int kPrompts = 12;

struct Answer {
  bool ok = false;
  std::string text;
  long disk_tokens = 0, cached_tokens = 0, prompt_tokens = 0;
};

Answer complete(const Serve& s, const std::string& prompt) {
  const json body = {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}};
  const std::string response = s.post("/v1/completions", body.dump(), std::chrono::milliseconds(60000));
  Answer a;
  if (status_of(response) != 200) return a;
  const json j = json::parse(body_of(response), nullptr, false);
  if (j.is_discarded() || !j.contains("choices")) return a;
  a.ok = true;
  a.text = j["choices"][0]["text"].get<std::string>();
  a.disk_tokens = j["usage"]["prompt_tokens_details"].value("disk_tokens", 0L);
  a.cached_tokens = j["usage"]["prompt_tokens_details"].value("cached_tokens", 0L);
  a.prompt_tokens = j["usage"].value("prompt_tokens", 0L);
  return a;
}

// The servers keep no prefixes in RAM (--no-prefix-cache), so every restored prefix comes from
// the disk tier: each prompt's last whole page is written there when it is computed, and each
// answer's. One sequence at a time (--parallel 1), pages of 16 tokens.
std::vector<std::string> serve_args(const std::string& dir) {
  return {"--prefix-disk", dir, "--prefix-disk-budget", "64MiB", "--no-prefix-cache", "--kv-page-tokens", "16",
          "--parallel", "1"};
}

// The prompts: verses of Revelation (the model's held-out text), 20-80 tokens, no two sharing a
// page; what a server computing each prompt whole answers (its first time on a fresh store), and
// what the same server answers once the prompt's prefix is on its disk, which must be the same.
struct Workload {
  std::vector<std::string> prompts;
  std::vector<Answer> computed, restored;
};

Workload reference(const std::string& dir) {
  std::ifstream text(std::string(TURBOKV_MODELS_DIR) + "/kjv-revelation.txt");
  std::vector<std::string> verses;
  for (std::string line; std::getline(text, line);) {
    if (line.size() > 60) verses.push_back(line);
  }
  Serve intact(serve_args(dir));
  Workload w;
  if (!intact.ready() || verses.size() < 4 * kPrompts) return w;
  for (int p = 0; p < kPrompts; ++p) {
    w.prompts.push_back(verses[4 * p]);
    w.computed.push_back(complete(intact, w.prompts.back()));
    // The write is queued: ask again until it is on disk.
    Answer again;
    for (int i = 0; i < 100 && again.disk_tokens == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      again = complete(intact, w.prompts.back());
    }
    w.restored.push_back(again);
  }
  return w;
}

// Whether `a` is the answer of computing prompt p whole, however much of it was restored.
void expect_recomputed(const Workload& w, int p, const Answer& a) {
  EXPECT_EQ(a.text, w.computed[p].text) << "prompt " << p << ": " << a.prompt_tokens << " tokens, " << a.cached_tokens
                                        << " restored, " << a.disk_tokens << " from disk";
}

}  // namespace

TEST(PrefixDiskCrash, KilledMidWriteRestartsServesOnlyCorrectAnswers) {
  if (!have_tool()) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  const std::string tmp =
      (std::filesystem::temp_directory_path() / ("turbokv-disk-crash-" + std::to_string(::getpid()))).string();
  const std::string dir = tmp + "/store";
  std::filesystem::remove_all(tmp);
  const Workload w = reference(tmp + "/intact");
  ASSERT_EQ(w.prompts.size(), static_cast<size_t>(kPrompts));
  for (int p = 0; p < kPrompts; ++p) {
    ASSERT_TRUE(w.computed[p].ok && w.restored[p].ok);
    ASSERT_EQ(w.computed[p].cached_tokens, 0);
    ASSERT_EQ(w.restored[p].disk_tokens, (w.restored[p].prompt_tokens - 1) / 16 * 16) << "prompt " << p;
    ASSERT_EQ(w.restored[p].text, w.computed[p].text) << "prompt " << p << ": restored from an intact store";
  }

  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  int answered = 0, from_disk_after_restart = 0;
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE("round " + std::to_string(round) + ", seed " + std::to_string(seed));
    Serve s(serve_args(dir));
    ASSERT_TRUE(s.ready()) << "the store did not open after a kill";
    // Two users at a time, returning in random order, until the kill.
    std::atomic<bool> killed{false};
    std::vector<std::thread> users;
    std::mutex mutex;
    std::vector<std::pair<int, Answer>> got;
    for (int u = 0; u < 2; ++u) {
      users.emplace_back([&, u] {
        std::mt19937 pick(seed + static_cast<unsigned>(round * 2 + u));
        while (!killed) {
          const int p = static_cast<int>(pick() % kPrompts);
          const Answer a = complete(s, w.prompts[p]);
          if (!a.ok) continue;  // the kill cut it off
          std::lock_guard lock(mutex);
          got.push_back({p, a});
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 1500));
    killed = true;
    s.kill_now();
    for (auto& u : users) u.join();
    for (const auto& [p, a] : got) {
      expect_recomputed(w, p, a);
      ++answered;
      if (round > 0 && a.disk_tokens > 0) ++from_disk_after_restart;
    }
  }
  // A clean run over the whole workload on what the kills left.
  {
    Serve s(serve_args(dir));
    ASSERT_TRUE(s.ready());
    long disk_tokens = 0;
    for (int p = 0; p < kPrompts; ++p) {
      const Answer a = complete(s, w.prompts[p]);
      ASSERT_TRUE(a.ok);
      expect_recomputed(w, p, a);
      disk_tokens += a.disk_tokens;
    }
    EXPECT_GT(disk_tokens, 0) << "nothing served from the disk after the kills";
    const double rejected = s.metric("turbokv_prefix_disk_rejected_total");
    std::printf("answered %d during the kills (%d restored from disk), %ld tokens from disk in the clean run, "
                "%.0f values refused\n",
                answered, from_disk_after_restart, disk_tokens, rejected);
    EXPECT_GE(rejected, 0);  // the metric is there
    // A clean stop keeps the queued writes; the next server finds the last turn's prefixes.
    EXPECT_GT(s.terminate(std::chrono::seconds(30)), 0);
  }
  Serve s(serve_args(dir));
  ASSERT_TRUE(s.ready());
  const Answer a = complete(s, w.prompts[0]);
  expect_recomputed(w, 0, a);
  EXPECT_GT(a.disk_tokens, 0);
  s.kill_now();
  std::filesystem::remove_all(tmp);
}
