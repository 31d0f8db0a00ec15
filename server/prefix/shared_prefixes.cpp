#include "server/prefix/shared_prefixes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "turbokv/checksum.hpp"

namespace turbokv::server {

namespace {

void add_bytes(std::string& out, const void* data, size_t n) { out.append(static_cast<const char*>(data), n); }

template <typename T>
void add_value(std::string& out, const T& v) {
  add_bytes(out, &v, sizeof v);
}

// Type, shape and three 4 KiB samples (start, middle, end) of a matrix.
void add_matrix(std::string& out, const engine::WeightMatrix& w) {
  add_value(out, static_cast<int>(w.type));
  add_value(out, w.rows);
  add_value(out, w.cols);
  if (w.data == nullptr || w.rows == 0) return;
  const size_t bytes = engine::row_bytes(w.type, w.cols) * static_cast<size_t>(w.rows);
  const auto* p = static_cast<const char*>(w.data);
  const size_t sample = std::min<size_t>(bytes, 4096);
  for (const size_t at : {size_t{0}, (bytes - sample) / 2, bytes - sample}) add_bytes(out, p + at, sample);
}

void add_floats(std::string& out, const std::vector<float>& v) {
  add_value(out, v.size());
  add_bytes(out, v.data(), v.size() * sizeof(float));
}

// The state's metadata without the keys that change with the number of tokens held (seen
// empty, with one token, and with more tokens than sinks, window and two pages hold).
std::map<std::string, std::string> fixed_keys(const std::vector<const KVCache*>& caches) {
  std::map<std::string, std::string> fixed = caches.front()->save_state().metadata;
  for (size_t i = 1; i < caches.size(); ++i) {
    const auto other = caches[i]->save_state().metadata;
    std::erase_if(fixed, [&](const auto& kv) {
      const auto it = other.find(kv.first);
      return it == other.end() || it->second != kv.second;
    });
  }
  return fixed;
}

}  // namespace

uint64_t model_fingerprint(const engine::Model& model) {
  const engine::ModelConfig& c = model.config;
  std::string out = c.arch + "|" + model.format;
  for (const int v : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size, c.seq_len,
                      c.bos_id, c.eos_id, int{c.rope_neox}, int{c.qkv_bias}, int{c.qk_norm}, int{c.tied_embeddings}}) {
    add_value(out, v);
  }
  add_value(out, c.norm_eps);
  add_value(out, c.rope_theta);
  // The Gemma/OLMo/Granite fields only when set, so a llama/qwen model's fingerprint stays what
  // it was (saved prefixes keep matching).
  const engine::ModelConfig plain;
  if (c.post_norms || !c.pre_norms || c.qk_norm_whole || c.gelu_ffn || c.sliding_window != 0 ||
      c.embedding_scale != plain.embedding_scale || c.attention_scale != 0.0f || c.attn_softcap != 0.0f ||
      c.final_softcap != 0.0f || c.rope_theta_local != 0.0f || c.residual_scale != 1.0f || c.logit_scale != 1.0f) {
    for (const int v : {int{c.post_norms}, int{c.pre_norms}, int{c.qk_norm_whole}, int{c.gelu_ffn}, c.sliding_window,
                        c.swa_pattern}) {
      add_value(out, v);
    }
    for (const float v : {c.embedding_scale, c.attention_scale, c.attn_softcap, c.final_softcap, c.rope_theta_local,
                          c.residual_scale, c.logit_scale}) {
      add_value(out, v);
    }
  }
  add_floats(out, c.rope_freq_factors);  // LongRoPE: the set chosen for the server's context
  if (c.rope_dims != 0 || c.rope_attn_factor != 1.0f) {  // (only when set, as above)
    add_value(out, c.rope_dims);
    add_value(out, c.rope_attn_factor);
  }
  add_matrix(out, model.token_embedding);
  add_matrix(out, model.output);
  add_floats(out, model.final_norm);
  for (const auto& l : model.layers) {
    for (const auto* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_down, &l.w_up}) add_matrix(out, *w);
    for (const auto* v : {&l.attn_norm, &l.ffn_norm, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm}) add_floats(out, *v);
    if (c.post_norms) {
      add_floats(out, l.attn_post_norm);
      add_floats(out, l.ffn_post_norm);
    }
  }
  return checksum64(out);
}

