#include "engine/runtime/session.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "engine/runtime/session_metadata.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {

namespace {

SessionShape model_shape(const ModelConfig& c) { return {c.n_layers, c.n_kv_heads, c.head_dim, c.vocab_size}; }

}  // namespace

size_t fp16_cache_bytes(const ModelConfig& c, size_t n_tokens) {
  return n_tokens * static_cast<size_t>(c.n_layers) * static_cast<size_t>(c.kv_dim()) * 2 * 2;
}

Session::Session(const Model& model, PromptCache cache, ThreadPool& pool, int max_chunk)
    : model_(model), cache_(std::move(cache)), forward_(model, pool, max_chunk) {
  collect_layers();
  if (cache_.size() != 0) throw Error("Session: the cache must start empty (use Session::load to resume)");
}

Session::Session(const Model& model, PromptCache cache, ThreadPool& pool, int max_chunk, Resume)
    : model_(model), cache_(std::move(cache)), forward_(model, pool, max_chunk) {
  collect_layers();
}

void Session::collect_layers() {
  const ModelConfig& c = model_.config;
  if (static_cast<int>(cache_.n_layers()) != c.n_layers) {
    throw Error(fmt::format("Session: cache has {} layers, the model {}", cache_.n_layers(), c.n_layers));
  }
  layers_.clear();
  for (size_t l = 0; l < cache_.n_layers(); ++l) {
    KVCache& layer = cache_.layer(l);
    if (layer.kv_heads() != c.n_kv_heads || layer.head_dim() != c.head_dim) {
      throw Error(fmt::format("Session: layer {} cache is {} heads x {}, the model needs {} x {}", l, layer.kv_heads(),
                              layer.head_dim(), c.n_kv_heads, c.head_dim));
    }
    if (layer.size() != cache_.layer(0).size()) {
      throw Error(fmt::format("Session: layer {} holds {} tokens, layer 0 holds {}", l, layer.size(),
                              cache_.layer(0).size()));
    }
    layers_.push_back(&layer);
  }
}

std::span<const float> Session::feed(std::span<const int> tokens) {
  // The model's context bounds a session as it bounds generate(): positions past seq_len were
  // never trained, so feeding there is refused before anything changes.
  const size_t limit = static_cast<size_t>(model_.config.seq_len);
  if (tokens.size() > limit - std::min(limit, tokens_.size())) {
    throw Error(fmt::format("Session::feed: {} tokens after {} exceed the model's context of {}", tokens.size(),
                            tokens_.size(), limit));
  }
  const auto logits = forward_.run(tokens, layers_);
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  last_logits_.assign(logits.begin(), logits.end());
  return last_logits_;
}

std::vector<int> Session::generate(int max_new_tokens, Sampler& sampler, const std::function<bool(int)>& is_end,
                                   const std::function<void(int)>& on_token) {
  if (last_logits_.empty()) throw Error("Session::generate: feed a prompt first");
  std::vector<int> out;
  for (int i = 0; i < max_new_tokens; ++i) {
    const int next = sampler.sample(last_logits_);
    out.push_back(next);
    if (on_token) on_token(next);
    if (is_end && is_end(next)) break;
    // The last sampled token needs no forward pass (nothing reads its logits).
    if (i + 1 == max_new_tokens || tokens_.size() >= static_cast<size_t>(model_.config.seq_len)) break;
    feed(std::span<const int>(&next, 1));
  }
  return out;
}

void Session::save(const std::string& path) {
  set_session_metadata(cache_, model_shape(model_.config), tokens_, last_logits_);
  save_prompt_cache(path, cache_);
}

Session Session::load(const Model& model, const std::string& path, ThreadPool& pool, int max_chunk) {
  PromptCache cache = load_prompt_cache(path);
  // The same checks `turbokv cache-info` makes, then the ones that need the model.
  SessionMetadata meta = parse_session_metadata(cache, path);
  if (meta.shape != model_shape(model.config)) {
    throw Error(fmt::format("prompt cache '{}' is for a model of shape {} (layers,kv_heads,head_dim,vocab), this "
                            "model is {}", path, format_session_shape(meta.shape),
                            format_session_shape(model_shape(model.config))));
  }
  std::vector<int> tokens = std::move(meta.tokens);
  std::vector<float> logits = std::move(meta.last_logits);

  Session session(model, std::move(cache), pool, max_chunk, Resume{});
  session.tokens_ = std::move(tokens);
  session.last_logits_ = std::move(logits);
  return session;
}

}  // namespace turbokv::engine
