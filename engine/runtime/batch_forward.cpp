#include "engine/runtime/batch_forward.hpp"

#include <fmt/format.h>

#include <limits>

#include "turbokv/attention.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {

namespace {
constexpr size_t kNoLogits = std::numeric_limits<size_t>::max();
}

BatchForward::BatchForward(const Model& model, ThreadPool& pool, int attention_threads)
    : model_(model),
      pool_(pool),
      attention_threads_(attention_threads > 0 ? attention_threads : pool.size()),
      rope_(model.config) {
  model_.config.validate();
}

void BatchForward::reserve(size_t rows) {
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

void BatchForward::validate(std::span<const BatchEntry> entries) const {
  const ModelConfig& c = model_.config;
  // Expected cache size per distinct cache set: consecutive entries of one sequence continue it.
  std::vector<std::pair<const KVCache*, size_t>> next_position;
  for (size_t e = 0; e < entries.size(); ++e) {
    const BatchEntry& entry = entries[e];
    if (entry.tokens.empty()) throw Error(fmt::format("BatchForward: entry {} has no tokens", e));
    for (const int t : entry.tokens) {
      if (t < 0 || t >= c.vocab_size) {
        throw Error(fmt::format("BatchForward: token id {} outside vocabulary of {}", t, c.vocab_size));
      }
    }
    if (static_cast<int>(entry.caches.size()) != c.n_layers) {
      throw Error(fmt::format("BatchForward: entry {} has {} caches for {} layers", e, entry.caches.size(), c.n_layers));
    }
    for (size_t l = 0; l < entry.caches.size(); ++l) {
      const KVCache* cache = entry.caches[l];
      if (cache == nullptr) throw Error(fmt::format("BatchForward: entry {} layer {} has no cache", e, l));
      if (cache->kv_heads() != c.n_kv_heads || cache->head_dim() != c.head_dim) {
        throw Error(fmt::format("BatchForward: entry {} layer {} cache is {} heads x {}, the model needs {} x {}", e, l,
                                cache->kv_heads(), cache->head_dim(), c.n_kv_heads, c.head_dim));
      }
      if (cache->size() != entry.caches[0]->size()) {
        throw Error(fmt::format("BatchForward: entry {} layer {} holds {} tokens, layer 0 {}", e, l, cache->size(),
                                entry.caches[0]->size()));
      }
    }
    const KVCache* key = entry.caches[0];
    size_t start = key->size();
    for (auto& [cache, pos] : next_position) {
      if (cache == key) start = pos;
    }
    if (start + entry.tokens.size() > static_cast<size_t>(c.seq_len)) {
      throw Error(fmt::format("BatchForward: entry {} reaches position {}, past the model's context of {}", e,
                              start + entry.tokens.size(), c.seq_len));
    }
    bool found = false;
    for (auto& [cache, pos] : next_position) {
      if (cache == key) {
        pos = start + entry.tokens.size();
        found = true;
      }
    }
    if (!found) next_position.emplace_back(key, start + entry.tokens.size());
  }
}

void BatchForward::project(const WeightMatrix& w, const float* in, size_t rows, float* out) {
  matmul_rowwise(w, in, static_cast<int64_t>(rows), out, pool_);
}

void BatchForward::attention_block(const LayerWeights& w, int layer, std::span<const BatchEntry> entries,
                                   size_t rows) {
  const ModelConfig& c = model_.config;
  const int dim = c.dim, hd = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  for (size_t r = 0; r < rows; ++r) {
    ops::rmsnorm(xb_.data() + r * dim, x_.data() + r * dim, w.attn_norm.data(), dim, c.norm_eps);
  }
  project(w.wq, xb_.data(), rows, q_.data());
  project(w.wk, xb_.data(), rows, k_.data());
  project(w.wv, xb_.data(), rows, v_.data());
  for (size_t e = 0; e < entries.size(); ++e) {
    for (size_t i = 0; i < entries[e].tokens.size(); ++i) {
      const size_t r = first_row_[e] + i;
      float* q = q_.data() + r * q_dim;
      float* k = k_.data() + r * kv_dim;
      float* v = v_.data() + r * kv_dim;
      if (c.qkv_bias) {
        for (int j = 0; j < q_dim; ++j) q[j] += w.bq[static_cast<size_t>(j)];
        for (int j = 0; j < kv_dim; ++j) k[j] += w.bk[static_cast<size_t>(j)];
        for (int j = 0; j < kv_dim; ++j) v[j] += w.bv[static_cast<size_t>(j)];
      }
      if (c.qk_norm) {
        for (int h = 0; h < c.n_heads; ++h) ops::rmsnorm(q + h * hd, q + h * hd, w.q_norm.data(), hd, c.norm_eps);
        for (int h = 0; h < c.n_kv_heads; ++h) ops::rmsnorm(k + h * hd, k + h * hd, w.k_norm.data(), hd, c.norm_eps);
      }
      rope_.apply(q, c.n_heads, position_[e] + i);
      rope_.apply(k, c.n_kv_heads, position_[e] + i);
    }
  }
  // Attention per entry, in order (a sequence's later entry sees its earlier one's tokens).
  AttentionOptions options;
  options.threads = attention_threads_;
  for (size_t e = 0; e < entries.size(); ++e) {
    const int n = static_cast<int>(entries[e].tokens.size());
    const size_t r0 = first_row_[e];
    const size_t kv_count = static_cast<size_t>(n) * kv_dim;
    const size_t q_count = static_cast<size_t>(n) * q_dim;
    ops::to_head_major(k_.data() + r0 * kv_dim, n, c.n_kv_heads, hd, k_heads_.data());
    ops::to_head_major(v_.data() + r0 * kv_dim, n, c.n_kv_heads, hd, v_heads_.data());
    ops::to_head_major(q_.data() + r0 * q_dim, n, c.n_heads, hd, q_heads_.data());
    KVCache& cache = *entries[e].caches[static_cast<size_t>(layer)];
    cache.append(std::span<const float>(k_heads_.data(), kv_count), std::span<const float>(v_heads_.data(), kv_count),
                 static_cast<size_t>(n));
    attend(std::span<const float>(q_heads_.data(), q_count), c.n_heads, n, cache,
           std::span<float>(att_heads_.data(), q_count), options);
    ops::to_token_major(att_heads_.data(), n, c.n_heads, hd, att_.data() + r0 * q_dim);
  }
  project(w.wo, att_.data(), rows, xb_.data());
  for (size_t i = 0; i < rows * dim; ++i) x_[i] += xb_[i];
}

void BatchForward::run(std::span<const BatchEntry> entries) {
  validate(entries);
  const ModelConfig& c = model_.config;
  first_row_.assign(entries.size(), 0);
  position_.assign(entries.size(), 0);
  logit_slot_.assign(entries.size(), kNoLogits);
  logit_rows_.assign(entries.size(), 0);
  size_t rows = 0, logit_rows = 0;
  for (size_t e = 0; e < entries.size(); ++e) {
    first_row_[e] = rows;
    position_[e] = entries[e].caches[0]->size();
    for (size_t p = 0; p < e; ++p) {  // an earlier entry of the same sequence
      if (entries[p].caches[0] == entries[e].caches[0]) position_[e] = position_[p] + entries[p].tokens.size();
    }
    rows += entries[e].tokens.size();
    if (entries[e].want_logits || entries[e].all_logits) {
      logit_slot_[e] = logit_rows;
      logit_rows_[e] = entries[e].all_logits ? entries[e].tokens.size() : 1;
      logit_rows += logit_rows_[e];
    }
  }
  reserve(rows);
  const size_t dim = c.dim, hidden = c.hidden_dim;
  for (size_t e = 0; e < entries.size(); ++e) {
    for (size_t i = 0; i < entries[e].tokens.size(); ++i) {
      dequantize_row(model_.token_embedding, entries[e].tokens[i], x_.data() + (first_row_[e] + i) * dim);
    }
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model_.layers[static_cast<size_t>(l)];
    attention_block(w, l, entries, rows);
    for (size_t r = 0; r < rows; ++r) {
      ops::rmsnorm(xb_.data() + r * dim, x_.data() + r * dim, w.ffn_norm.data(), c.dim, c.norm_eps);
    }
    project(w.w_gate, xb_.data(), rows, hb_.data());
    project(w.w_up, xb_.data(), rows, hb2_.data());
    for (size_t i = 0; i < rows * hidden; ++i) hb_[i] = ops::silu(hb_[i]) * hb2_[i];
    project(w.w_down, hb_.data(), rows, xb_.data());
    for (size_t i = 0; i < rows * dim; ++i) x_[i] += xb_[i];
  }
  // Final norm and the output projection for the rows whose logits are wanted only.
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  logits_.resize(logit_rows * vocab);
  if (logit_rows == 0) return;
  for (size_t e = 0; e < entries.size(); ++e) {
    // The entry's last logit_rows_[e] rows (all of them, or its last token's).
    const size_t first = first_row_[e] + entries[e].tokens.size() - logit_rows_[e];
    for (size_t i = 0; i < logit_rows_[e]; ++i) {
      ops::rmsnorm(xb_.data() + (logit_slot_[e] + i) * dim, x_.data() + (first + i) * dim, model_.final_norm.data(),
                   c.dim, c.norm_eps);
    }
  }
  project(model_.output, xb_.data(), logit_rows, logits_.data());
}

std::span<const float> BatchForward::logits(size_t entry) const {
  if (entry >= logit_slot_.size() || logit_slot_[entry] == kNoLogits) {
    throw Error(fmt::format("BatchForward: entry {} has no logits", entry));
  }
  const size_t vocab = static_cast<size_t>(model_.config.vocab_size);
  return std::span<const float>(logits_.data() + (logit_slot_[entry] + logit_rows_[entry] - 1) * vocab, vocab);
}

std::span<const float> BatchForward::all_logits(size_t entry) const {
  if (entry >= logit_slot_.size() || logit_slot_[entry] == kNoLogits) {
    throw Error(fmt::format("BatchForward: entry {} has no logits", entry));
  }
  const size_t vocab = static_cast<size_t>(model_.config.vocab_size);
  return std::span<const float>(logits_.data() + logit_slot_[entry] * vocab, logit_rows_[entry] * vocab);
}

}  // namespace turbokv::engine
