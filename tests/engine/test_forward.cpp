// The forward pass against a naive, literal transcription of the model equations (float64,
// whole-sequence attention with explicit arrays, no cache), on small random models covering
// each architecture feature: GQA, separate classifier, QKV bias (qwen2), per-head q/k norm
// and NeoX RoPE (qwen3), Llama 3 frequency factors, and head_dim != dim / n_heads.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "engine/runtime/forward.hpp"
#include "engine/model/model.hpp"
#include "forward_reference.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"

using namespace turbokv::engine;
using turbokv::test::max_relative_error;

namespace {

// A model whose weights live in `store` (the views point into it).
struct TestModel {
  Model model;
  std::vector<std::vector<float>> store;
};

TestModel random_model(ModelConfig c, uint32_t seed) {
  TestModel t;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto matrix = [&](int rows, int cols) {
    auto& v = t.store.emplace_back(static_cast<size_t>(rows) * cols);
    const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
    for (auto& x : v) x = normal(rng) * scale;
    return WeightMatrix{GgmlType::F32, rows, cols, v.data()};
  };
  auto vec = [&](int n, float mean, float spread) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = mean + spread * normal(rng);
    return v;
  };
  c.validate();
  Model& m = t.model;
  t.store.reserve(64);
  m.config = c;
  m.token_embedding = matrix(c.vocab_size, c.dim);
  m.output = c.tied_embeddings ? m.token_embedding : matrix(c.vocab_size, c.dim);
  m.final_norm = vec(c.dim, 1.0f, 0.1f);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights w;
    w.attn_norm = vec(c.dim, 1.0f, 0.1f);
    w.ffn_norm = vec(c.dim, 1.0f, 0.1f);
    w.wq = matrix(c.q_dim(), c.dim);
    w.wk = matrix(c.kv_dim(), c.dim);
    w.wv = matrix(c.kv_dim(), c.dim);
    w.wo = matrix(c.dim, c.q_dim());
    w.w_gate = matrix(c.hidden_dim, c.dim);
    w.w_up = matrix(c.hidden_dim, c.dim);
    w.w_down = matrix(c.dim, c.hidden_dim);
    if (c.qkv_bias) {
      w.bq = vec(c.q_dim(), 0.0f, 0.3f);
      w.bk = vec(c.kv_dim(), 0.0f, 0.3f);
      w.bv = vec(c.kv_dim(), 0.0f, 0.3f);
    }
    if (c.qk_norm) {
      w.q_norm = vec(c.head_dim, 1.0f, 0.2f);
      w.k_norm = vec(c.head_dim, 1.0f, 0.2f);
    }
    m.layers.push_back(std::move(w));
  }
  m.validate();
  return t;
}

ModelConfig small_config() {
  ModelConfig c;
  c.dim = 48;
  c.hidden_dim = 72;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 97;
  c.seq_len = 64;
  return c;
}

std::vector<int> some_tokens(int n, int vocab) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + 11) % vocab);
  return t;
}

}  // namespace

TEST(Forward, LlamaMatchesReference) {
  auto c = small_config();
  const auto t = random_model(c, 1);
  for (const int chunk : {1, 4, 64}) {
    EXPECT_LT(max_relative_error(t.model, some_tokens(21, c.vocab_size), chunk, 2), 2e-5) << chunk;
  }
}

TEST(Forward, TiedEmbeddingsAndOneThread) {
  auto c = small_config();
  c.tied_embeddings = true;
  c.n_kv_heads = 6;  // plain multi-head attention
  const auto t = random_model(c, 2);
  EXPECT_LT(max_relative_error(t.model, some_tokens(13, c.vocab_size), 5, 1), 2e-5);
}

TEST(Forward, Qwen2BiasAndNeoxRope) {
  auto c = small_config();
  c.arch = "qwen2";
  c.qkv_bias = true;
  c.rope_neox = true;
  c.rope_theta = 1e6f;
  const auto t = random_model(c, 3);
  EXPECT_LT(max_relative_error(t.model, some_tokens(17, c.vocab_size), 8, 2), 2e-5);
}

TEST(Forward, Qwen3QkNormAndWideHeads) {
  auto c = small_config();
  c.arch = "qwen3";
  c.qk_norm = true;
  c.rope_neox = true;
  c.head_dim = 16;  // q_dim 96 != dim 48, as in Qwen3
  c.tied_embeddings = true;
  const auto t = random_model(c, 4);
  EXPECT_LT(max_relative_error(t.model, some_tokens(17, c.vocab_size), 8, 2), 2e-5);
}

