// engine::Session on kjv-llama-3M (seq_len 256): generation stops at the context, feeding past
// it is an error that changes nothing, on_token sees every sampled token (the end token too,
// which is not fed), and the constructor and generate() refuse what they cannot serve.
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/runtime/sampler.hpp"
#include "engine/runtime/session.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prompt_cache.hpp"

using namespace turbokv::engine;

namespace {

const std::string kModels = TURBOKV_MODELS_DIR;

const Model& kjv() {
  static const Model m = load_model(kModels + "/kjv-llama-3M.bin");
  return m;
}

turbokv::PromptCache dense_cache(const ModelConfig& c) {
  return turbokv::make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, turbokv::parse_cache_config("dense"));
}

std::vector<int> some_tokens(size_t n) {
  std::vector<int> t{1};  // BOS
  for (size_t i = 1; i < n; ++i) t.push_back(static_cast<int>(3 + (i * 37) % 500));
  return t;
}

}  // namespace

TEST(Session, GenerationStopsAtTheContextAndFeedingPastItIsAnError) {
  const Model& m = kjv();
  ASSERT_EQ(m.config.seq_len, 256);
  turbokv::ThreadPool pool(2);
  Session s(m, dense_cache(m.config), pool);
  s.feed(some_tokens(250));
  Sampler greedy(SamplerOptions{0.0f, 1.0f, 0});
  // 6 sampled tokens are fed (positions 250-255); the 7th is sampled from position 255's logits
  // and returned, not fed: the context is full.
  std::vector<int> seen;
  const auto out = s.generate(100, greedy, {}, [&](int id) { seen.push_back(id); });
  EXPECT_EQ(out.size(), 7u);
  EXPECT_EQ(seen, out);
  EXPECT_EQ(s.position(), 256u);
  EXPECT_EQ(s.cache().layer(0).size(), 256u);
  // One more token does not fit: an error, and the session is unchanged.
  const std::vector<float> logits(s.logits().begin(), s.logits().end());
  const int one = 5;
  EXPECT_THROW(s.feed(std::span<const int>(&one, 1)), turbokv::Error);
  EXPECT_EQ(s.position(), 256u);
  for (size_t l = 0; l < s.cache().n_layers(); ++l) EXPECT_EQ(s.cache().layer(l).size(), 256u) << l;
  EXPECT_TRUE(std::equal(logits.begin(), logits.end(), s.logits().begin()));
  // And generate() at a full context samples one token and feeds nothing.
  EXPECT_EQ(s.generate(5, greedy, {}).size(), 1u);
  EXPECT_EQ(s.position(), 256u);
}

TEST(Session, OnTokenSeesTheEndTokenWhichIsNotFed) {
  const Model& m = kjv();
  turbokv::ThreadPool pool(2);
  Sampler greedy(SamplerOptions{0.0f, 1.0f, 0});
  Session reference(m, dense_cache(m.config), pool);
  reference.feed(some_tokens(8));
  const auto free_run = reference.generate(6, greedy, {});
  ASSERT_EQ(free_run.size(), 6u);
  EXPECT_EQ(reference.position(), 8u + 5u);  // the last sampled token is not fed
  // The same run, with its 3rd token declared the end: the first 3 tokens come back, on_token saw
  // exactly those, and only the first 2 were fed.
  Session s(m, dense_cache(m.config), pool);
  s.feed(some_tokens(8));
  std::vector<int> seen;
  int calls = 0;
  const auto out = s.generate(6, greedy, [&](int id) { return ++calls == 3 && id == free_run[2]; },
                              [&](int id) { seen.push_back(id); });
  EXPECT_EQ(out, std::vector<int>(free_run.begin(), free_run.begin() + 3));
  EXPECT_EQ(seen, out);
  EXPECT_EQ(s.position(), 8u + 2u);
  EXPECT_TRUE(s.generate(0, greedy, {}).empty());
}

TEST(Session, RefusesCachesThatDoNotFitAndGenerateBeforeFeed) {
  const Model& m = kjv();
  const ModelConfig& c = m.config;
  turbokv::ThreadPool pool(1);
  const auto config = turbokv::parse_cache_config("dense");
  EXPECT_THROW(Session(m, turbokv::make_prompt_cache(c.n_layers - 1, c.n_kv_heads, c.head_dim, config), pool),
               turbokv::Error);
  EXPECT_THROW(Session(m, turbokv::make_prompt_cache(c.n_layers, c.n_kv_heads + 1, c.head_dim, config), pool),
               turbokv::Error);
  EXPECT_THROW(Session(m, turbokv::make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim / 2, config), pool),
               turbokv::Error);
  auto used = dense_cache(c);
  const std::vector<float> kv(static_cast<size_t>(c.n_kv_heads) * c.head_dim, 0.5f);
  for (size_t l = 0; l < used.n_layers(); ++l) used.layer(l).append(kv, kv, 1);
  EXPECT_THROW(Session(m, std::move(used), pool), turbokv::Error);  // must start empty
  Session s(m, dense_cache(c), pool);
  Sampler greedy(SamplerOptions{0.0f, 1.0f, 0});
  EXPECT_TRUE(s.logits().empty());
  EXPECT_THROW(s.generate(3, greedy, {}), turbokv::Error);
  EXPECT_EQ(s.position(), 0u);
}
