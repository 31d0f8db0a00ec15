// The textbook forward pass (float64, whole-sequence attention with explicit arrays, no cache)
// that the engine's Forward is tested against, and the comparison itself. Shared by
// test_forward.cpp (random float models) and test_quant_forward.cpp (quantized GGUF models
// against their dequantized weights).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "engine/runtime/forward.hpp"
#include "engine/model/model.hpp"
#include "turbokv/dense_cache.hpp"

namespace turbokv::test {

using engine::LayerWeights;
using engine::Model;
using engine::ModelConfig;
using engine::WeightMatrix;

using Vec = std::vector<double>;

inline Vec matvec_ref(const WeightMatrix& w, const Vec& x) {
  EXPECT_EQ(w.type, engine::GgmlType::F32) << "the reference reads float weights";
  const auto* data = static_cast<const float*>(w.data);
  Vec y(static_cast<size_t>(w.rows), 0.0);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t k = 0; k < w.cols; ++k) y[static_cast<size_t>(r)] += data[r * w.cols + k] * x[static_cast<size_t>(k)];
  }
  return y;
}

inline void rmsnorm_ref(double* x, const std::vector<float>& w, size_t n, double eps) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i) x[i] = x[i] * s * w[i];
}

// local: a sliding-window layer (Gemma 3's own base, unscaled, when rope_theta_local is set).
// Only the first rotary_dims() coordinates turn (Phi-4-mini's partial rotary), times
// rope_attn_factor (LongRoPE's magnitude), each pair's frequency divided by its factor (Llama 3's
// rope_freqs, or the LongRoPE set chosen).
inline void rope_ref(double* head, const ModelConfig& c, size_t pos, bool local = false) {
  const int rotary = c.rotary_dims(), half = rotary / 2;
  const bool own_base = local && c.rope_theta_local > 0.0f;
  for (int i = 0; i < half; ++i) {
    double freq = std::pow(static_cast<double>(own_base ? c.rope_theta_local : c.rope_theta), -2.0 * i / rotary);
    if (!own_base && !c.rope_freq_factors.empty()) freq /= c.rope_freq_factors[static_cast<size_t>(i)];
    const double a = static_cast<double>(pos) * freq, m = c.rope_attn_factor;
    const int p0 = c.rope_neox ? i : 2 * i;
    const int p1 = c.rope_neox ? i + half : 2 * i + 1;
    const double v0 = head[p0], v1 = head[p1];
    head[p0] = m * (v0 * std::cos(a) - v1 * std::sin(a));
    head[p1] = m * (v0 * std::sin(a) + v1 * std::cos(a));
  }
}

inline double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

inline Vec swiglu_ref(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down, const Vec& h) {
  Vec g = matvec_ref(gate, h);
  const Vec u = matvec_ref(up, h);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return matvec_ref(down, g);
}

// Block e of a stack of float matrices with `rows` rows each, cut here independently of the engine.
inline WeightMatrix expert_ref(const WeightMatrix& stacked, int64_t rows, int e) {
  return WeightMatrix{stacked.type, rows, stacked.cols, static_cast<const float*>(stacked.data) + e * rows * stacked.cols};
}

// The mixture of experts as Qwen3-MoE (Hugging Face's Qwen3MoeSparseMoeBlock with
// norm_topk_prob) defines it: softmax over all router logits, the top k, their probabilities
// renormalised to sum 1, the weighted sum of those experts' SwiGLU outputs. Equal logits: the
// lower expert first.
inline Vec moe_ref(const ModelConfig& c, const LayerWeights& w, const Vec& h) {
  const Vec logits = matvec_ref(w.router, h);
  double mx = -1e300;
  for (const double l : logits) mx = std::max(mx, l);
  Vec p(logits.size());
  double total = 0;
  for (size_t e = 0; e < p.size(); ++e) total += (p[e] = std::exp(logits[e] - mx));
  for (double& pe : p) pe /= total;
  std::vector<int> order(p.size());
  for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int>(e);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
  double chosen_total = 0;
  for (int r = 0; r < c.n_experts_used; ++r) chosen_total += p[static_cast<size_t>(order[static_cast<size_t>(r)])];
  Vec y(static_cast<size_t>(c.dim), 0.0);
  for (int r = 0; r < c.n_experts_used; ++r) {
    const int e = order[static_cast<size_t>(r)];
    const Vec o = swiglu_ref(expert_ref(w.w_gate, c.hidden_dim, e), expert_ref(w.w_up, c.hidden_dim, e),
                             expert_ref(w.w_down, c.dim, e), h);
    for (size_t i = 0; i < y.size(); ++i) y[i] += p[static_cast<size_t>(e)] / chosen_total * o[i];
  }
  return y;
}

