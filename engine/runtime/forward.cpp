#include "engine/runtime/forward.hpp"

#include <fmt/format.h>

#include <cmath>

#include "engine/runtime/forward_ops.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {

using ops::rmsnorm;
using ops::silu;
using ops::to_head_major;
using ops::to_token_major;

Forward::Forward(const Model& model, ThreadPool& pool, int max_chunk)
    : model_(model), pool_(pool), max_chunk_(max_chunk), rope_(model.config) {
  const ModelConfig& c = model_.config;
  c.validate();
  if (max_chunk_ < 1 || max_chunk_ > 4096) throw Error(fmt::format("Forward: max_chunk {} outside [1, 4096]", max_chunk_));
  const size_t m = static_cast<size_t>(max_chunk_);
  x_.resize(m * c.dim);
  xb_.resize(m * std::max(c.dim, c.q_dim()));
  q_.resize(m * c.q_dim());
  k_.resize(m * c.kv_dim());
  v_.resize(m * c.kv_dim());
  att_.resize(m * c.q_dim());
  hb_.resize(m * c.hidden_dim);
  hb2_.resize(m * c.hidden_dim);
  q_heads_.resize(m * c.q_dim());
  att_heads_.resize(m * c.q_dim());
  k_heads_.resize(m * c.kv_dim());
  v_heads_.resize(m * c.kv_dim());
  logits_.resize(static_cast<size_t>(c.vocab_size));
}

void Forward::project(const WeightMatrix& w, const float* in, int n, float* out) const {
  if (n == 1) {
    matvec(w, in, out, pool_);
  } else {
    matmul(w, in, n, out, pool_);
  }
}

void Forward::check_caches(std::span<KVCache* const> caches) const {
  const ModelConfig& c = model_.config;
  if (static_cast<int>(caches.size()) != c.n_layers) {
    throw Error(fmt::format("Forward: {} caches for {} layers", caches.size(), c.n_layers));
  }
  for (size_t l = 0; l < caches.size(); ++l) {
    const KVCache* cache = caches[l];
    if (cache == nullptr) throw Error(fmt::format("Forward: layer {} has no cache", l));
    if (cache->kv_heads() != c.n_kv_heads || cache->head_dim() != c.head_dim) {
      throw Error(fmt::format("Forward: layer {} cache is {} heads x {}, the model needs {} x {}", l,
                              cache->kv_heads(), cache->head_dim(), c.n_kv_heads, c.head_dim));
    }
    if (cache->size() != caches[0]->size()) {
      throw Error(fmt::format("Forward: layer {} cache holds {} tokens, layer 0 holds {}", l, cache->size(),
                              caches[0]->size()));
    }
  }
}

