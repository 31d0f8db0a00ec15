// check_gguf_vocabulary: the tokenizer.ggml.* fields every GGUF tokenizer reads, checked once
// before either tokenizer is built, so a damaged vocabulary is an error naming the field rather
// than a tokenizer that silently maps ids to the wrong (or no) token.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>

#include "engine/model/gguf.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {

namespace {

// llama.cpp's llama_token_type: UNDEFINED 0, NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4,
// UNUSED 5, BYTE 6.
constexpr int64_t kMaxTokenType = 6;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void check_gguf_vocabulary(const GgufFile& gguf) {
  const std::string tokens_key = "tokenizer.ggml.tokens";
  if (gguf.array_type(tokens_key) != GgufValueType::STRING) {
    throw Error(fmt::format("GGUF '{}': {} is an array of {}, expected strings", gguf.path(), tokens_key,
                            gguf_value_type_name(gguf.array_type(tokens_key))));
  }
  const uint64_t n = gguf.array_size(tokens_key);
  if (n == 0 || n > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    throw Error(fmt::format("GGUF '{}': {} holds {} tokens", gguf.path(), tokens_key, n));
  }
  // Every special id (bos, eos, unknown, padding, seperator [sic, llama.cpp's spelling], cls,
  // mask, eot, eom, fim_*, ...): inside the vocabulary, or -1 for "none".
  for (const std::string& key : gguf.keys()) {
    if (key.rfind("tokenizer.ggml.", 0) != 0 || !ends_with(key, "_token_id")) continue;
    const int64_t id = gguf.get_int(key);
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      throw Error(fmt::format("GGUF '{}': {} = {} is outside the vocabulary of {} tokens", gguf.path(), key, id, n));
    }
  }
  if (gguf.has("tokenizer.ggml.scores")) {
    const std::vector<float> scores = gguf.get_float_array("tokenizer.ggml.scores");
    if (scores.size() != n) {
      throw Error(fmt::format("GGUF '{}': tokenizer.ggml.scores holds {} scores for {} tokens", gguf.path(),
                              scores.size(), n));
    }
    for (size_t i = 0; i < scores.size(); ++i) {
      // A NaN score compares false with everything: merges would depend on heap order.
      if (!std::isfinite(scores[i])) {
        throw Error(fmt::format("GGUF '{}': tokenizer.ggml.scores[{}] is {}, not a finite number", gguf.path(), i,
                                scores[i]));
      }
    }
  }
  if (gguf.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = gguf.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n) {
      throw Error(fmt::format("GGUF '{}': tokenizer.ggml.token_type holds {} types for {} tokens", gguf.path(),
                              types.size(), n));
    }
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] < 0 || types[i] > kMaxTokenType) {
        throw Error(fmt::format("GGUF '{}': tokenizer.ggml.token_type[{}] = {} is not a known token type (0 to {})",
                                gguf.path(), i, types[i], kMaxTokenType));
      }
    }
  }
}

}  // namespace turbokv::engine