// Logits of every position of `tokens`, by the textbook equations, with each architecture's
// variations (Gemma's embedding scale, post-norms, GeGLU, q.k scale, soft-caps and sliding
// windows of config.layer_slides layers; OLMo 2's missing pre-norms and whole-projection q/k
// norms; Granite's multipliers; Qwen3-MoE's routed experts).
inline std::vector<Vec> reference_logits(const Model& m, const std::vector<int>& tokens) {
  const ModelConfig& c = m.config;
  const size_t T = tokens.size(), hd = static_cast<size_t>(c.head_dim);
  std::vector<Vec> x(T);
  for (size_t t = 0; t < T; ++t) {
    const auto* e = static_cast<const float*>(m.token_embedding.data) + static_cast<size_t>(tokens[t]) * c.dim;
    x[t].assign(e, e + c.dim);
    for (double& v : x[t]) v *= c.embedding_scale;
  }
  const double scale = c.attention_scale > 0.0f ? c.attention_scale : 1.0 / std::sqrt(static_cast<double>(hd));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = m.layers[static_cast<size_t>(l)];
    const bool slides = c.layer_slides(l);
    std::vector<Vec> q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      Vec h = x[t];
      if (c.pre_norms) rmsnorm_ref(h.data(), w.attn_norm, h.size(), c.norm_eps);
      q[t] = matvec_ref(w.wq, h);
      k[t] = matvec_ref(w.wk, h);
      v[t] = matvec_ref(w.wv, h);
      for (size_t i = 0; i < w.bq.size(); ++i) q[t][i] += w.bq[i];
      for (size_t i = 0; i < w.bk.size(); ++i) k[t][i] += w.bk[i];
      for (size_t i = 0; i < w.bv.size(); ++i) v[t][i] += w.bv[i];
      if (c.qk_norm_whole) {  // OLMo 2: one norm over all of q and all of k
        rmsnorm_ref(q[t].data(), w.q_norm, q[t].size(), c.norm_eps);
        rmsnorm_ref(k[t].data(), w.k_norm, k[t].size(), c.norm_eps);
      }
      for (int h2 = 0; h2 < c.n_heads; ++h2) {
        if (c.qk_norm && !c.qk_norm_whole) rmsnorm_ref(&q[t][h2 * hd], w.q_norm, hd, c.norm_eps);
        rope_ref(&q[t][h2 * hd], c, t, slides);
      }
      for (int h2 = 0; h2 < c.n_kv_heads; ++h2) {
        if (c.qk_norm && !c.qk_norm_whole) rmsnorm_ref(&k[t][h2 * hd], w.k_norm, hd, c.norm_eps);
        rope_ref(&k[t][h2 * hd], c, t, slides);
      }
    }
    const int group = c.n_heads / c.n_kv_heads;
    for (size_t t = 0; t < T; ++t) {
      Vec att(static_cast<size_t>(c.q_dim()), 0.0);
      for (int h2 = 0; h2 < c.n_heads; ++h2) {
        const size_t kvh = static_cast<size_t>(h2 / group);
        // A sliding-window layer's query at t sees t - window + 1 .. t.
        const size_t from = slides && t + 1 > static_cast<size_t>(c.sliding_window) ? t + 1 - c.sliding_window : 0;
        Vec score(t + 1, 0.0);
        double mx = -1e300;
        for (size_t s = from; s <= t; ++s) {
          double dot = 0;
          for (size_t i = 0; i < hd; ++i) dot += q[t][h2 * hd + i] * k[s][kvh * hd + i];
          score[s] = dot * scale;
          if (c.attn_softcap > 0.0f) score[s] = c.attn_softcap * std::tanh(score[s] / c.attn_softcap);
          mx = std::max(mx, score[s]);
        }
        double total = 0;
        for (size_t s = from; s <= t; ++s) total += (score[s] = std::exp(score[s] - mx));
        for (size_t s = from; s <= t; ++s) {
          for (size_t i = 0; i < hd; ++i) att[h2 * hd + i] += score[s] / total * v[s][kvh * hd + i];
        }
      }
      Vec o = matvec_ref(w.wo, att);
      if (c.post_norms) rmsnorm_ref(o.data(), w.attn_post_norm, o.size(), c.norm_eps);
      for (size_t i = 0; i < o.size(); ++i) x[t][i] += c.residual_scale * o[i];
      Vec h = x[t];
      if (c.pre_norms) rmsnorm_ref(h.data(), w.ffn_norm, h.size(), c.norm_eps);
      Vec d;
      if (c.n_experts > 0) {
        d = moe_ref(c, w, h);
      } else {
        Vec g = matvec_ref(w.w_gate, h);
        const Vec u = matvec_ref(w.w_up, h);
        for (size_t i = 0; i < g.size(); ++i) {
          g[i] = (c.gelu_ffn ? gelu_tanh_ref(g[i]) : g[i] / (1.0 + std::exp(-g[i]))) * u[i];
        }
        d = matvec_ref(w.w_down, g);
      }
      if (c.post_norms) rmsnorm_ref(d.data(), w.ffn_post_norm, d.size(), c.norm_eps);
      for (size_t i = 0; i < d.size(); ++i) x[t][i] += c.residual_scale * d[i];
    }
  }
  std::vector<Vec> logits(T);
  for (size_t t = 0; t < T; ++t) {
    Vec h = x[t];
    rmsnorm_ref(h.data(), m.final_norm, h.size(), c.norm_eps);
    logits[t] = matvec_ref(m.output, h);
    for (double& v : logits[t]) v /= c.logit_scale;
    if (c.final_softcap > 0.0f) {
      for (double& v : logits[t]) v = c.final_softcap * std::tanh(v / c.final_softcap);
    }
  }
  return logits;
}

// Runs Forward on `m` over `tokens` (the first half at once through run_all_logits, prefilled in
// chunks of `chunk`, the rest one token at a time) with f32 dense caches; returns the largest
// |difference| to the reference logits of `reference` (float weights; m itself by default)
// relative to the logits' scale.
inline double max_relative_error(const Model& m, const std::vector<int>& tokens, int chunk, int threads,
                                 const Model* reference = nullptr) {
  const auto ref = reference_logits(reference != nullptr ? *reference : m, tokens);
  turbokv::ThreadPool pool(threads);
  engine::Forward forward(m, pool, chunk);
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

}  // namespace turbokv::test
