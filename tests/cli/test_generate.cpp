// End-to-end generation on the real llama2.c checkpoints: greedy text equals the published
// text (dense cache), and a prompt cache saved after the prompt resumes to the same tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/runtime/sampler.hpp"
#include "engine/runtime/session.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"

using namespace turbokv::engine;

namespace {

const std::string kModels = TURBOKV_MODELS_DIR;

turbokv::PromptCache dense_cache(const ModelConfig& c) {
  std::vector<std::unique_ptr<turbokv::KVCache>> layers;
  for (int l = 0; l < c.n_layers; ++l) {
    layers.push_back(std::make_unique<turbokv::DenseKVCache>(c.n_kv_heads, c.head_dim));
  }
  return turbokv::PromptCache(std::move(layers));
}

std::vector<int> greedy(Session& session, const Tokenizer& tok, int n) {
  Sampler sampler(SamplerOptions{0.0f, 1.0f, 1});
  return session.generate(n, sampler, [&](int id) { return tok.is_end_of_generation(id) || id == tok.bos_id(); });
}

struct Loaded {
  Model model;
  std::unique_ptr<SentencePieceTokenizer> tok;
};

Loaded load(const std::string& name) {
  Loaded l{load_llama2c(kModels + "/" + name), nullptr};
  l.tok = load_llama2c_tokenizer(kModels + "/tok512.bin", l.model.config.vocab_size);
  return l;
}

std::string greedy_text(const Loaded& m, const std::string& prompt, int n, int threads, int chunk) {
  turbokv::ThreadPool pool(threads);
  Session session(m.model, dense_cache(m.model.config), pool, chunk);
  const auto prompt_ids = m.tok->encode(prompt, true);
  session.feed(prompt_ids);
  std::vector<int> all = prompt_ids;
  const auto out = greedy(session, *m.tok, n);
  all.insert(all.end(), out.begin(), out.end());
  return m.tok->decode_all(all);
}

}  // namespace

TEST(Generate, Stories260KGreedyReproducesPublishedText) {
  const auto m = load("stories260K.bin");
  EXPECT_EQ(m.model.config.dim, 64);
  EXPECT_EQ(m.model.config.head_dim, 8);
  const std::string expected =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, "
      "she saw a big, red ball. She wanted to play with it, but it was too high.";
  // One thread with single-token prefill, and two threads with chunked prefill: both exact.
  for (const auto& [threads, chunk] : std::vector<std::pair<int, int>>{{1, 1}, {2, 64}, {2, 3}}) {
    const std::string text = greedy_text(m, "Once upon a time", 80, threads, chunk);
    EXPECT_EQ(text.substr(0, expected.size()), expected) << "threads " << threads << " chunk " << chunk;
  }
}

TEST(Generate, KjvGreedyReproducesPublishedText) {
  const auto m = load("kjv-llama-3M.bin");
  EXPECT_EQ(m.model.config.head_dim, 64);
  const std::string expected =
      "In the beginning of the God of Jesus Christ.\n And the LORD said unto Joseph, What is this day, that I may "
      "be ashamed of the LORD,";
  const std::string text = greedy_text(m, "In the beginning", 120, 2, 64);
  EXPECT_EQ(text.substr(0, expected.size()), expected);
}

TEST(Generate, SavedPromptCacheContinuesWithSameTokens) {
  const auto m = load("stories260K.bin");
  turbokv::ThreadPool pool(2);
  const auto prompt = m.tok->encode("Once upon a time, there was a dog", true);

  Session straight(m.model, dense_cache(m.model.config), pool);
  straight.feed(prompt);
  const auto path = (std::filesystem::temp_directory_path() / "turbokv_test_generate.tkv").string();
  straight.save(path);
  const auto expected = greedy(straight, *m.tok, 40);
  ASSERT_GE(expected.size(), 20u);

  Session resumed = Session::load(m.model, path, pool);
  EXPECT_EQ(resumed.tokens(), prompt);
  EXPECT_EQ(resumed.cache().size(), prompt.size());
  EXPECT_EQ(greedy(resumed, *m.tok, 40), expected);

  // A cache from another model shape is refused.
  const auto kjv = load("kjv-llama-3M.bin");
  EXPECT_THROW(Session::load(kjv.model, path, pool), turbokv::Error);
  std::filesystem::remove(path);
}
