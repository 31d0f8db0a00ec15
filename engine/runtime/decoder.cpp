#include "engine/runtime/decoder.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "turbokv/attention.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {

Decoder::Decoder(const Model& model, ThreadPool& pool, WeightProducts products, int attention_threads)
    : model_(model), pool_(pool), products_(products), attention_threads_(attention_threads),
      rope_(model.config), rope_local_(model.config, true), experts_(model.config, products) {
  model_.config.validate();
  if (attention_threads_ < 1) throw Error(fmt::format("Decoder: {} attention threads", attention_threads_));
}

void Decoder::check(std::span<const int> tokens, std::span<KVCache* const> caches, std::string_view who) const {
  const ModelConfig& c = model_.config;
  if (tokens.empty()) throw Error(fmt::format("{}: no tokens", who));
  for (const int t : tokens) {
    if (t < 0 || t >= c.vocab_size) throw Error(fmt::format("{}: token id {} outside vocabulary of {}", who, t, c.vocab_size));
  }
  if (static_cast<int>(caches.size()) != c.n_layers) {
    throw Error(fmt::format("{}: {} caches for {} layers", who, caches.size(), c.n_layers));
  }
  for (size_t l = 0; l < caches.size(); ++l) {
    const KVCache* cache = caches[l];
    if (cache == nullptr) throw Error(fmt::format("{}: layer {} has no cache", who, l));
    if (cache->kv_heads() != c.n_kv_heads || cache->head_dim() != c.head_dim) {
      throw Error(fmt::format("{}: layer {} cache is {} heads x {}, the model needs {} x {}", who, l, cache->kv_heads(),
                              cache->head_dim(), c.n_kv_heads, c.head_dim));
    }
    if (cache->size() != caches[0]->size()) {
      throw Error(fmt::format("{}: layer {} cache holds {} tokens, layer 0 holds {}", who, l, cache->size(),
                              caches[0]->size()));
    }
  }
}

void Decoder::reserve(size_t rows) {
  if (rows <= capacity_) return;
  const ModelConfig& c = model_.config;
  const size_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.hidden_dim;
  x_.resize(rows * dim);
  xb_.resize(rows * std::max(dim, q_dim));
  q_.resize(rows * q_dim);
  k_.resize(rows * kv_dim);
  v_.resize(rows * kv_dim);
  att_.resize(rows * q_dim);
  hb_.resize(rows * hidden);
  hb2_.resize(rows * hidden);
  q_heads_.resize(rows * q_dim);
  att_heads_.resize(rows * q_dim);
  k_heads_.resize(rows * kv_dim);
  v_heads_.resize(rows * kv_dim);
  capacity_ = rows;
}

void Decoder::run(std::span<const TokenRun> runs) {
  rows_ = 0;
  for (const TokenRun& run : runs) rows_ += run.tokens.size();
  reserve(rows_);
  embed(runs);
  for (int l = 0; l < model_.config.n_layers; ++l) layer(model_.layers[static_cast<size_t>(l)], l, runs);
}

void Decoder::embed(std::span<const TokenRun> runs) {
  const size_t dim = model_.config.dim;
  size_t r = 0;
  for (const TokenRun& run : runs) {
    for (const int token : run.tokens) dequantize_row(model_.token_embedding, token, x_.data() + r++ * dim);
  }
  const float scale = model_.config.embedding_scale;
  if (scale != 1.0f) {
    for (size_t i = 0; i < rows_ * dim; ++i) x_[i] *= scale;
  }
}

// One transformer layer over all rows: x += attention(norm(x)); x += feed_forward(norm(x)),
// each block's output normed before its add where the model has post-norms (Gemma, OLMo 2,
// which has no pre-norms).
void Decoder::layer(const LayerWeights& w, int l, std::span<const TokenRun> runs) {
  const bool post_norms = model_.config.post_norms;
  block_input(w.attn_norm);
  attention(w, l, runs);  // xb_ -> xb_
  if (post_norms) norm_rows(w.attn_post_norm, xb_.data(), rows_, xb_.data());
  add_residual();
  block_input(w.ffn_norm);
  feed_forward(w);  // xb_ -> xb_
  if (post_norms) norm_rows(w.ffn_post_norm, xb_.data(), rows_, xb_.data());
  add_residual();
}

