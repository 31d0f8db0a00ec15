// Concurrency guarantees of kv_cache.hpp and engine/model/model.hpp, checked from several std::threads
// at once (and under ThreadSanitizer by scripts/ci-sanitize.sh):
//  - distinct caches of every class share no mutable state: appended/attended from different
//    threads they give bit-identical results to a sequential run;
//  - one cache, many readers: const methods (fetch, attend, save_state, nbytes) run concurrently;
//  - attend() with the library's default thread count, from many threads at once (the attention
//    pools are shared process-wide and must hand off safely);
//  - engine sessions on one shared read-only Model, each with its own caches and pool.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "skip_policy.hpp"

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/runtime/sampler.hpp"
#include "engine/runtime/session.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/thread_pool.hpp"
#include "test_util.hpp"

using turbokv::test::random_normal;

namespace turbokv {
namespace {

constexpr int kHeads = 2;
constexpr int kDim = 64;
constexpr int kQHeads = 4;  // grouped-query attention, 2 query heads per kv head

const char* const kConfigs[] = {"dense16", "dense32", "tq3", "prod3", "tq2.5s2w8", "q8_0", "kivi2", "affine4"};

// One cache's life: appends in uneven chunks, a decode-step attention after each, a chunked
// prefill attention, a trim, and the final contents. Returns everything it computed.
std::vector<float> cache_script(const char* config, uint32_t seed, int attend_threads) {
  auto cache = make_kv_cache(config, kHeads, kDim);
  std::vector<float> digest;
  const size_t chunks[] = {1, 7, 33, 2, 64, 5, 40};
  AttentionOptions options;
  options.threads = attend_threads;
  for (size_t i = 0; i < std::size(chunks); ++i) {
    const size_t n = chunks[i];
    const auto k = random_normal(kHeads * n * kDim, seed * 100 + static_cast<uint32_t>(i));
    const auto v = random_normal(kHeads * n * kDim, seed * 100 + 50 + static_cast<uint32_t>(i));
    cache->append(k, v, n);
    const size_t nq = std::min<size_t>(n, 4);
    const auto q = random_normal(kQHeads * nq * kDim, seed * 100 + 90 + static_cast<uint32_t>(i));
    std::vector<float> out(q.size());
    attend(q, kQHeads, static_cast<int>(nq), *cache, out, options);
    digest.insert(digest.end(), out.begin(), out.end());
  }
  cache->trim(9);
  std::vector<float> keys(kHeads * cache->size() * kDim), values(keys.size());
  cache->fetch(keys, values);
  digest.insert(digest.end(), keys.begin(), keys.end());
  digest.insert(digest.end(), values.begin(), values.end());
  digest.push_back(static_cast<float>(cache->nbytes()));
  return digest;
}

void expect_same(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what << " differs";
}

TEST(Concurrency, IndependentCachesOfEveryClassFromManyThreads) {
  struct Job {
    const char* config;
    uint32_t seed;
    int threads;  // attend's thread count: 1 (caller only) or 0 (library default, shared pools)
  };
  std::vector<Job> jobs;
  for (size_t i = 0; i < std::size(kConfigs); ++i) {
    jobs.push_back({kConfigs[i], static_cast<uint32_t>(i + 1), 1});
    jobs.push_back({kConfigs[i], static_cast<uint32_t>(i + 101), 0});
  }
  std::vector<std::vector<float>> expected;
  for (const Job& job : jobs) expected.push_back(cache_script(job.config, job.seed, job.threads));

  constexpr int kThreads = 6;
  std::vector<std::vector<std::vector<float>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread runs every job, starting at a different one, so different classes overlap.
      for (size_t j = 0; j < jobs.size(); ++j) {
        const Job& job = jobs[(j + static_cast<size_t>(t) * 3) % jobs.size()];
        got[t].push_back(cache_script(job.config, job.seed, job.threads));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      const size_t job = (j + static_cast<size_t>(t) * 3) % jobs.size();
      expect_same(got[t][j], expected[job],
                  std::string(jobs[job].config) + " threads=" + std::to_string(jobs[job].threads) +
                      " on thread " + std::to_string(t));
    }
  }
}

TEST(Concurrency, ManyReadersOfOneCache) {
  for (const char* config : {"dense16", "tq3", "prod3s2w8", "q4_0", "kivi4"}) {
    auto cache = make_kv_cache(config, kHeads, kDim);
    const size_t n = 300;
    cache->append(random_normal(kHeads * n * kDim, 7), random_normal(kHeads * n * kDim, 8), n);
    const auto q = random_normal(kQHeads * 3 * kDim, 9);
    auto read_all = [&](int attend_threads) {
      std::vector<float> digest(q.size());
      AttentionOptions options;
      options.threads = attend_threads;
      attend(q, kQHeads, 3, *cache, digest, options);
      std::vector<float> k(kHeads * n * kDim), v(k.size());
      cache->fetch(k, v);
      digest.insert(digest.end(), k.begin(), k.end());
      digest.insert(digest.end(), v.begin(), v.end());
      const CacheState state = cache->save_state();
      for (const auto& t : state.tensors) {
        for (uint8_t b : t.data) digest.push_back(b);
      }
      digest.push_back(static_cast<float>(cache->nbytes()));
      return digest;
    };
    const auto expected1 = read_all(1);
    const auto expected0 = read_all(0);
    std::vector<std::vector<float>> got(6);
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
      threads.emplace_back([&, t] {
        for (int r = 0; r < 3; ++r) got[t] = read_all(t % 2);
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < 6; ++t) expect_same(got[t], t % 2 ? expected1 : expected0, config);
  }
}

TEST(Concurrency, PromptCacheSaveLoadFromManyThreads) {
  // Distinct prompt caches saved to and loaded from distinct files at once; the class registry
  // is shared (load_kv_cache under its mutex).
  const auto dir = std::filesystem::temp_directory_path() / ("turbokv-conc-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::thread> threads;
  std::vector<int> ok(6, 0);
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      PromptCache pc;
      for (int l = 0; l < 3; ++l) {
        auto c = make_kv_cache(kConfigs[(t + l) % std::size(kConfigs)], kHeads, kDim);
        c->append(random_normal(kHeads * 20 * kDim, t * 10 + l), random_normal(kHeads * 20 * kDim, t * 10 + l + 5), 20);
        pc.add_layer(std::move(c));
      }
      const std::string path = (dir / fmt::format("c{}.safetensors", t)).string();
      for (int r = 0; r < 3; ++r) {
        save_prompt_cache(path, pc);
        const PromptCache back = load_prompt_cache(path);
        ok[t] += serialize_prompt_cache(back) == serialize_prompt_cache(pc);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::filesystem::remove_all(dir);
  for (int t = 0; t < 6; ++t) EXPECT_EQ(ok[t], 3) << "thread " << t;
}

// ---- engine sessions on one shared model -------------------------------------------------------

std::vector<int> run_session(const engine::Model& model, const char* config, int pool_threads) {
  ThreadPool pool(pool_threads);
  PromptCache cache;
  for (int l = 0; l < model.config.n_layers; ++l) {
    cache.add_layer(make_kv_cache(config, model.config.n_kv_heads, model.config.head_dim));
  }
  engine::Session session(model, std::move(cache), pool, 4);
  const std::vector<int> prompt = {1, 403, 407, 261, 378, 430, 350};  // BOS "Once upon a time"
  session.feed(prompt);
  engine::Sampler sampler(engine::SamplerOptions{0.0f, 0.9f, 42});
  return session.generate(24, sampler, [](int id) { return id == 2; });
}

TEST(Concurrency, SessionsShareOneReadOnlyModel) {
  const std::string path = std::string(TURBOKV_MODELS_DIR) + "/stories260K.bin";
  if (!std::filesystem::exists(path)) TURBOKV_SKIP_MISSING() << path << " not found";
  const engine::Model model = engine::load_model(path);
  const char* configs[] = {"dense16", "tq3", "prod4", "tq4s1w8"};
  std::vector<std::vector<int>> expected;
  for (const char* c : configs) expected.push_back(run_session(model, c, 1));
  std::vector<std::vector<int>> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    // Half the sessions use a 2-thread pool of their own: the model's weights are read by
    // pool workers of several sessions at once.
    threads.emplace_back([&, t] { got[t] = run_session(model, configs[t % 4], 1 + t / 4); });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(got[t], expected[t % 4]) << configs[t % 4] << " on thread " << t;
    EXPECT_FALSE(got[t].empty());
  }
}

}  // namespace
}  // namespace turbokv