uint64_t cache_config_hash(const CacheConfig& config) {
  std::string text = format_cache_config(config) + "|dense_layers=";
  for (const int l : config.dense_layers) text += std::to_string(l) + ";";
  return checksum64(text);
}

SharedPrefixes::SharedPrefixes(std::shared_ptr<PrefixStore> store, const engine::Model& model,
                               const CacheConfig& config, size_t block_tokens, std::string tier)
    : store_(std::move(store)),
      tier_(std::move(tier)),
      n_layers_(model.config.n_layers),
      kv_heads_(model.config.n_kv_heads),
      head_dim_(model.config.head_dim) {
  if (!store_) throw Error("SharedPrefixes: no store");
  if (block_tokens == 0 || block_tokens > 4096) throw Error(fmt::format("prefix block of {} tokens", block_tokens));
  id_.model = model_fingerprint(model);
  id_.config = cache_config_hash(config);
  id_.block_tokens = static_cast<uint32_t>(block_tokens);
  const std::vector<size_t> windows = model.config.layer_windows();
  PromptCache empty = make_prompt_cache(n_layers_, kv_heads_, head_dim_, config, windows);
  PromptCache one = make_prompt_cache(n_layers_, kv_heads_, head_dim_, config, windows);
  PromptCache many = make_prompt_cache(n_layers_, kv_heads_, head_dim_, config, windows);
  const size_t n_many = config.tq.window + config.tq.sinks + 2 * std::max(block_tokens, config.tq.page_tokens) + 3;
  std::vector<float> kv(static_cast<size_t>(kv_heads_) * static_cast<size_t>(head_dim_) * n_many);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  for (size_t l = 0; l < empty.n_layers(); ++l) {
    one.layer(l).append(std::span<const float>(kv).first(kv.size() / n_many), std::span<const float>(kv).first(kv.size() / n_many), 1);
    many.layer(l).append(kv, kv, n_many);
    classes_.push_back(empty.layer(l).class_name());
    fixed_metadata_.push_back(fixed_keys({&empty.layer(l), &one.layer(l), &many.layer(l)}));
  }
}

void SharedPrefixes::check_layers(const PromptCache& cache) const {
  for (size_t l = 0; l < cache.n_layers(); ++l) {
    const KVCache& layer = cache.layer(l);
    if (layer.class_name() != classes_[l]) {
      throw PrefixValueError("foreign", fmt::format("prefix value: layer {} is a {} cache, this server keeps {}", l,
                                                    layer.class_name(), classes_[l]));
    }
    const auto meta = layer.save_state().metadata;
    for (const auto& [k, v] : fixed_metadata_[l]) {
      const auto it = meta.find(k);
      if (it == meta.end() || it->second != v) {
        throw PrefixValueError("foreign", fmt::format("prefix value: layer {} has {}={}, this server {}", l, k,
                                                      it == meta.end() ? "(none)" : it->second, v));
      }
    }
  }
}

bool SharedPrefixes::holds(std::span<const int> tokens) {
  const size_t blocks = tokens.size() / id_.block_tokens;
  if (blocks == 0 || blocks * id_.block_tokens != tokens.size()) return false;
  try {
    const auto found = store_->exists({prefix_key(prefix_chain(id_, tokens, blocks).back())});
    return found.size() == 1 && found[0];
  } catch (const StoreUnavailable&) {
    return false;
  }
}