void Forward::run_chunk(const int* tokens, int n, size_t pos, std::span<KVCache* const> caches) {
  const ModelConfig& c = model_.config;
  const int dim = c.dim, hd = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.hidden_dim;
  for (int t = 0; t < n; ++t) {
    dequantize_row(model_.token_embedding, tokens[t], x_.data() + static_cast<size_t>(t) * dim);
  }
  AttentionOptions attention_options;
  attention_options.threads = pool_.size();

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model_.layers[static_cast<size_t>(l)];
    // Attention block.
    for (int t = 0; t < n; ++t) {
      rmsnorm(xb_.data() + static_cast<size_t>(t) * dim, x_.data() + static_cast<size_t>(t) * dim,
              w.attn_norm.data(), dim, c.norm_eps);
    }
    project(w.wq, xb_.data(), n, q_.data());
    project(w.wk, xb_.data(), n, k_.data());
    project(w.wv, xb_.data(), n, v_.data());
    for (int t = 0; t < n; ++t) {
      float* q = q_.data() + static_cast<size_t>(t) * q_dim;
      float* k = k_.data() + static_cast<size_t>(t) * kv_dim;
      float* v = v_.data() + static_cast<size_t>(t) * kv_dim;
      if (c.qkv_bias) {
        for (int i = 0; i < q_dim; ++i) q[i] += w.bq[static_cast<size_t>(i)];
        for (int i = 0; i < kv_dim; ++i) k[i] += w.bk[static_cast<size_t>(i)];
        for (int i = 0; i < kv_dim; ++i) v[i] += w.bv[static_cast<size_t>(i)];
      }
      if (c.qk_norm) {
        for (int h = 0; h < c.n_heads; ++h) rmsnorm(q + h * hd, q + h * hd, w.q_norm.data(), hd, c.norm_eps);
        for (int h = 0; h < c.n_kv_heads; ++h) rmsnorm(k + h * hd, k + h * hd, w.k_norm.data(), hd, c.norm_eps);
      }
      rope_.apply(q, c.n_heads, pos + static_cast<size_t>(t));
      rope_.apply(k, c.n_kv_heads, pos + static_cast<size_t>(t));
    }
    const size_t kv_count = static_cast<size_t>(n) * kv_dim;
    const size_t q_count = static_cast<size_t>(n) * q_dim;
    to_head_major(k_.data(), n, c.n_kv_heads, hd, k_heads_.data());
    to_head_major(v_.data(), n, c.n_kv_heads, hd, v_heads_.data());
    to_head_major(q_.data(), n, c.n_heads, hd, q_heads_.data());
    KVCache& cache = *caches[static_cast<size_t>(l)];
    cache.append(std::span<const float>(k_heads_.data(), kv_count), std::span<const float>(v_heads_.data(), kv_count),
                 static_cast<size_t>(n));
    turbokv::attend(std::span<const float>(q_heads_.data(), q_count), c.n_heads, n, cache,
                    std::span<float>(att_heads_.data(), q_count), attention_options);
    to_token_major(att_heads_.data(), n, c.n_heads, hd, att_.data());
    project(w.wo, att_.data(), n, xb_.data());
    for (size_t i = 0; i < static_cast<size_t>(n) * dim; ++i) x_[i] += xb_[i];

    // SwiGLU feed-forward block.
    for (int t = 0; t < n; ++t) {
      rmsnorm(xb_.data() + static_cast<size_t>(t) * dim, x_.data() + static_cast<size_t>(t) * dim,
              w.ffn_norm.data(), dim, c.norm_eps);
    }
    project(w.w_gate, xb_.data(), n, hb_.data());
    project(w.w_up, xb_.data(), n, hb2_.data());
    for (size_t i = 0; i < static_cast<size_t>(n) * hidden; ++i) hb_[i] = silu(hb_[i]) * hb2_[i];
    project(w.w_down, hb_.data(), n, xb_.data());
    for (size_t i = 0; i < static_cast<size_t>(n) * dim; ++i) x_[i] += xb_[i];
  }
}

void Forward::compute_logits(int first_row, int n, float* logits) {
  const ModelConfig& c = model_.config;
  for (int t = 0; t < n; ++t) {
    rmsnorm(xb_.data() + static_cast<size_t>(t) * c.dim, x_.data() + static_cast<size_t>(first_row + t) * c.dim,
            model_.final_norm.data(), c.dim, c.norm_eps);
  }
  project(model_.output, xb_.data(), n, logits);
}

std::span<const float> Forward::run(std::span<const int> tokens, std::span<KVCache* const> caches) {
  if (tokens.empty()) throw Error("Forward::run: no tokens");
  check_caches(caches);
  for (const int t : tokens) {
    if (t < 0 || t >= model_.config.vocab_size) {
      throw Error(fmt::format("Forward: token id {} outside vocabulary of {}", t, model_.config.vocab_size));
    }
  }
  size_t pos = caches[0]->size();
  int last_n = 0;
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(max_chunk_)) {
    last_n = static_cast<int>(std::min(tokens.size() - begin, static_cast<size_t>(max_chunk_)));
    run_chunk(tokens.data() + begin, last_n, pos, caches);
    pos += static_cast<size_t>(last_n);
  }
  compute_logits(last_n - 1, 1, logits_.data());
  return logits_;
}

void Forward::run_all_logits(std::span<const int> tokens, std::span<KVCache* const> caches,
                             std::span<float> all_logits) {
  const size_t vocab = static_cast<size_t>(model_.config.vocab_size);
  if (tokens.empty()) throw Error("Forward::run_all_logits: no tokens");
  if (all_logits.size() != tokens.size() * vocab) {
    throw Error(fmt::format("Forward::run_all_logits: logits buffer holds {} floats, need {}", all_logits.size(),
                            tokens.size() * vocab));
  }
  check_caches(caches);
  for (const int t : tokens) {
    if (t < 0 || t >= model_.config.vocab_size) {
      throw Error(fmt::format("Forward: token id {} outside vocabulary of {}", t, model_.config.vocab_size));
    }
  }
  size_t pos = caches[0]->size();
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(max_chunk_)) {
    const int n = static_cast<int>(std::min(tokens.size() - begin, static_cast<size_t>(max_chunk_)));
    run_chunk(tokens.data() + begin, n, pos, caches);
    compute_logits(0, n, all_logits.data() + begin * vocab);
    pos += static_cast<size_t>(n);
  }
}

}  // namespace turbokv::engine
