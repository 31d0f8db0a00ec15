// mlx-lm's QuantizedKVCache: every head row of every token is cut into groups of 64 values, each
// quantized affinely with mx.quantize's rule (float32 arithmetic, scale and bias then stored in
// the model dtype, fp16 here).
#include <algorithm>
#include <cmath>

#include "cache/baseline_common.hpp"
#include "cache/cache_state_util.hpp"
#include "turbokv/baseline_caches.hpp"

namespace turbokv {

void quantize_group_affine(const float* x, int group, int bits, uint8_t* codes,
                           uint16_t* scale_f16, uint16_t* bias_f16) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  constexpr float eps = 1e-7f;
  float w_min = x[0], w_max = x[0];
  for (int j = 1; j < group; ++j) {
    w_min = std::min(w_min, x[j]);
    w_max = std::max(w_max, x[j]);
  }
  // The endpoint of larger magnitude becomes the bias (code 0) and is reproduced exactly up to
  // its fp16 rounding; the scale's sign makes the codes count away from it.
  const bool min_is_edge = std::fabs(w_min) > std::fabs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, eps);
  if (!min_is_edge) scale = -scale;
  const float edge = min_is_edge ? w_min : w_max;
  const float q0 = std::rint(edge / scale);
  float bias = 0.0f;
  if (q0 != 0.0f) {
    scale = edge / q0;
    bias = edge;
  }
  for (int j = 0; j < group; ++j) {
    const float q = std::clamp(std::rint((x[j] - bias) / scale), 0.0f, n_bins);
    codes[j] = static_cast<uint8_t>(q);
  }
  *scale_f16 = float_to_half(scale);
  *bias_f16 = float_to_half(bias);
}

std::string AffineKVCache::shape_problem(int head_dim, const AffineOptions& options) {
  if (head_dim <= 0 || options.group_size <= 0 || head_dim % options.group_size != 0) {
    return fmt::format("affine{} is not applicable: head_dim {} is not a multiple of its "
                       "{}-value group",
                       options.bits, head_dim, options.group_size);
  }
  return "";
}

AffineKVCache::AffineKVCache(int kv_heads, int head_dim, const AffineOptions& options)
    : kv_heads_(kv_heads), head_dim_(head_dim), options_(options) {
  baseline::check_shape("AffineKVCache", kv_heads, head_dim);
  TURBOKV_CHECK(options.bits == 2 || options.bits == 4 || options.bits == 8,
                "AffineKVCache: bits must be 2, 4 or 8, got {}", options.bits);
  TURBOKV_CHECK(options.group_size == 32 || options.group_size == 64 || options.group_size == 128,
                "AffineKVCache: group_size must be 32, 64 or 128, got {}", options.group_size);
  const std::string problem = shape_problem(head_dim, options);
  TURBOKV_CHECK(problem.empty(), "AffineKVCache: {}", problem);
  groups_per_row_ = static_cast<size_t>(head_dim / options.group_size);
  code_bytes_ = baseline::packed_bytes(head_dim, options.bits);
  for (int w = 0; w < 2; ++w) {
    codes_[w].resize(kv_heads);
    scales_[w].resize(kv_heads);
    biases_[w].resize(kv_heads);
  }
}

void AffineKVCache::append(std::span<const float> keys, std::span<const float> values,
                           size_t n_tokens) {
  baseline::check_append_input("AffineKVCache", keys, values, n_tokens, kv_heads_, head_dim_,
                               true);
  const size_t d = head_dim_, g = options_.group_size;
  std::vector<uint8_t> codes(d);
  for (int w = 0; w < 2; ++w) {
    const float* src = (w == 0 ? keys : values).data();
    for (int h = 0; h < kv_heads_; ++h) {
      auto& code_store = codes_[w][h];
      auto& scale_store = scales_[w][h];
      auto& bias_store = biases_[w][h];
      for (size_t t = 0; t < n_tokens; ++t) {
        const float* row = src + (h * n_tokens + t) * d;
        const size_t s_at = scale_store.size();
        scale_store.resize(s_at + groups_per_row_);
        bias_store.resize(s_at + groups_per_row_);
        for (size_t k = 0; k < groups_per_row_; ++k) {
          quantize_group_affine(row + k * g, static_cast<int>(g), options_.bits,
                                codes.data() + k * g, &scale_store[s_at + k],
                                &bias_store[s_at + k]);
        }
        const size_t c_at = code_store.size();
        code_store.resize(c_at + code_bytes_);
        baseline::pack_lsb(codes.data(), d, options_.bits, code_store.data() + c_at);
      }
    }
  }
  size_ += n_tokens;
}

void AffineKVCache::fetch(std::span<float> keys, std::span<float> values) const {
  const size_t d = head_dim_, g = options_.group_size;
  baseline::check_fetch_output("AffineKVCache", keys, values, kv_heads_ * size_ * d);
  for (int w = 0; w < 2; ++w) {
    float* out = (w == 0 ? keys : values).data();
    for (int h = 0; h < kv_heads_; ++h) {
      for (size_t t = 0; t < size_; ++t) {
        const uint8_t* codes = codes_[w][h].data() + t * code_bytes_;
        const uint16_t* scales = scales_[w][h].data() + t * groups_per_row_;
        const uint16_t* biases = biases_[w][h].data() + t * groups_per_row_;
        float* row = out + (h * size_ + t) * d;
        for (size_t c = 0; c < d; ++c) {
          row[c] = half_to_float(scales[c / g]) *
                       static_cast<float>(baseline::code_at(codes, c, options_.bits)) +
                   half_to_float(biases[c / g]);
        }
      }
    }
  }
}