SharedPrefixes::Lookup SharedPrefixes::lookup(const std::vector<int>& prompt, size_t limit, size_t longer_than) {
  Lookup result;
  const size_t blocks = std::min(limit, prompt.size()) / id_.block_tokens;
  const size_t first = std::min(blocks, longer_than / id_.block_tokens);  // blocks asked about: [first, blocks)
  auto count = [&](uint64_t SharedPrefixMetrics::*field) {
    std::lock_guard lock(mutex_);
    ++(metrics_.*field);
  };
  if (first == blocks && longer_than > 0) {
    result.present.assign(blocks, false);
    return result;  // a tier above found as much as there is: not a lookup
  }
  count(&SharedPrefixMetrics::lookups_total);
  if (blocks == 0) return result;
  const std::vector<uint64_t> chain = prefix_chain(id_, prompt, blocks);
  std::vector<std::string> keys;
  keys.reserve(blocks - first);
  for (size_t b = first; b < blocks; ++b) keys.push_back(prefix_key(chain[b]));
  try {
    result.present = store_->exists(keys);
    if (result.present.size() != keys.size()) throw StoreUnavailable("EXISTS answered for the wrong number of keys");
    result.present.insert(result.present.begin(), first, false);
    keys.insert(keys.begin(), first, std::string());
    // The longest present prefix first; a damaged or vanished one falls back to the next
    // (at most two fetches: a lookup is bounded by a few round trips).
    int fetches = 0;
    for (size_t b = blocks; b-- > first && fetches < 2;) {
      if (!result.present[b]) continue;
      ++fetches;
      const std::optional<std::string> value = store_->get(keys[b]);
      if (!value) {
        result.present[b] = false;
        count(&SharedPrefixMetrics::evicted_total);
        continue;
      }
      const size_t n = (b + 1) * id_.block_tokens;
      try {
        PromptCache cache = decode_prefix_value(
            *value, {id_, std::span<const int>(prompt.data(), n), n_layers_, kv_heads_, head_dim_});
        check_layers(cache);
        result.cache = std::move(cache);
        result.tokens = n;
        count(&SharedPrefixMetrics::hits_total);
        return result;
      } catch (const PrefixValueError& e) {
        // Not usable: treated as absent, so this replica's own result replaces it.
        result.present[b] = false;
        count(&SharedPrefixMetrics::rejected_total);
        store_->refused(keys[b]);
        std::fprintf(stderr, "serve: prefix %s value %s refused (%s): %s\n", tier_.c_str(), keys[b].c_str(),
                     e.kind().c_str(), e.what());
      }
    }
  } catch (const StoreUnavailable&) {
    // Already logged by the store (once per back-off period): compute.
    count(&SharedPrefixMetrics::unavailable_total);
    result.present.assign(blocks, false);
  }
  return result;
}

SharedPrefixes::Encoded SharedPrefixes::encode(std::span<const int> tokens, const PromptCache& cache) const {
  const size_t n = cache.size();
  if (n == 0 || n % id_.block_tokens != 0 || n > tokens.size()) {
    throw Error(fmt::format("SharedPrefixes: a prefix of {} tokens is not whole blocks of {} within {} tokens", n,
                            id_.block_tokens, tokens.size()));
  }
  const auto chain = prefix_chain(id_, tokens, n / id_.block_tokens);
  Encoded encoded{prefix_key(chain.back()), encode_prefix_value(id_, tokens.first(n), cache), {}};
  encoded.shorter.reserve(chain.size() - 1);
  for (size_t b = 0; b + 1 < chain.size(); ++b) encoded.shorter.push_back(prefix_key(chain[b]));
  return encoded;
}

void SharedPrefixes::put(Encoded encoded) {
  {
    std::lock_guard lock(mutex_);
    ++metrics_.offers_total;
    metrics_.offer_bytes_total += encoded.value.size();
  }
  store_->put_superseding(std::move(encoded.key), std::move(encoded.value), std::move(encoded.shorter));
}

SharedPrefixMetrics SharedPrefixes::metrics() const {
  SharedPrefixMetrics m;
  {
    std::lock_guard lock(mutex_);
    m = metrics_;
  }
  m.store = store_->counters();
  return m;
}

}  // namespace turbokv::server
