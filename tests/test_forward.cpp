// The forward pass against a naive, literal transcription of the model equations (float64,
// whole-sequence attention with explicit arrays, no cache), on small random models covering
// each architecture feature: GQA, separate classifier, QKV bias (qwen2), per-head q/k norm
// and NeoX RoPE (qwen3), Llama 3 frequency factors, and head_dim != dim / n_heads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/forward.hpp"
#include "engine/model.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"

using namespace turbokv::engine;

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

using Vec = std::vector<double>;

Vec matvec_ref(const WeightMatrix& w, const Vec& x) {
  const auto* data = static_cast<const float*>(w.data);
  Vec y(static_cast<size_t>(w.rows), 0.0);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t k = 0; k < w.cols; ++k) y[static_cast<size_t>(r)] += data[r * w.cols + k] * x[static_cast<size_t>(k)];
  }
  return y;
}

void rmsnorm_ref(double* x, const std::vector<float>& w, size_t n, double eps) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i) x[i] = x[i] * s * w[i];
}

void rope_ref(double* head, const ModelConfig& c, size_t pos) {
  const int half = c.head_dim / 2;
  for (int i = 0; i < half; ++i) {
    double freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / c.head_dim);
    if (!c.rope_freq_factors.empty()) freq /= c.rope_freq_factors[static_cast<size_t>(i)];
    const double a = static_cast<double>(pos) * freq;
    const int p0 = c.rope_neox ? i : 2 * i;
    const int p1 = c.rope_neox ? i + half : 2 * i + 1;
    const double v0 = head[p0], v1 = head[p1];
    head[p0] = v0 * std::cos(a) - v1 * std::sin(a);
    head[p1] = v0 * std::sin(a) + v1 * std::cos(a);
  }
}

// Logits of every position of `tokens`, by the textbook equations.
std::vector<Vec> reference_logits(const Model& m, const std::vector<int>& tokens) {
  const ModelConfig& c = m.config;
  const size_t T = tokens.size(), hd = static_cast<size_t>(c.head_dim);
  std::vector<Vec> x(T);
  for (size_t t = 0; t < T; ++t) {
    const auto* e = static_cast<const float*>(m.token_embedding.data) + static_cast<size_t>(tokens[t]) * c.dim;
    x[t].assign(e, e + c.dim);
  }
  for (const LayerWeights& w : m.layers) {
    std::vector<Vec> q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      Vec h = x[t];
      rmsnorm_ref(h.data(), w.attn_norm, h.size(), c.norm_eps);
      q[t] = matvec_ref(w.wq, h);
      k[t] = matvec_ref(w.wk, h);
      v[t] = matvec_ref(w.wv, h);
      for (size_t i = 0; i < w.bq.size(); ++i) q[t][i] += w.bq[i];
      for (size_t i = 0; i < w.bk.size(); ++i) k[t][i] += w.bk[i];
      for (size_t i = 0; i < w.bv.size(); ++i) v[t][i] += w.bv[i];
      for (int h2 = 0; h2 < c.n_heads; ++h2) {
        if (c.qk_norm) rmsnorm_ref(&q[t][h2 * hd], w.q_norm, hd, c.norm_eps);
        rope_ref(&q[t][h2 * hd], c, t);
      }
      for (int h2 = 0; h2 < c.n_kv_heads; ++h2) {
        if (c.qk_norm) rmsnorm_ref(&k[t][h2 * hd], w.k_norm, hd, c.norm_eps);
        rope_ref(&k[t][h2 * hd], c, t);
      }
    }
    const int group = c.n_heads / c.n_kv_heads;
    for (size_t t = 0; t < T; ++t) {
      Vec att(static_cast<size_t>(c.q_dim()), 0.0);
      for (int h2 = 0; h2 < c.n_heads; ++h2) {
        const size_t kvh = static_cast<size_t>(h2 / group);
        Vec score(t + 1);
        double mx = -1e300;
        for (size_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (size_t i = 0; i < hd; ++i) dot += q[t][h2 * hd + i] * k[s][kvh * hd + i];
          score[s] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, score[s]);
        }
        double total = 0;
        for (auto& sc : score) total += (sc = std::exp(sc - mx));
        for (size_t s = 0; s <= t; ++s) {
          for (size_t i = 0; i < hd; ++i) att[h2 * hd + i] += score[s] / total * v[s][kvh * hd + i];
        }
      }
      const Vec o = matvec_ref(w.wo, att);
      for (size_t i = 0; i < o.size(); ++i) x[t][i] += o[i];
      Vec h = x[t];
      rmsnorm_ref(h.data(), w.ffn_norm, h.size(), c.norm_eps);
      Vec g = matvec_ref(w.w_gate, h);
      const Vec u = matvec_ref(w.w_up, h);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const Vec d = matvec_ref(w.w_down, g);
      for (size_t i = 0; i < d.size(); ++i) x[t][i] += d[i];
    }
  }
  std::vector<Vec> logits(T);
  for (size_t t = 0; t < T; ++t) {
    Vec h = x[t];
    rmsnorm_ref(h.data(), m.final_norm, h.size(), c.norm_eps);
    logits[t] = matvec_ref(m.output, h);
  }
  return logits;
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