size_t AffineKVCache::trim(size_t n) {
  const size_t dropped = std::min(n, size_);
  size_ -= dropped;
  for (int w = 0; w < 2; ++w) {
    for (int h = 0; h < kv_heads_; ++h) {
      codes_[w][h].resize(size_ * code_bytes_);
      scales_[w][h].resize(size_ * groups_per_row_);
      biases_[w][h].resize(size_ * groups_per_row_);
    }
  }
  return dropped;
}

size_t AffineKVCache::nbytes() const {
  size_t total = 0;
  for (int w = 0; w < 2; ++w) {
    for (int h = 0; h < kv_heads_; ++h) {
      total += codes_[w][h].size() + 2 * (scales_[w][h].size() + biases_[w][h].size());
    }
  }
  return total;
}

double AffineKVCache::bits_per_value() const {
  if (size_ == 0) {
    return 8.0 * (static_cast<double>(code_bytes_) + 4.0 * static_cast<double>(groups_per_row_)) /
           head_dim_;
  }
  return 8.0 * static_cast<double>(nbytes()) /
         (2.0 * static_cast<double>(size_) * kv_heads_ * head_dim_);
}

CacheState AffineKVCache::save_state() const {
  CacheState state;
  state.metadata = {{"class", class_name()},
                    {"kv_heads", std::to_string(kv_heads_)},
                    {"head_dim", std::to_string(head_dim_)},
                    {"bits", std::to_string(options_.bits)},
                    {"group_size", std::to_string(options_.group_size)},
                    {"tokens", std::to_string(size_)}};
  for (int w = 0; w < 2; ++w) {
    const std::string prefix = w == 0 ? "key_" : "value_";
    state.tensors.push_back(baseline::make_blob(prefix + "codes", "U8", codes_[w], size_, code_bytes_));
    state.tensors.push_back(
        baseline::make_blob(prefix + "scales", "F16", scales_[w], size_, groups_per_row_));
    state.tensors.push_back(
        baseline::make_blob(prefix + "biases", "F16", biases_[w], size_, groups_per_row_));
  }
  return state;
}

std::unique_ptr<AffineKVCache> AffineKVCache::from_state(const CacheState& state) {
  TURBOKV_CHECK(detail::meta_string(state, "class") == "affine",
                "AffineKVCache: state has class '{}', expected 'affine'",
                detail::meta_string(state, "class"));
  const int kv_heads = static_cast<int>(detail::meta_int(state, "kv_heads", 1, 4096));
  const int head_dim = static_cast<int>(detail::meta_int(state, "head_dim", 1, 8192));
  AffineOptions options;
  options.bits = static_cast<int>(detail::meta_int(state, "bits", 1, 8));
  options.group_size = static_cast<int>(detail::meta_int(state, "group_size", 1, 1024));
  auto cache = std::make_unique<AffineKVCache>(kv_heads, head_dim, options);
  const auto tokens = static_cast<size_t>(
      detail::meta_int(state, "tokens", 0, (int64_t{1} << 40) / (int64_t{kv_heads} * head_dim)));
  detail::check_tensor_names(state, {"key_codes", "key_scales", "key_biases", "value_codes",
                                     "value_scales", "value_biases"});
  const int64_t h = kv_heads, t = static_cast<int64_t>(tokens);
  const auto cb = static_cast<int64_t>(cache->code_bytes_);
  const auto gr = static_cast<int64_t>(cache->groups_per_row_);
  for (int w = 0; w < 2; ++w) {
    const std::string prefix = w == 0 ? "key_" : "value_";
    baseline::read_blob(detail::find_tensor(state, prefix + "codes", "U8", {h, t, cb}),
                        cache->codes_[w], tokens, cache->code_bytes_);
    baseline::read_blob(detail::find_tensor(state, prefix + "scales", "F16", {h, t, gr}),
                        cache->scales_[w], tokens, cache->groups_per_row_);
    baseline::read_blob(detail::find_tensor(state, prefix + "biases", "F16", {h, t, gr}),
                        cache->biases_[w], tokens, cache->groups_per_row_);
    baseline::check_halves_finite(cache->scales_[w], "affine scales");
    baseline::check_halves_finite(cache->biases_[w], "affine biases");
  }
  cache->size_ = tokens;
  return cache;
}

std::unique_ptr<KVCache> load_baseline_cache(const CacheState& state) {
  const std::string& cls = detail::meta_string(state, "class");
  if (cls == "q8_0" || cls == "q4_0") return BlockQuantKVCache::from_state(state);
  if (cls == "kivi") return KiviKVCache::from_state(state);
  if (cls == "affine") return AffineKVCache::from_state(state);
  detail::fail("load_baseline_cache: '{}' is not a baseline cache class", cls);
}

}  // namespace turbokv
