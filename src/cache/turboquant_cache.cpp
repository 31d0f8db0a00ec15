#include "turbokv/turboquant_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "cache/aligned_buffer.hpp"
#include "cache/cache_state_util.hpp"
#include "core/check.hpp"
#include "turbokv/half.hpp"

namespace turbokv {
namespace {

constexpr size_t kMaxExactTokens = size_t{1} << 24;  // cap on options.window / options.sinks
constexpr size_t kMaxSinkBytes = size_t{256} << 20;  // cap on the up-front sink buffers

bool valid_bits(double bits) {
  return bits >= 1 && bits <= 8 && std::floor(bits * 2) == bits * 2;
}

}  // namespace

struct TurboQuantKVCache::Page {
  detail::AlignedBytes keys;
  detail::AlignedBytes values;
};

std::string codec_kind_name(TurboQuantCodecKind kind) {
  return kind == TurboQuantCodecKind::mse ? "mse" : "prod";
}

TurboQuantCodecKind parse_codec_kind(const std::string& name) {
  if (name == "mse") return TurboQuantCodecKind::mse;
  if (name == "prod") return TurboQuantCodecKind::prod;
  detail::fail("TurboQuantKVCache: codec must be 'mse' or 'prod', got '{}'", name);
}

TurboQuantKVCache::TurboQuantKVCache(int kv_heads, int head_dim,
                                     const TurboQuantCacheOptions& options)
    : kv_heads_(kv_heads), head_dim_(head_dim), options_(options) {
  TURBOKV_CHECK(kv_heads >= 1 && kv_heads <= 4096,
                "TurboQuantKVCache: kv_heads must be in [1, 4096], got {}", kv_heads);
  TURBOKV_CHECK(head_dim >= 2 && head_dim <= 8192,
                "TurboQuantKVCache: head_dim must be in [2, 8192], got {}", head_dim);
  TURBOKV_CHECK(valid_bits(options.key_bits),
                "TurboQuantKVCache: key_bits must be in [1, 8] in steps of 0.5, got {}",
                options.key_bits);
  TURBOKV_CHECK(valid_bits(options.value_bits),
                "TurboQuantKVCache: value_bits must be in [1, 8] in steps of 0.5, got {}",
                options.value_bits);
  TURBOKV_CHECK(options.key_codec == TurboQuantCodecKind::mse ||
                    options.key_codec == TurboQuantCodecKind::prod,
                "TurboQuantKVCache: unknown key codec {}", static_cast<int>(options.key_codec));
  TURBOKV_CHECK(options.value_codec == TurboQuantCodecKind::mse,
                "TurboQuantKVCache: value_codec must be mse (prod estimates inner products, "
                "values need reconstructions)");
  TURBOKV_CHECK(options.page_tokens >= 1 && options.page_tokens <= 65536,
                "TurboQuantKVCache: page_tokens must be in [1, 65536], got {}",
                options.page_tokens);
  TURBOKV_CHECK(options.window <= kMaxExactTokens && options.sinks <= kMaxExactTokens,
                "TurboQuantKVCache: window ({}) and sinks ({}) must be at most {}", options.window,
                options.sinks, kMaxExactTokens);

  CodecOptions key_options;
  key_options.dim = head_dim;
  key_options.bits = options.key_bits;
  key_options.rotation = options.rotation;
  key_options.seed = options.seed;
  key_options.fp32_norm = options.fp32_norm;
  key_options.norm_correction = options.norm_correction;
  CodecOptions value_options = key_options;
  value_options.bits = options.value_bits;
  value_options.seed = options.seed + 1;
  if (options.key_codec == TurboQuantCodecKind::prod) {
    key_prod_ = std::make_unique<TurboQuantProd>(key_options);
    key_code_size_ = key_prod_->code_size();
  } else {
    key_mse_ = std::make_unique<TurboQuantMse>(key_options);
    key_code_size_ = key_mse_->code_size();
  }
  value_mse_ = std::make_unique<TurboQuantMse>(value_options);
  value_code_size_ = value_mse_->code_size();

  // The sink buffers are allocated up front ([kv_heads][sinks][head_dim] for keys and values),
  // so their size is bounded before allocating: a file's metadata must not be able to request
  // gigabytes (2^24 sinks of 64 heads x 128 would be 512 GiB).
  TURBOKV_CHECK(options.exact_dtype == DenseDtype::f32 || options.exact_dtype == DenseDtype::f16,
                "TurboQuantKVCache: unknown exact_dtype {}", static_cast<int>(options.exact_dtype));
  const size_t sink_bytes_per_token = 2 * sizeof(float) * static_cast<size_t>(kv_heads) * head_dim;
  TURBOKV_CHECK(options.sinks <= kMaxSinkBytes / sink_bytes_per_token,
                "TurboQuantKVCache: {} sinks of {} kv heads x {} would take more than {} MiB of "
                "exact storage", options.sinks, kv_heads, head_dim, kMaxSinkBytes >> 20);
  const size_t sink_elements = static_cast<size_t>(kv_heads) * options.sinks * head_dim;
  if (options.exact_dtype == DenseDtype::f16) {
    for (auto& buf : sink16_) buf.resize(sink_elements);
  } else {
    for (auto& buf : sink_buf_) buf.resize(sink_elements);
  }
  TURBOKV_CHECK(!options.center || options.sinks >= 1,
                "TurboQuantKVCache: centering needs at least one sink token (its mean is taken from "
                "the sinks)");
  if (options.center) {
    for (auto& buf : center_buf_) buf.assign(static_cast<size_t>(kv_heads) * head_dim, 0.0f);
  }
}

TurboQuantKVCache::~TurboQuantKVCache() = default;

size_t TurboQuantKVCache::nbytes() const {
  const size_t element = exact_f16() ? 2 : 4;
  const size_t exact = (n_sinks_ + window_size_) * static_cast<size_t>(head_dim_) * element * 2;
  // A centered cache's two means decode every compressed token, so they count once any is held.
  const size_t means = options_.center && compressed_size_ > 0 ? static_cast<size_t>(head_dim_) * 4 * 2 : 0;
  size_t held = 0;
  for (size_t p = 0; p < pages_.size(); ++p) {
    if (pages_[p]) held += tokens_in_page(p);
  }
  return static_cast<size_t>(kv_heads_) * (held * (key_code_size_ + value_code_size_) + exact + means);
}

void TurboQuantKVCache::resize_pages(size_t n) { pages_.resize(n); }

size_t TurboQuantKVCache::dropped_compressed() const {
  return first_held_ > n_sinks_ ? std::min(first_held_ - n_sinks_, compressed_size_) : 0;
}

size_t TurboQuantKVCache::drop_before(size_t position) {
  const size_t pt = options_.page_tokens;
  // Whole, full compressed pages only; sinks and the exact window are kept.
  size_t p = 0;
  for (; (p + 1) * pt <= compressed_size_ && n_sinks_ + (p + 1) * pt <= position; ++p) pages_[p].reset();
  if (p > 0) first_held_ = std::max(first_held_, n_sinks_ + p * pt);
  return first_held_;
}

size_t TurboQuantKVCache::allocated_bytes() const {
  const size_t held_pages =
      static_cast<size_t>(std::count_if(pages_.begin(), pages_.end(), [](const auto& p) { return p != nullptr; }));
  size_t total = held_pages * kv_heads_ * (head_stride_bytes(false) + head_stride_bytes(true));
  for (int i = 0; i < 2; ++i) {
    total += (sink_buf_[i].size() + window_buf_[i].size() + center_buf_[i].size()) * sizeof(float);
    total += (sink16_[i].size() + window16_[i].size()) * sizeof(uint16_t);
  }
  return total;
}

size_t TurboQuantKVCache::tokens_in_page(size_t page) const {
  TURBOKV_CHECK(page < pages_.size(), "TurboQuantKVCache: page {} out of range ({} pages)", page,
                pages_.size());
  return std::min(options_.page_tokens, compressed_size_ - page * options_.page_tokens);
}

size_t TurboQuantKVCache::head_stride_bytes(bool value) const {
  const size_t code_size = value ? value_code_size_ : key_code_size_;
  return detail::round_up_to_alignment(options_.page_tokens * code_size);
}

uint8_t* TurboQuantKVCache::codes_ptr(size_t page, int head, bool value) const {
  TURBOKV_CHECK(pages_[page] != nullptr, "TurboQuantKVCache: page {} was freed (positions before {} are not held)",
                page, first_held_);
  uint8_t* base = value ? pages_[page]->values.get() : pages_[page]->keys.get();
  return base + static_cast<size_t>(head) * head_stride_bytes(value);
}

void TurboQuantKVCache::prefetch_page(size_t page) const {
  if (page < pages_.size() && pages_[page] != nullptr) __builtin_prefetch(pages_[page].get());
}

const uint8_t* TurboQuantKVCache::key_codes(size_t page, int head) const {
  TURBOKV_CHECK(page < pages_.size() && head >= 0 && head < kv_heads_,
                "TurboQuantKVCache: key_codes({}, {}) out of range ({} pages, {} heads)", page,
                head, pages_.size(), kv_heads_);
  return codes_ptr(page, head, false);
}

const uint8_t* TurboQuantKVCache::value_codes(size_t page, int head) const {
  TURBOKV_CHECK(page < pages_.size() && head >= 0 && head < kv_heads_,
                "TurboQuantKVCache: value_codes({}, {}) out of range ({} pages, {} heads)", page,
                head, pages_.size(), kv_heads_);
  return codes_ptr(page, head, true);
}

float* TurboQuantKVCache::sink_ptr(bool value, int head) const {
  auto& buf = const_cast<std::vector<float>&>(sink_buf_[value ? 1 : 0]);
  return buf.data() + static_cast<size_t>(head) * options_.sinks * head_dim_;
}

float* TurboQuantKVCache::window_base(bool value, int head) const {
  auto& buf = const_cast<std::vector<float>&>(window_buf_[value ? 1 : 0]);
  return buf.data() + static_cast<size_t>(head) * window_capacity_ * head_dim_;
}

uint16_t* TurboQuantKVCache::sink_ptr16(bool value, int head) const {
  auto& buf = const_cast<std::vector<uint16_t>&>(sink16_[value ? 1 : 0]);
  return buf.data() + static_cast<size_t>(head) * options_.sinks * head_dim_;
}

uint16_t* TurboQuantKVCache::window_base16(bool value, int head) const {
  auto& buf = const_cast<std::vector<uint16_t>&>(window16_[value ? 1 : 0]);
  return buf.data() + static_cast<size_t>(head) * window_capacity_ * head_dim_;
}

void TurboQuantKVCache::write_exact(bool window, bool value, int head, size_t slot, const float* src,
                                    size_t count) {
  const size_t n = count * head_dim_;
  if (n == 0) return;
  if (exact_f16()) {
    uint16_t* dst = (window ? window_base16(value, head) : sink_ptr16(value, head)) + slot * head_dim_;
    for (size_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
  } else {
    float* dst = (window ? window_base(value, head) : sink_ptr(value, head)) + slot * head_dim_;
    std::memcpy(dst, src, n * sizeof(float));
  }
}

void TurboQuantKVCache::read_exact(bool window, bool value, int head, size_t slot, size_t count,
                                   float* dst) const {
  const size_t n = count * head_dim_;
  if (n == 0) return;
  if (exact_f16()) {
    const uint16_t* src = (window ? window_base16(value, head) : sink_ptr16(value, head)) + slot * head_dim_;
    for (size_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
  } else {
    const float* src = (window ? window_base(value, head) : sink_ptr(value, head)) + slot * head_dim_;
    std::memcpy(dst, src, n * sizeof(float));
  }
}

#define TKV_EXACT_ACCESSOR(type, name, check, expr)                                        \
  const type* TurboQuantKVCache::name(int head) const {                                    \
    TURBOKV_CHECK(head >= 0 && head < kv_heads_, "TurboQuantKVCache: head {} out of range", head); \
    TURBOKV_CHECK(check, "TurboQuantKVCache::" #name ": the exact regions are stored as {}",  \
                  exact_f16() ? "fp16 (use the _f16 accessors)" : "float32");              \
    return expr;                                                                           \
  }
TKV_EXACT_ACCESSOR(float, sink_keys, !exact_f16(), sink_ptr(false, head))
TKV_EXACT_ACCESSOR(float, sink_values, !exact_f16(), sink_ptr(true, head))
TKV_EXACT_ACCESSOR(float, window_keys, !exact_f16(), window_base(false, head) + window_start_ * head_dim_)
TKV_EXACT_ACCESSOR(float, window_values, !exact_f16(), window_base(true, head) + window_start_ * head_dim_)
TKV_EXACT_ACCESSOR(uint16_t, sink_keys_f16, exact_f16(), sink_ptr16(false, head))
TKV_EXACT_ACCESSOR(uint16_t, sink_values_f16, exact_f16(), sink_ptr16(true, head))
TKV_EXACT_ACCESSOR(uint16_t, window_keys_f16, exact_f16(), window_base16(false, head) + window_start_ * head_dim_)
TKV_EXACT_ACCESSOR(uint16_t, window_values_f16, exact_f16(), window_base16(true, head) + window_start_ * head_dim_)
#undef TKV_EXACT_ACCESSOR

void TurboQuantKVCache::ensure_page(size_t page) {
  if (page < pages_.size() && pages_[page]) return;
  auto fresh = std::make_unique<Page>();
  fresh->keys = detail::allocate_aligned(kv_heads_ * head_stride_bytes(false));
  fresh->values = detail::allocate_aligned(kv_heads_ * head_stride_bytes(true));
  if (page >= pages_.size()) pages_.resize(page + 1);
  pages_[page] = std::move(fresh);
}

void TurboQuantKVCache::compress(const float* keys, const float* values, size_t head_stride,
                                 size_t count) {
  const size_t d = head_dim_;
  const size_t pt = options_.page_tokens;
  size_t done = 0;
  while (done < count) {
    const size_t pos = compressed_size_ + done;
    const size_t page = pos / pt, slot = pos % pt;
    ensure_page(page);
    const size_t n = std::min(pt - slot, count - done);
    for (int h = 0; h < kv_heads_; ++h) {
      const float* k = keys + h * head_stride + done * d;
      const float* v = values + h * head_stride + done * d;
      uint8_t* kc = codes_ptr(page, h, false) + slot * key_code_size_;
      uint8_t* vc = codes_ptr(page, h, true) + slot * value_code_size_;
      encode_rows(false, h, k, n, kc);
      encode_rows(true, h, v, n, vc);
    }
    done += n;
  }
  compressed_size_ += count;
}

void TurboQuantKVCache::encode_rows(bool value, int head, const float* x, size_t n,
                                    uint8_t* out) const {
  std::vector<float> centered;
  if (options_.center) {
    const size_t d = head_dim_;
    const float* mean = center_buf_[value ? 1 : 0].data() + static_cast<size_t>(head) * d;
    centered.resize(n * d);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < d; ++j) centered[i * d + j] = x[i * d + j] - mean[j];
    }
    x = centered.data();
  }
  if (value) {
    value_mse_->encode(x, n, out);
  } else if (key_prod_) {
    key_prod_->encode(x, n, out);
  } else {
    key_mse_->encode(x, n, out);
  }
}

void TurboQuantKVCache::update_centers() {
  const size_t d = head_dim_;
  for (int which = 0; which < 2; ++which) {
    std::vector<float> rows(n_sinks_ * d);
    for (int h = 0; h < kv_heads_; ++h) {
      read_exact(false, which == 1, h, 0, n_sinks_, rows.data());
      const float* sinks = rows.data();
      float* mean = center_buf_[which].data() + static_cast<size_t>(h) * d;
      for (size_t j = 0; j < d; ++j) {
        double sum = 0.0;
        for (size_t t = 0; t < n_sinks_; ++t) sum += sinks[t * d + j];
        mean[j] = static_cast<float>(sum / static_cast<double>(n_sinks_));
      }
    }
  }
}

const float* TurboQuantKVCache::key_center(int head) const {
  if (!options_.center) return nullptr;
  TURBOKV_CHECK(head >= 0 && head < kv_heads_, "TurboQuantKVCache: head {} out of range", head);
  return center_buf_[0].data() + static_cast<size_t>(head) * head_dim_;
}

const float* TurboQuantKVCache::value_center(int head) const {
  if (!options_.center) return nullptr;
  TURBOKV_CHECK(head >= 0 && head < kv_heads_, "TurboQuantKVCache: head {} out of range", head);
  return center_buf_[1].data() + static_cast<size_t>(head) * head_dim_;
}

void TurboQuantKVCache::evict_window(size_t count) {
  // The oldest `count` window tokens move to the compressed pages.
  if (exact_f16()) {
    // The codec reads float rows: the fp16 window rows (exactly the rounded input) in float.
    std::vector<float> k(static_cast<size_t>(kv_heads_) * count * head_dim_), v(k.size());
    for (int h = 0; h < kv_heads_; ++h) {
      read_exact(true, false, h, window_start_, count, k.data() + h * count * head_dim_);
      read_exact(true, true, h, window_start_, count, v.data() + h * count * head_dim_);
    }
    compress(k.data(), v.data(), count * head_dim_, count);
  } else {
    const size_t head_stride = window_capacity_ * head_dim_;
    compress(window_base(false, 0) + window_start_ * head_dim_,
             window_base(true, 0) + window_start_ * head_dim_, head_stride, count);
  }
  window_start_ += count;
  window_size_ -= count;
  if (window_size_ == 0) window_start_ = 0;
}

void TurboQuantKVCache::push_window(const float* keys, const float* values, size_t head_stride,
                                    size_t count) {
  const size_t d = head_dim_;
  const size_t needed = window_size_ + count;  // <= options.window
  if (window_start_ + needed > window_capacity_) {
    // Compact in place when half the buffer suffices, otherwise grow, to at most `window`
    // slots: the window costs exactly what it holds once full (a server counts every byte), at
    // the price of moving its rows down on each append after that (window rows per append,
    // small next to encoding the token that leaves it).
    const size_t new_capacity =
        needed <= window_capacity_ / 2
            ? window_capacity_
            : std::min(std::max<size_t>(2 * needed, 16), options_.window);
    auto relayout = [&](auto& buf) {
      using Buffer = std::remove_reference_t<decltype(buf)>;
      Buffer fresh;
      Buffer* target = &buf;
      if (new_capacity != window_capacity_) {
        fresh.resize(static_cast<size_t>(kv_heads_) * new_capacity * d);
        target = &fresh;
      }
      for (int h = 0; h < kv_heads_; ++h) {
        const auto* src = buf.data() + (h * window_capacity_ + window_start_) * d;
        auto* dst = target->data() + h * new_capacity * d;
        // Guarded: the first growth starts from an empty (null) buffer; memmove(_, null, 0) is UB.
        if (window_size_ > 0) std::memmove(dst, src, window_size_ * d * sizeof(*src));
      }
      if (target == &fresh) buf = std::move(fresh);
    };
    for (int i = 0; i < 2; ++i) {
      if (exact_f16()) {
        relayout(window16_[i]);
      } else {
        relayout(window_buf_[i]);
      }
    }
    window_capacity_ = new_capacity;
    window_start_ = 0;
  }
  for (int h = 0; h < kv_heads_; ++h) {
    const size_t slot = window_start_ + window_size_;
    write_exact(true, false, h, slot, keys + h * head_stride, count);
    write_exact(true, true, h, slot, values + h * head_stride, count);
  }
  window_size_ += count;
}

void TurboQuantKVCache::append(std::span<const float> keys, std::span<const float> values,
                               size_t n_tokens) {
  const size_t d = head_dim_;
  const size_t row = static_cast<size_t>(kv_heads_) * d;
  TURBOKV_CHECK(n_tokens <= (size_t{1} << 40) / row,
                "TurboQuantKVCache::append: n_tokens {} is too large", n_tokens);
  const size_t expected = n_tokens * row;
  TURBOKV_CHECK(keys.size() == expected && values.size() == expected,
                "TurboQuantKVCache::append: expected {} floats ([{}][{}][{}]) for keys and "
                "values, got {} and {}",
                expected, kv_heads_, n_tokens, head_dim_, keys.size(), values.size());
  for (int which = 0; which < 2; ++which) {
    const std::span<const float> data = which == 0 ? keys : values;
    for (size_t i = 0; i < data.size(); ++i) {
      if (!std::isfinite(data[i])) {
        detail::fail("TurboQuantKVCache::append: {} element {} is {} (NaN/Inf input is rejected)",
                     which == 0 ? "keys" : "values", i, data[i]);
      }
    }
  }
  // fp16 exact regions: every token is rounded to fp16 first (see TurboQuantCacheOptions).
  std::vector<float> rounded[2];
  if (exact_f16()) {
    for (int which = 0; which < 2; ++which) {
      const std::span<const float> data = which == 0 ? keys : values;
      rounded[which].resize(data.size());
      for (size_t i = 0; i < data.size(); ++i) {
        rounded[which][i] = half_to_float(float_to_half(data[i]));
        if (!std::isfinite(rounded[which][i])) {
          detail::fail("TurboQuantKVCache::append: {} element {} is {}, beyond the fp16 range of the exact regions",
                       which == 0 ? "keys" : "values", i, data[i]);
        }
      }
    }
    keys = rounded[0];
    values = rounded[1];
  }
  // Only the codec calls can throw (e.g. an fp16 norm overflow); they run before any window
  // slot is written, so restoring the counters undoes a failed append.
  const size_t old_sinks = n_sinks_, old_compressed = compressed_size_;
  const size_t old_window_start = window_start_, old_window_size = window_size_;
  try {
    append_checked(keys.data(), values.data(), n_tokens);
  } catch (...) {
    n_sinks_ = old_sinks;
    compressed_size_ = old_compressed;
    window_start_ = old_window_start;
    window_size_ = old_window_size;
    pages_.resize((compressed_size_ + options_.page_tokens - 1) / options_.page_tokens);
    throw;
  }
}

void TurboQuantKVCache::append_checked(const float* keys, const float* values, size_t n_tokens) {
  const size_t d = head_dim_;
  const size_t head_stride = n_tokens * d;
  size_t first = 0;
  // Sinks: the first options.sinks tokens ever appended (if a trim reached into the sinks, the
  // other regions are empty, so the next tokens are sinks again).
  if (n_sinks_ < options_.sinks && n_tokens > 0) {
    const size_t m = std::min(options_.sinks - n_sinks_, n_tokens);
    for (int h = 0; h < kv_heads_; ++h) {
      write_exact(false, false, h, n_sinks_, keys + h * head_stride, m);
      write_exact(false, true, h, n_sinks_, values + h * head_stride, m);
    }
    n_sinks_ += m;
    first = m;
    if (options_.center && n_sinks_ == options_.sinks) update_centers();
  }
  const size_t rest = n_tokens - first;
  if (rest == 0) return;
  const size_t total = window_size_ + rest;
  size_t evict = total > options_.window ? total - options_.window : 0;
  // Oldest first: window tokens, then the oldest of the new tokens.
  const size_t from_window = std::min(evict, window_size_);
  if (from_window > 0) evict_window(from_window);
  const size_t from_input = evict - from_window;
  if (from_input > 0) {
    compress(keys + first * d, values + first * d, head_stride, from_input);
  }
  const size_t to_window = rest - from_input;
  if (to_window > 0) {
    // Window tokens are encoded only when they leave the window; encode them now into scratch
    // too, so a vector the codec refuses is rejected by this append, not by a later one.
    std::vector<uint8_t> scratch(to_window * std::max(key_code_size_, value_code_size_));
    for (int h = 0; h < kv_heads_; ++h) {
      const float* k = keys + h * head_stride + (first + from_input) * d;
      const float* v = values + h * head_stride + (first + from_input) * d;
      encode_rows(false, h, k, to_window, scratch.data());
      encode_rows(true, h, v, to_window, scratch.data());
    }
    push_window(keys + (first + from_input) * d, values + (first + from_input) * d, head_stride,
                to_window);
  }
}

void TurboQuantKVCache::append_half(std::span<const uint16_t> keys,
                                    std::span<const uint16_t> values, size_t n_tokens,
                                    HalfFormat format) {
  TURBOKV_CHECK(keys.size() == values.size(),
                "TurboQuantKVCache::append_half: keys ({}) and values ({}) differ in size",
                keys.size(), values.size());
  auto convert = [format](uint16_t x) {
    return format == HalfFormat::f16 ? half_to_float(x) : bf16_to_float(x);
  };
  std::vector<float> k(keys.size()), v(values.size());
  std::transform(keys.begin(), keys.end(), k.begin(), convert);
  std::transform(values.begin(), values.end(), v.begin(), convert);
  append(k, v, n_tokens);
}

void TurboQuantKVCache::fetch(std::span<float> keys, std::span<float> values) const {
  const size_t d = head_dim_;
  const size_t n = size();
  const size_t expected = static_cast<size_t>(kv_heads_) * n * d;
  TURBOKV_CHECK(keys.size() == expected && values.size() == expected,
                "TurboQuantKVCache::fetch: expected {} floats ([{}][{}][{}]) for keys and "
                "values, got {} and {}",
                expected, kv_heads_, n, head_dim_, keys.size(), values.size());
  for (int h = 0; h < kv_heads_; ++h) {
    float* k = keys.data() + h * n * d;
    float* v = values.data() + h * n * d;
    read_exact(false, false, h, 0, n_sinks_, k);  // no copy for no rows (null buffers)
    read_exact(false, true, h, 0, n_sinks_, v);
    size_t t = n_sinks_;
    const size_t dropped = dropped_compressed();
    for (size_t p = 0; p < pages_.size(); ++p) {
      const size_t m = tokens_in_page(p);
      if (!pages_[p]) {  // freed by drop_before: zeros, below
        t += m;
        continue;
      }
      if (key_prod_) {
        key_prod_->decode(codes_ptr(p, h, false), m, k + t * d);
      } else {
        key_mse_->decode(codes_ptr(p, h, false), m, k + t * d);
      }
      value_mse_->decode(codes_ptr(p, h, true), m, v + t * d);
      t += m;
    }
    if (options_.center) {
      const float* mk = key_center(h);
      const float* mv = value_center(h);
      for (size_t i = n_sinks_ + dropped; i < n_sinks_ + compressed_size_; ++i) {
        for (size_t j = 0; j < d; ++j) {
          k[i * d + j] += mk[j];
          v[i * d + j] += mv[j];
        }
      }
    }
    // Positions no longer held read as zeros.
    std::fill(k + n_sinks_ * d, k + (n_sinks_ + dropped) * d, 0.0f);
    std::fill(v + n_sinks_ * d, v + (n_sinks_ + dropped) * d, 0.0f);
    read_exact(true, false, h, window_start_, window_size_, k + t * d);
    read_exact(true, true, h, window_start_, window_size_, v + t * d);
  }
}

size_t TurboQuantKVCache::trim(size_t n) {
  const size_t dropped = std::min(n, size());
  size_t left = dropped;
  const size_t from_window = std::min(left, window_size_);
  window_size_ -= from_window;
  if (window_size_ == 0) window_start_ = 0;
  left -= from_window;
  const size_t from_compressed = std::min(left, compressed_size_);
  compressed_size_ -= from_compressed;
  left -= from_compressed;
  const size_t pt = options_.page_tokens;
  pages_.resize((compressed_size_ + pt - 1) / pt);
  n_sinks_ -= left;
  first_held_ = std::min(first_held_, size());
  return dropped;
}

}  // namespace turbokv