// Meta's published Llama 3.1 rope scaling (apply_scaling in llama/model.py), written out here:
// with wavelength w = 2 pi / freq, high frequencies (w < L / high) are kept, low ones
// (w > L / low) divided by `factor`, and in between interpolated linearly in L / w. The factor
// GGUF stores (rope_freqs.weight) is freq / scaled_freq.
static std::vector<float> published_llama3_factors(int head_dim, double theta, double factor, double low,
                                                   double high, double old_context) {
  std::vector<float> out;
  for (int i = 0; i < head_dim / 2; ++i) {
    const double freq = 1.0 / std::pow(theta, 2.0 * i / head_dim);
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double scaled;
    if (wavelen < old_context / high) {
      scaled = freq;
    } else if (wavelen > old_context / low) {
      scaled = freq / factor;
    } else {
      const double smooth = (old_context / wavelen - low) / (high - low);
      scaled = (1.0 - smooth) * freq / factor + smooth * freq;
    }
    out.push_back(static_cast<float>(freq / scaled));
  }
  return out;
}

TEST(Forward, Llama3FrequencyFactors) {
  // head_dim 16, theta 5e5, Llama 3.1's factor 8, low 1, high 4, 8192: wavelengths 2 pi 5e5^(i/8)
  // are 6.3, 32, 167, 863 (kept), 4443 (between 2048 and 8192: smooth = (8192/4443 - 1) / 3,
  // factor 1 / ((1 - smooth) / 8 + smooth) = 2.69453), then 2.3e4, 1.2e5, 6.1e5 (divided by 8).
  const std::vector<float> by_hand = {1, 1, 1, 1, 2.6945297f, 8, 8, 8};
  const auto published = published_llama3_factors(16, 500000.0, 8.0, 1.0, 4.0, 8192.0);
  const auto got = llama3_rope_freq_factors(16, 500000.0f, 8.0f, 1.0f, 4.0f, 8192);
  ASSERT_EQ(got.size(), by_hand.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(published[i], by_hand[i], 1e-6f * by_hand[i]) << i;
    EXPECT_NEAR(got[i], published[i], 1e-6f * published[i]) << i;
  }
  // A short original context (16) so most pairs are scaled within the test's 19 positions and
  // a forward pass that ignored the factors would miss the reference by far: factor 8 for all
  // pairs but the first (wavelength 2 pi, between 4 and 16: 1.73594).
  auto c = small_config();
  c.head_dim = 16;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.rope_theta = 10000.0f;
  c.rope_freq_factors = published_llama3_factors(16, 10000.0, 8.0, 1.0, 4.0, 16.0);
  EXPECT_NEAR(c.rope_freq_factors[0], 1.7359411f, 1e-6f);
  const auto library = llama3_rope_freq_factors(16, 10000.0f, 8.0f, 1.0f, 4.0f, 16);
  for (size_t i = 0; i < library.size(); ++i) EXPECT_NEAR(library[i], c.rope_freq_factors[i], 1e-6f) << i;
  const auto t = random_model(c, 5);
  EXPECT_LT(max_relative_error(t.model, some_tokens(19, c.vocab_size), 6, 2), 2e-5);
}

TEST(Forward, RejectsBadInput) {
  auto c = small_config();
  const auto t = random_model(c, 6);
  turbokv::ThreadPool pool(1);
  Forward forward(t.model, pool, 4);
  std::vector<std::unique_ptr<turbokv::DenseKVCache>> caches;
  std::vector<turbokv::KVCache*> ptrs;
  for (int l = 0; l < c.n_layers; ++l) {
    caches.push_back(std::make_unique<turbokv::DenseKVCache>(c.n_kv_heads, c.head_dim));
    ptrs.push_back(caches.back().get());
  }
  const std::vector<int> bad{1, c.vocab_size};
  EXPECT_THROW(forward.run(bad, ptrs), turbokv::Error);
  EXPECT_EQ(caches[0]->size(), 0u);  // rejected before anything was appended
  const std::vector<int> good{1, 2};
  EXPECT_THROW(forward.run(good, std::span<turbokv::KVCache* const>(ptrs.data(), 1)), turbokv::Error);
  turbokv::DenseKVCache wrong(c.n_kv_heads, c.head_dim * 2);
  std::vector<turbokv::KVCache*> wrong_ptrs{ptrs[0], &wrong};
  EXPECT_THROW(forward.run(good, wrong_ptrs), turbokv::Error);
  EXPECT_THROW(Forward(t.model, pool, 0), turbokv::Error);
  // A prompt runs in chunks of max_chunk (4) tokens, but all of it is checked before the first
  // chunk touches a cache: a bad token in a later chunk leaves the caches empty.
  const std::vector<int> bad_in_third_chunk{1, 2, 3, 4, 5, 6, 7, 8, 9, -1};
  EXPECT_THROW(forward.run(bad_in_third_chunk, ptrs), turbokv::Error);
  std::vector<float> logits(bad_in_third_chunk.size() * static_cast<size_t>(c.vocab_size));
  EXPECT_THROW(forward.run_all_logits(bad_in_third_chunk, ptrs, logits), turbokv::Error);
  for (const auto& cache : caches) EXPECT_EQ(cache->size(), 0u);
  EXPECT_THROW(forward.run(std::vector<int>{}, ptrs), turbokv::Error);
  const std::vector<int> ten{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(forward.run(ten, ptrs).size(), static_cast<size_t>(c.vocab_size));
  for (const auto& cache : caches) EXPECT_EQ(cache->size(), ten.size());
}
