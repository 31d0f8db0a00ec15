#include "engine/session.hpp"

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "turbokv/error.hpp"

namespace turbokv::engine {

namespace {

// User metadata keys of a saved session.
constexpr const char* kTokensKey = "engine.tokens";            // JSON array of ids
constexpr const char* kShapeKey = "engine.model_shape";        // n_layers,kv_heads,head_dim,vocab
constexpr const char* kLogitsKey = "engine.last_logits_f32_hex";  // little-endian float32, hex

std::string model_shape(const ModelConfig& c) {
  return fmt::format("{},{},{},{}", c.n_layers, c.n_kv_heads, c.head_dim, c.vocab_size);
}

std::string to_hex(std::span<const float> values) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(values.size() * 8);
  for (const float v : values) {
    uint8_t b[4];
    std::memcpy(b, &v, 4);
    for (const uint8_t byte : b) {
      out.push_back(digits[byte >> 4]);
      out.push_back(digits[byte & 15]);
    }
  }
  return out;
}

std::vector<float> from_hex(const std::string& text, size_t count, const std::string& path) {
  if (text.size() != count * 8) {
    throw Error(fmt::format("prompt cache '{}': {} has {} characters, expected {}", path, kLogitsKey, text.size(),
                            count * 8));
  }
  auto nibble = [&](char c) -> uint8_t {
    if (c >= '0' && c <= '9') return static_cast<uint8_t>(c - '0');
    if (c >= 'a' && c <= 'f') return static_cast<uint8_t>(c - 'a' + 10);
    throw Error(fmt::format("prompt cache '{}': {} is not lowercase hex", path, kLogitsKey));
  };
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    uint8_t b[4];
    for (size_t j = 0; j < 4; ++j) b[j] = static_cast<uint8_t>(nibble(text[8 * i + 2 * j]) << 4 | nibble(text[8 * i + 2 * j + 1]));
    std::memcpy(&values[i], b, 4);
  }
  return values;
}

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
  cache_.metadata()[kTokensKey] = nlohmann::json(tokens_).dump();
  cache_.metadata()[kShapeKey] = model_shape(model_.config);
  cache_.metadata()[kLogitsKey] = to_hex(last_logits_);
  save_prompt_cache(path, cache_);
}

Session Session::load(const Model& model, const std::string& path, ThreadPool& pool, int max_chunk) {
  PromptCache cache = load_prompt_cache(path);
  const auto& meta = cache.metadata();
  auto get = [&](const char* key) -> const std::string& {
    const auto it = meta.find(key);
    if (it == meta.end()) throw Error(fmt::format("prompt cache '{}' was not saved by a session: no {}", path, key));
    return it->second;
  };
  if (get(kShapeKey) != model_shape(model.config)) {
    throw Error(fmt::format("prompt cache '{}' is for a model of shape {} (layers,kv_heads,head_dim,vocab), this "
                            "model is {}", path, get(kShapeKey), model_shape(model.config)));
  }
  std::vector<int> tokens;
  try {
    tokens = nlohmann::json::parse(get(kTokensKey)).get<std::vector<int>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("prompt cache '{}': {} is not a list of token ids ({})", path, kTokensKey, e.what()));
  }
  if (tokens.size() != cache.size()) {
    throw Error(fmt::format("prompt cache '{}' lists {} tokens but holds {}", path, tokens.size(), cache.size()));
  }
  for (const int t : tokens) {
    if (t < 0 || t >= model.config.vocab_size) throw Error(fmt::format("prompt cache '{}': token id {} out of range", path, t));
  }
  std::vector<float> logits;
  if (!tokens.empty()) logits = from_hex(get(kLogitsKey), static_cast<size_t>(model.config.vocab_size), path);

  Session session(model, std::move(cache), pool, max_chunk, Resume{});
  session.tokens_ = std::move(tokens);
  session.last_logits_ = std::move(logits);
  return session;
}

}  // namespace turbokv::engine
