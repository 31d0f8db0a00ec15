// The "engine.*" user metadata a Session writes into a saved prompt cache, and its validation,
// shared by Session::load and `turbokv cache-info` so the two accept exactly the same files.
//
// Keys (user metadata; "user.engine.*" in the file):
//   engine.tokens              JSON array of the token ids the cache holds, e.g. "[1,450,4996]"
//   engine.model_shape         "n_layers,kv_heads,head_dim,vocab" of the model that wrote it
//   engine.last_logits_f32_hex the last token's logits, vocab little-endian float32s as lowercase
//                              hex ("" when no token was fed)
#pragma once

#include <span>
#include <string>
#include <vector>

#include "turbokv/cache_io.hpp"

namespace turbokv::engine {

inline constexpr const char* kSessionTokensKey = "engine.tokens";
inline constexpr const char* kSessionShapeKey = "engine.model_shape";
inline constexpr const char* kSessionLogitsKey = "engine.last_logits_f32_hex";

struct SessionShape {
  int n_layers = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  bool operator==(const SessionShape&) const = default;
};

struct SessionMetadata {
  SessionShape shape;
  std::vector<int> tokens;
  std::vector<float> last_logits;  // empty when tokens is empty
};

std::string format_session_shape(const SessionShape& shape);

// True when the cache carries any engine.* key (a file a Session saved).
bool has_session_metadata(const PromptCache& cache);

// Parses and checks every engine.* key against the cache: all three present and no other
// engine.* key; the shape four positive integers that match the cache's layers, kv_heads and
// head_dim; the tokens a JSON list of ids inside the vocabulary, as many as the cache holds;
// the logits exactly vocab finite float32s (none without tokens). Throws turbokv::Error naming
// `path` and the key.
SessionMetadata parse_session_metadata(const PromptCache& cache, const std::string& path);

// The metadata Session::save writes.
void set_session_metadata(PromptCache& cache, const SessionShape& shape, std::span<const int> tokens,
                          std::span<const float> last_logits);

}  // namespace turbokv::engine
