// Session: one sequence being generated — the model's forward pass, the per-layer KV caches
// (a turbokv::PromptCache of any cache classes) and the tokens they hold.
//
// Saved prompt caches carry, in their user metadata, the token ids (so a loaded session
// knows its text and can match a new prompt against it), the model's shape (checked on load)
// and the last token's logits (so generation continues without recomputing anything).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/forward.hpp"
#include "engine/model/model.hpp"
#include "engine/runtime/sampler.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {

class Session {
 public:
  // `cache` must hold one layer per model layer with the model's kv_heads and head_dim, and
  // no tokens (use load() to resume a saved one). Throws turbokv::Error otherwise.
  Session(const Model& model, turbokv::PromptCache cache, turbokv::ThreadPool& pool, int max_chunk = 64);

  // Resumes a cache written by save(); throws turbokv::Error if it does not belong to this
  // model's shape or its token list does not match the cache's size.
  static Session load(const Model& model, const std::string& path, turbokv::ThreadPool& pool,
                      int max_chunk = 64);
  // Writes the cache with the token ids, the model's shape and the last logits (stored in the
  // cache's user metadata, under "engine.*" keys).
  void save(const std::string& path);

  // Runs tokens through the model (appending to the caches); returns the last token's logits.
  // Throws turbokv::Error, changing nothing, if they would pass the model's seq_len.
  std::span<const float> feed(std::span<const int> tokens);
  // Logits after the last fed token (empty before the first feed).
  std::span<const float> logits() const { return last_logits_; }

  // Samples up to max_new_tokens tokens, feeding each back; stops early (without feeding it)
  // when is_end(token) or the model's context is full. on_token sees every sampled token,
  // including a final end token. Returns the sampled tokens.
  std::vector<int> generate(int max_new_tokens, Sampler& sampler, const std::function<bool(int)>& is_end,
                            const std::function<void(int)>& on_token = {});

  const std::vector<int>& tokens() const { return tokens_; }
  size_t position() const { return tokens_.size(); }
  turbokv::PromptCache& cache() { return cache_; }
  const turbokv::PromptCache& cache() const { return cache_; }
  const Model& model() const { return model_; }

 private:
  struct Resume {};
  Session(const Model& model, turbokv::PromptCache cache, turbokv::ThreadPool& pool, int max_chunk, Resume);
  void collect_layers();

  const Model& model_;
  turbokv::PromptCache cache_;
  Forward forward_;
  std::vector<turbokv::KVCache*> layers_;
  std::vector<int> tokens_;
  std::vector<float> last_logits_;
};

// Bytes an fp16 cache would hold for n tokens of this model (keys and values, all layers).
size_t fp16_cache_bytes(const ModelConfig& config, size_t n_tokens);

}  // namespace turbokv::engine