void Decoder::attention(const LayerWeights& w, int l, std::span<const TokenRun> runs) {
  const ModelConfig& c = model_.config;
  const size_t q_dim = c.q_dim(), kv_dim = c.kv_dim();
  project(w.wq, xb_.data(), rows_, q_.data());
  project(w.wk, xb_.data(), rows_, k_.data());
  project(w.wv, xb_.data(), rows_, v_.data());
  const ops::Rope& rope = c.layer_slides(l) ? rope_local_ : rope_;
  size_t r = 0;
  for (const TokenRun& run : runs) {
    for (size_t i = 0; i < run.tokens.size(); ++i, ++r) {
      finish_qk(w, rope, q_.data() + r * q_dim, k_.data() + r * kv_dim, v_.data() + r * kv_dim, run.position + i);
    }
  }
  // Attention per run, in order (a sequence's later run sees its earlier one's tokens).
  r = 0;
  for (const TokenRun& run : runs) {
    attend_run(run, l, r);
    r += run.tokens.size();
  }
  project(w.wo, att_.data(), rows_, xb_.data());
}

// One row's q, k, v from their projections to what attention takes: bias, QK norm, RoPE.
void Decoder::finish_qk(const LayerWeights& w, const ops::Rope& rope, float* q, float* k, float* v,
                        size_t position) const {
  const ModelConfig& c = model_.config;
  const int hd = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  if (c.qkv_bias) {
    for (int j = 0; j < q_dim; ++j) q[j] += w.bq[static_cast<size_t>(j)];
    for (int j = 0; j < kv_dim; ++j) k[j] += w.bk[static_cast<size_t>(j)];
    for (int j = 0; j < kv_dim; ++j) v[j] += w.bv[static_cast<size_t>(j)];
  }
  if (c.qk_norm && c.qk_norm_whole) {
    ops::rmsnorm(q, q, w.q_norm.data(), q_dim, c.norm_eps);
    ops::rmsnorm(k, k, w.k_norm.data(), kv_dim, c.norm_eps);
  } else if (c.qk_norm) {
    for (int h = 0; h < c.n_heads; ++h) ops::rmsnorm(q + h * hd, q + h * hd, w.q_norm.data(), hd, c.norm_eps);
    for (int h = 0; h < c.n_kv_heads; ++h) ops::rmsnorm(k + h * hd, k + h * hd, w.k_norm.data(), hd, c.norm_eps);
  }
  rope.apply(q, c.n_heads, position);
  rope.apply(k, c.n_kv_heads, position);
}

// Appends the run's keys and values to its layer-l cache and attends its queries over it, from
// rows first_row.. of q_, k_, v_ into the same rows of att_. The model's q.k scale and logit
// soft-cap apply, and a sliding-window layer sees only its window.
void Decoder::attend_run(const TokenRun& run, int l, size_t first_row) {
  const ModelConfig& c = model_.config;
  const int n = static_cast<int>(run.tokens.size()), hd = c.head_dim;
  const size_t q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const size_t kv_count = static_cast<size_t>(n) * kv_dim, q_count = static_cast<size_t>(n) * q_dim;
  ops::to_head_major(k_.data() + first_row * kv_dim, n, c.n_kv_heads, hd, k_heads_.data());
  ops::to_head_major(v_.data() + first_row * kv_dim, n, c.n_kv_heads, hd, v_heads_.data());
  ops::to_head_major(q_.data() + first_row * q_dim, n, c.n_heads, hd, q_heads_.data());
  KVCache& cache = *run.caches[static_cast<size_t>(l)];
  cache.append(std::span<const float>(k_heads_.data(), kv_count), std::span<const float>(v_heads_.data(), kv_count),
               static_cast<size_t>(n));
  AttentionOptions options;
  options.threads = attention_threads_;
  options.scale = c.attention_scale;
  options.softcap = c.attn_softcap;
  options.window = c.layer_window(l);
  attend(std::span<const float>(q_heads_.data(), q_count), c.n_heads, n, cache,
         std::span<float>(att_heads_.data(), q_count), options);
  // A sliding-window layer keeps only what its later queries can see: a ring of pages, the
  // oldest freed as it slides (bit-identical attention; docs/architecture.md, Sliding windows).
  if (options.window > 0) cache.drop_before(sliding_window_keep_from(cache.size(), options.window));
  ops::to_token_major(att_heads_.data(), n, c.n_heads, hd, att_.data() + first_row * q_dim);
}

