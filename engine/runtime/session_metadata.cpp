#include "engine/runtime/session_metadata.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "turbokv/error.hpp"

namespace turbokv::engine {
namespace {

template <typename... Args>
[[noreturn]] void fail(const std::string& path, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format("prompt cache '{}': {}", path, fmt::format(format, std::forward<Args>(args)...)));
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

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

SessionShape parse_shape(const std::string& text, const std::string& path) {
  SessionShape s;
  int* fields[] = {&s.n_layers, &s.kv_heads, &s.head_dim, &s.vocab};
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (size_t i = 0; i < 4; ++i) {
    auto [next, ec] = std::from_chars(p, end, *fields[i]);
    const bool separator_ok = i < 3 ? (next != end && *next == ',') : next == end;
    if (ec != std::errc() || next == p || !separator_ok || *fields[i] <= 0) {
      fail(path, "{} '{}' is not four positive integers n_layers,kv_heads,head_dim,vocab", kSessionShapeKey, text);
    }
    p = next + (i < 3 ? 1 : 0);
  }
  return s;
}

std::vector<int> parse_tokens(const std::string& text, int vocab, const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) fail(path, "{} is not a JSON list of token ids", kSessionTokensKey);
  std::vector<int> tokens;
  tokens.reserve(j.size());
  for (const auto& t : j) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
      fail(path, "{}[{}] = {} is not a token id in [0, {})", kSessionTokensKey, tokens.size(), t.dump(), vocab);
    }
    tokens.push_back(t.get<int>());
  }
  return tokens;
}

std::vector<float> parse_logits(const std::string& text, size_t count, const std::string& path) {
  if (text.size() != count * 8) {
    fail(path, "{} has {} characters, expected {} ({} float32 logits)", kSessionLogitsKey, text.size(), count * 8,
         count);
  }
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    uint8_t b[4];
    for (size_t j = 0; j < 4; ++j) {
      const int hi = hex_digit(text[8 * i + 2 * j]), lo = hex_digit(text[8 * i + 2 * j + 1]);
      if (hi < 0 || lo < 0) fail(path, "{} is not lowercase hex", kSessionLogitsKey);
      b[j] = static_cast<uint8_t>(hi << 4 | lo);
    }
    std::memcpy(&values[i], b, 4);
    // A forward pass over finite weights gives finite logits; NaN would make sampling arbitrary.
    if (!std::isfinite(values[i])) fail(path, "{}: logit {} is {}", kSessionLogitsKey, i, values[i]);
  }
  return values;
}

}  // namespace

std::string format_session_shape(const SessionShape& s) {
  return fmt::format("{},{},{},{}", s.n_layers, s.kv_heads, s.head_dim, s.vocab);
}

bool has_session_metadata(const PromptCache& cache) {
  for (const auto& [k, v] : cache.metadata()) {
    if (k.rfind("engine.", 0) == 0) return true;
  }
  return false;
}

SessionMetadata parse_session_metadata(const PromptCache& cache, const std::string& path) {
  const auto& meta = cache.metadata();
  for (const auto& [k, v] : meta) {
    if (k.rfind("engine.", 0) == 0 && k != kSessionTokensKey && k != kSessionShapeKey && k != kSessionLogitsKey) {
      fail(path, "unknown engine metadata key '{}'", k);
    }
  }
  auto get = [&](const char* key) -> const std::string& {
    const auto it = meta.find(key);
    if (it == meta.end()) fail(path, "was not saved by a session: no {}", key);
    return it->second;
  };
  SessionMetadata out;
  out.shape = parse_shape(get(kSessionShapeKey), path);
  const SessionShape& s = out.shape;
  if (static_cast<size_t>(s.n_layers) != cache.n_layers()) {
    fail(path, "{} says {} layers but the cache has {}", kSessionShapeKey, s.n_layers, cache.n_layers());
  }
  for (size_t l = 0; l < cache.n_layers(); ++l) {
    const KVCache& layer = cache.layer(l);
    if (layer.kv_heads() != s.kv_heads || layer.head_dim() != s.head_dim) {
      fail(path, "{} says {} kv heads x {} but layer {} is {} x {}", kSessionShapeKey, s.kv_heads, s.head_dim, l,
           layer.kv_heads(), layer.head_dim());
    }
    if (layer.size() != cache.size()) {
      fail(path, "layer {} holds {} tokens, layer 0 holds {}", l, layer.size(), cache.size());
    }
  }
  out.tokens = parse_tokens(get(kSessionTokensKey), s.vocab, path);
  if (out.tokens.size() != cache.size()) {
    fail(path, "{} lists {} tokens but the cache holds {}", kSessionTokensKey, out.tokens.size(), cache.size());
  }
  const std::string& logits = get(kSessionLogitsKey);
  if (out.tokens.empty()) {
    if (!logits.empty()) fail(path, "{} holds logits but no token was fed", kSessionLogitsKey);
  } else {
    out.last_logits = parse_logits(logits, static_cast<size_t>(s.vocab), path);
  }
  return out;
}

void set_session_metadata(PromptCache& cache, const SessionShape& shape, std::span<const int> tokens,
                          std::span<const float> last_logits) {
  cache.metadata()[kSessionTokensKey] = nlohmann::json(std::vector<int>(tokens.begin(), tokens.end())).dump();
  cache.metadata()[kSessionShapeKey] = format_session_shape(shape);
  cache.metadata()[kSessionLogitsKey] = to_hex(last_logits);
}

}  // namespace turbokv::engine
