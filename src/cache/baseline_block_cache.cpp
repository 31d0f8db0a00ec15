// llama.cpp's q8_0 / q4_0 KV-cache types (and the same after a Hadamard rotation of each head
// row), following ggml's reference quantizers: the block scale is computed in float32 and used
// to quantize, then stored as fp16 (so decode uses the rounded scale, exactly like ggml).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cache/baseline_common.hpp"
#include "cache/cache_state_util.hpp"
#include "turbokv/baseline_caches.hpp"
#include "turbokv/rotation.hpp"

namespace turbokv {

namespace {

// 1 / d, or 0 where ggml's would be 0 or overflow (|d| below ~3e-39): such blocks decode to 0
// anyway, since their fp16 scale is 0, and this keeps the float -> int conversions defined.
float inverse_scale(float d) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  return std::isfinite(id) ? id : 0.0f;
}

}  // namespace

void quantize_row_q8_0(const float* x, size_t n, uint8_t* out) {
  TURBOKV_CHECK(n % kGgmlBlockValues == 0, "quantize_row_q8_0: n = {} is not a multiple of 32", n);
  for (size_t b = 0; b < n / kGgmlBlockValues; ++b) {
    const float* xb = x + b * kGgmlBlockValues;
    uint8_t* block = out + b * kQ8_0BlockBytes;
    float amax = 0.0f;
    for (int j = 0; j < kGgmlBlockValues; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = inverse_scale(d);
    baseline::store_half(block, d);
    for (int j = 0; j < kGgmlBlockValues; ++j) {
      const auto q = static_cast<int8_t>(std::lround(xb[j] * id));
      std::memcpy(block + 2 + j, &q, 1);
    }
  }
}

void dequantize_row_q8_0(const uint8_t* blocks, size_t n, float* x) {
  for (size_t b = 0; b < n / kGgmlBlockValues; ++b) {
    const uint8_t* block = blocks + b * kQ8_0BlockBytes;
    const float d = baseline::load_half(block);
    for (int j = 0; j < kGgmlBlockValues; ++j) {
      int8_t q;
      std::memcpy(&q, block + 2 + j, 1);
      x[b * kGgmlBlockValues + j] = d * static_cast<float>(q);
    }
  }
}

void quantize_row_q4_0(const float* x, size_t n, uint8_t* out) {
  TURBOKV_CHECK(n % kGgmlBlockValues == 0, "quantize_row_q4_0: n = {} is not a multiple of 32", n);
  constexpr int half = kGgmlBlockValues / 2;
  for (size_t b = 0; b < n / kGgmlBlockValues; ++b) {
    const float* xb = x + b * kGgmlBlockValues;
    uint8_t* block = out + b * kQ4_0BlockBytes;
    // The signed value of largest magnitude maps to code 0 exactly (d = max / -8); the other
    // end of the range then reaches only +7 d, which is why q4_0 clamps at 15.
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kGgmlBlockValues; ++j) {
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = inverse_scale(d);
    baseline::store_half(block, d);
    for (int j = 0; j < half; ++j) {
      // x * id lies in [-8, 8]; + 8.5 then truncation rounds half up, as ggml's (int8_t) cast.
      const int q0 = std::min(15, static_cast<int>(xb[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(xb[j + half] * id + 8.5f));
      block[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_row_q4_0(const uint8_t* blocks, size_t n, float* x) {
  constexpr int half = kGgmlBlockValues / 2;
  for (size_t b = 0; b < n / kGgmlBlockValues; ++b) {
    const uint8_t* block = blocks + b * kQ4_0BlockBytes;
    const float d = baseline::load_half(block);
    float* xb = x + b * kGgmlBlockValues;
    for (int j = 0; j < half; ++j) {
      xb[j] = d * static_cast<float>((block[2 + j] & 0x0f) - 8);
      xb[j + half] = d * static_cast<float>((block[2 + j] >> 4) - 8);
    }
  }
}

namespace {

const char* format_name(BlockQuantFormat f) { return f == BlockQuantFormat::q8_0 ? "q8_0" : "q4_0"; }

size_t block_bytes(BlockQuantFormat f) {
  return f == BlockQuantFormat::q8_0 ? kQ8_0BlockBytes : kQ4_0BlockBytes;
}

}  // namespace

std::string BlockQuantKVCache::shape_problem(int head_dim, const BlockQuantOptions& options) {
  if (head_dim <= 0 || head_dim % kGgmlBlockValues != 0) {
    return fmt::format("{}{} is not applicable: head_dim {} is not a multiple of its 32-value "
                       "block",
                       format_name(options.format), options.hadamard ? "h" : "", head_dim);
  }
  return "";
}

BlockQuantKVCache::BlockQuantKVCache(int kv_heads, int head_dim, const BlockQuantOptions& options)
    : kv_heads_(kv_heads), head_dim_(head_dim), options_(options) {
  baseline::check_shape("BlockQuantKVCache", kv_heads, head_dim);
  const std::string problem = shape_problem(head_dim, options);
  TURBOKV_CHECK(problem.empty(), "BlockQuantKVCache: {}", problem);
  row_bytes_ = static_cast<size_t>(head_dim / kGgmlBlockValues) * block_bytes(options.format);
  if (options.hadamard) rotation_ = make_rotation(RotationKind::hadamard, head_dim, options.rotation_seed);
  keys_.resize(kv_heads);
  values_.resize(kv_heads);
}

BlockQuantKVCache::~BlockQuantKVCache() = default;

std::string BlockQuantKVCache::class_name() const { return format_name(options_.format); }

void BlockQuantKVCache::encode_rows(const float* rows, size_t n, uint8_t* out,
                                    std::vector<float>& scratch) const {
  const float* src = rows;
  if (rotation_) {
    scratch.resize(n * head_dim_);
    rotation_->forward(rows, scratch.data(), n);
    src = scratch.data();
  }
  const size_t values = n * static_cast<size_t>(head_dim_);
  if (options_.format == BlockQuantFormat::q8_0) {
    quantize_row_q8_0(src, values, out);
  } else {
    quantize_row_q4_0(src, values, out);
  }
  // A rotated row can exceed the fp16 scale's range even when each input fits.
  const size_t bb = block_bytes(options_.format);
  for (size_t b = 0; b < values / kGgmlBlockValues; ++b) {
    const uint16_t d = static_cast<uint16_t>(out[b * bb] | (out[b * bb + 1] << 8));
    TURBOKV_CHECK(half_is_finite(d),
                  "{}: a block's scale overflows fp16 (input magnitude too large)", class_name());
  }
}

void BlockQuantKVCache::append(std::span<const float> keys, std::span<const float> values,
                               size_t n_tokens) {
  baseline::check_append_input(format_name(options_.format), keys, values, n_tokens, kv_heads_,
                               head_dim_, false);
  if (n_tokens == 0) return;
  // Encode everything first so a rejected append leaves the cache unchanged.
  const size_t head_bytes = n_tokens * row_bytes_;
  const size_t head_floats = n_tokens * static_cast<size_t>(head_dim_);
  std::vector<uint8_t> encoded(2 * kv_heads_ * head_bytes);
  std::vector<float> scratch;
  for (int h = 0; h < kv_heads_; ++h) {
    encode_rows(keys.data() + h * head_floats, n_tokens, encoded.data() + (2 * h) * head_bytes,
                scratch);
    encode_rows(values.data() + h * head_floats, n_tokens,
                encoded.data() + (2 * h + 1) * head_bytes, scratch);
  }
  for (int h = 0; h < kv_heads_; ++h) {
    const uint8_t* k = encoded.data() + (2 * h) * head_bytes;
    keys_[h].insert(keys_[h].end(), k, k + head_bytes);
    values_[h].insert(values_[h].end(), k + head_bytes, k + 2 * head_bytes);
  }
  size_ += n_tokens;
}

void BlockQuantKVCache::fetch(std::span<float> keys, std::span<float> values) const {
  const size_t head_floats = size_ * static_cast<size_t>(head_dim_);
  baseline::check_fetch_output(format_name(options_.format), keys, values, kv_heads_ * head_floats);
  for (int which = 0; which < 2; ++which) {
    const auto& store = which == 0 ? keys_ : values_;
    float* out = (which == 0 ? keys : values).data();
    for (int h = 0; h < kv_heads_; ++h) {
      float* dst = out + h * head_floats;
      if (options_.format == BlockQuantFormat::q8_0) {
        dequantize_row_q8_0(store[h].data(), head_floats, dst);
      } else {
        dequantize_row_q4_0(store[h].data(), head_floats, dst);
      }
      if (rotation_ && size_ > 0) rotation_->inverse(dst, dst, size_);
    }
  }
}

size_t BlockQuantKVCache::trim(size_t n) {
  const size_t dropped = std::min(n, size_);
  size_ -= dropped;
  for (int h = 0; h < kv_heads_; ++h) {
    keys_[h].resize(size_ * row_bytes_);
    values_[h].resize(size_ * row_bytes_);
  }
  return dropped;
}

size_t BlockQuantKVCache::nbytes() const {
  size_t total = 0;
  for (int h = 0; h < kv_heads_; ++h) total += keys_[h].size() + values_[h].size();
  return total;
}

double BlockQuantKVCache::bits_per_value() const {
  if (size_ == 0) {
    return 8.0 * static_cast<double>(block_bytes(options_.format)) / kGgmlBlockValues;
  }
  return 8.0 * static_cast<double>(nbytes()) /
         (2.0 * static_cast<double>(size_) * kv_heads_ * head_dim_);
}

CacheState BlockQuantKVCache::save_state() const {
  CacheState state;
  state.metadata = {{"class", class_name()},
                    {"kv_heads", std::to_string(kv_heads_)},
                    {"head_dim", std::to_string(head_dim_)},
                    {"tokens", std::to_string(size_)},
                    {"rotation", options_.hadamard ? "hadamard" : "none"},
                    {"rotation_seed", std::to_string(options_.rotation_seed)}};
  state.tensors.push_back(baseline::make_blob("keys", "U8", keys_, size_, row_bytes_));
  state.tensors.push_back(baseline::make_blob("values", "U8", values_, size_, row_bytes_));
  return state;
}

std::unique_ptr<BlockQuantKVCache> BlockQuantKVCache::from_state(const CacheState& state) {
  const std::string& cls = detail::meta_string(state, "class");
  TURBOKV_CHECK(cls == "q8_0" || cls == "q4_0",
                "BlockQuantKVCache: state has class '{}', expected 'q8_0' or 'q4_0'", cls);
  BlockQuantOptions options;
  options.format = cls == "q8_0" ? BlockQuantFormat::q8_0 : BlockQuantFormat::q4_0;
  const std::string& rotation = detail::meta_string(state, "rotation");
  TURBOKV_CHECK(rotation == "none" || rotation == "hadamard",
                "BlockQuantKVCache: unknown rotation '{}'", rotation);
  options.hadamard = rotation == "hadamard";
  options.rotation_seed = detail::meta_u64(state, "rotation_seed");
  const int kv_heads = static_cast<int>(detail::meta_int(state, "kv_heads", 1, 4096));
  const int head_dim = static_cast<int>(detail::meta_int(state, "head_dim", 1, 8192));
  const auto tokens = static_cast<size_t>(
      detail::meta_int(state, "tokens", 0, (int64_t{1} << 40) / (int64_t{kv_heads} * head_dim)));
  auto cache = std::make_unique<BlockQuantKVCache>(kv_heads, head_dim, options);
  detail::check_tensor_names(state, {"keys", "values"});
  const std::vector<int64_t> shape = {kv_heads, static_cast<int64_t>(tokens),
                                      static_cast<int64_t>(cache->row_bytes_)};
  baseline::read_blob(detail::find_tensor(state, "keys", "U8", shape), cache->keys_, tokens,
                      cache->row_bytes_);
  baseline::read_blob(detail::find_tensor(state, "values", "U8", shape), cache->values_, tokens,
                      cache->row_bytes_);
  const size_t bb = block_bytes(options.format);
  for (int which = 0; which < 2; ++which) {
    for (const auto& v : which == 0 ? cache->keys_ : cache->values_) {
      for (size_t off = 0; off < v.size(); off += bb) {
        TURBOKV_CHECK(half_is_finite(static_cast<uint16_t>(v[off] | (v[off + 1] << 8))),
                      "cache state: non-finite block scale in {} {}", cls,
                      which == 0 ? "keys" : "values");
      }
    }
  }
  cache->size_ = tokens;
  return cache;
}

}  // namespace turbokv