// SwiGLU: xb = (silu(xb Wgate^T) * (xb Wup^T)) Wdown^T; GeGLU (Gemma) with gelu_tanh for silu;
// or the routed experts' weighted sum.
void Decoder::feed_forward(const LayerWeights& w) {
  if (model_.config.n_experts > 0) return experts_.run(w, xb_.data(), rows_, xb_.data(), pool_);
  const size_t hidden = model_.config.hidden_dim;
  project(w.w_gate, xb_.data(), rows_, hb_.data());
  project(w.w_up, xb_.data(), rows_, hb2_.data());
  if (model_.config.gelu_ffn) {
    for (size_t i = 0; i < rows_ * hidden; ++i) hb_[i] = ops::gelu_tanh(hb_[i]) * hb2_[i];
  } else {
    for (size_t i = 0; i < rows_ * hidden; ++i) hb_[i] = ops::silu(hb_[i]) * hb2_[i];
  }
  project(w.w_down, hb_.data(), rows_, xb_.data());
}

void Decoder::norm_rows(std::span<const float> weight, const float* in, size_t rows, float* out) const {
  const ModelConfig& c = model_.config;
  const size_t dim = c.dim;
  for (size_t r = 0; r < rows; ++r) ops::rmsnorm(out + r * dim, in + r * dim, weight.data(), c.dim, c.norm_eps);
}

// xb = a block's input: RMSNorm(x) by `weight`, or x itself where the model has no pre-norms.
void Decoder::block_input(std::span<const float> weight) {
  if (model_.config.pre_norms) {
    norm_rows(weight, x_.data(), rows_, xb_.data());
  } else {
    std::copy(x_.begin(), x_.begin() + static_cast<ptrdiff_t>(rows_ * static_cast<size_t>(model_.config.dim)), xb_.begin());
  }
}

// x += xb, the block's output scaled first where the model says (Granite).
void Decoder::add_residual() {
  const size_t n = rows_ * static_cast<size_t>(model_.config.dim);
  const float scale = model_.config.residual_scale;
  if (scale != 1.0f) {
    for (size_t i = 0; i < n; ++i) x_[i] += scale * xb_[i];
  } else {
    for (size_t i = 0; i < n; ++i) x_[i] += xb_[i];
  }
}

void Decoder::logits(std::span<const size_t> rows, float* out) {
  const size_t dim = model_.config.dim;
  if (rows.empty()) return;
  if (rows.size() > rows_) throw Error(fmt::format("Decoder: logits of {} rows after a step of {}", rows.size(), rows_));
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= rows_) throw Error(fmt::format("Decoder: logits of row {} after a step of {}", rows[i], rows_));
    norm_rows(model_.final_norm, x_.data() + rows[i] * dim, 1, xb_.data() + i * dim);
  }
  project(model_.output, xb_.data(), rows.size(), out);
  // Granite divides the logits by its logit_scale; Gemma 2 soft-caps them.
  const size_t n = rows.size() * static_cast<size_t>(model_.config.vocab_size);
  const float divide = model_.config.logit_scale, cap = model_.config.final_softcap;
  if (divide != 1.0f) {
    for (size_t i = 0; i < n; ++i) out[i] /= divide;
  }
  if (cap > 0.0f) {
    for (size_t i = 0; i < n; ++i) out[i] = ops::softcap(out[i], cap);
  }
}

void Decoder::project(const WeightMatrix& w, const float* in, size_t rows, float* out) const {
  multiply_rows(products_, w, in, rows, out, pool_);
}

}  // namespace turbokv::engine