// Runs Forward over `tokens` (prefill in chunks of `chunk`, or all via run_all_logits) with f32
// dense caches; returns the largest |difference| to the reference relative to the logits' scale.
double max_relative_error(const Model& m, const std::vector<int>& tokens, int chunk, int threads) {
  const auto ref = reference_logits(m, tokens);
  turbokv::ThreadPool pool(threads);
  Forward forward(m, pool, chunk);
  std::vector<std::unique_ptr<turbokv::DenseKVCache>> caches;
  std::vector<turbokv::KVCache*> ptrs;
  for (int l = 0; l < m.config.n_layers; ++l) {
    caches.push_back(std::make_unique<turbokv::DenseKVCache>(m.config.n_kv_heads, m.config.head_dim,
                                                            turbokv::DenseDtype::f32));
    ptrs.push_back(caches.back().get());
  }
  const size_t vocab = static_cast<size_t>(m.config.vocab_size);
  // First half of the sequence at once with every position's logits, the rest one by one.
  const size_t half = tokens.size() / 2;
  std::vector<float> all(half * vocab);
  forward.run_all_logits(std::span<const int>(tokens.data(), half), ptrs, all);
  double worst = 0, scale = 0;
  auto compare = [&](const float* got, const Vec& want) {
    for (size_t i = 0; i < vocab; ++i) {
      worst = std::max(worst, std::abs(got[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
  };
  for (size_t t = 0; t < half; ++t) compare(all.data() + t * vocab, ref[t]);
  for (size_t t = half; t < tokens.size(); ++t) {
    const auto logits = forward.run(std::span<const int>(&tokens[t], 1), ptrs);
    compare(logits.data(), ref[t]);
  }
  EXPECT_EQ(caches[0]->size(), tokens.size());
  return worst / scale;
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

TEST(Forward, Llama3FrequencyFactors) {
  auto c = small_config();
  c.head_dim = 16;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.rope_theta = 500000.0f;
  c.rope_freq_factors = llama3_rope_freq_factors(16, 500000.0f, 8.0f, 1.0f, 4.0f, 8192);
  // The factors span 1 (high frequencies) to 8 (low frequencies), smoothly in between.
  EXPECT_FLOAT_EQ(c.rope_freq_factors.front(), 1.0f);
  EXPECT_FLOAT_EQ(c.rope_freq_factors.back(), 8.0f);
  int smoothed = 0;
  for (const float f : c.rope_freq_factors) smoothed += f > 1.0f && f < 8.0f;
  EXPECT_GE(smoothed, 1);
  // A short original context (16) so most pairs are scaled within the test's 19 positions and
  // a forward pass that ignored the factors would miss the reference by far.
  c.rope_freq_factors = llama3_rope_freq_factors(16, 10000.0f, 8.0f, 1.0f, 4.0f, 16);
  c.rope_theta = 10000.0f;
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
}
