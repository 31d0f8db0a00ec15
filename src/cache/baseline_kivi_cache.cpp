// KIVI (Liu et al., ICML 2024): asymmetric min/max quantization, keys per channel (a group is
// group_size consecutive tokens of one channel: key outliers live in fixed channels), values per
// token (a group is group_size consecutive channels of one token), and a residual of recent
// tokens kept in fp16. Keys enter the quantized part only as whole groups: they wait in fp16
// until key_flush_tokens() of them are complete, as KIVI's decode loop does; values are
// quantized one token at a time as they leave the newest-`residual` window.
//
// Scale and zero are stored in fp16 and quantization uses the stored (rounded) values, so decode
// is exactly q * s + z with what is in memory.
#include <algorithm>
#include <cmath>

#include "cache/baseline_common.hpp"
#include "cache/cache_state_util.hpp"
#include "turbokv/baseline_caches.hpp"

namespace turbokv {

namespace {

// One asymmetric group: n values read with `stride`, codes written to codes[0..n).
void quantize_minmax(const float* x, size_t n, size_t stride, int bits, uint8_t* codes,
                     uint16_t* scale_out, uint16_t* zero_out) {
  float mn = x[0], mx = x[0];
  for (size_t i = 1; i < n; ++i) {
    mn = std::min(mn, x[i * stride]);
    mx = std::max(mx, x[i * stride]);
  }
  const int levels = (1 << bits) - 1;
  const uint16_t s16 = float_to_half((mx - mn) / static_cast<float>(levels));
  const uint16_t z16 = float_to_half(mn);
  const float s = half_to_float(s16), z = half_to_float(z16);
  for (size_t i = 0; i < n; ++i) {
    long q = 0;
    if (s > 0.0f) q = std::lround((x[i * stride] - z) / s);
    codes[i] = static_cast<uint8_t>(std::clamp<long>(q, 0, levels));
  }
  *scale_out = s16;
  *zero_out = z16;
}

}  // namespace

std::string KiviKVCache::shape_problem(int head_dim, const KiviOptions& options) {
  if (head_dim <= 0 || options.group_size <= 0 || head_dim % options.group_size != 0) {
    return fmt::format("kivi{} is not applicable: head_dim {} is not a multiple of its "
                       "{}-channel value group",
                       options.bits, head_dim, options.group_size);
  }
  return "";
}

KiviKVCache::KiviKVCache(int kv_heads, int head_dim, const KiviOptions& options)
    : kv_heads_(kv_heads), head_dim_(head_dim), options_(options) {
  baseline::check_shape("KiviKVCache", kv_heads, head_dim);
  TURBOKV_CHECK(options.bits >= 1 && options.bits <= 8, "KiviKVCache: bits must be in [1, 8], "
                "got {}", options.bits);
  TURBOKV_CHECK(options.group_size >= 1 && options.group_size <= 1024,
                "KiviKVCache: group_size must be in [1, 1024], got {}", options.group_size);
  TURBOKV_CHECK(options.residual <= 65536 && options.residual % options.group_size == 0,
                "KiviKVCache: residual ({}) must be a multiple of group_size ({}) and <= 65536",
                options.residual, options.group_size);
  const std::string problem = shape_problem(head_dim, options);
  TURBOKV_CHECK(problem.empty(), "KiviKVCache: {}", problem);
  key_group_code_bytes_ =
      baseline::packed_bytes(static_cast<size_t>(options.group_size) * head_dim, options.bits);
  value_code_bytes_ = baseline::packed_bytes(head_dim, options.bits);
  for (auto* v : {&key_codes_, &value_codes_}) v->resize(kv_heads);
  for (auto* v : {&key_scales_, &key_zeros_, &key_residual_, &value_scales_, &value_zeros_,
                  &value_residual_}) {
    v->resize(kv_heads);
  }
}

size_t KiviKVCache::key_flush_tokens() const {
  return std::max<size_t>(options_.residual, static_cast<size_t>(options_.group_size));
}

void KiviKVCache::append(std::span<const float> keys, std::span<const float> values,
                         size_t n_tokens) {
  baseline::check_append_input("KiviKVCache", keys, values, n_tokens, kv_heads_, head_dim_, true);
  if (n_tokens == 0) return;
  const size_t d = head_dim_;
  for (int h = 0; h < kv_heads_; ++h) {
    for (int which = 0; which < 2; ++which) {
      const float* src = (which == 0 ? keys : values).data() + h * n_tokens * d;
      auto& residual = which == 0 ? key_residual_[h] : value_residual_[h];
      for (size_t i = 0; i < n_tokens * d; ++i) residual.push_back(float_to_half(src[i]));
    }
  }
  key_tail_ += n_tokens;
  value_tail_ += n_tokens;
  flush_keys();
  flush_values();
}

void KiviKVCache::flush_keys() {
  const size_t flush = key_flush_tokens();
  const size_t g = options_.group_size, d = head_dim_;
  if (key_tail_ < flush) return;
  const size_t n_flush = key_tail_ / flush * flush;
  std::vector<float> rows(n_flush * d);
  std::vector<uint8_t> codes(g * d);
  for (int h = 0; h < kv_heads_; ++h) {
    auto& residual = key_residual_[h];
    for (size_t i = 0; i < n_flush * d; ++i) rows[i] = half_to_float(residual[i]);
    for (size_t start = 0; start < n_flush; start += g) {
      const float* group = rows.data() + start * d;
      const size_t scale_at = key_scales_[h].size();
      key_scales_[h].resize(scale_at + d);
      key_zeros_[h].resize(scale_at + d);
      std::vector<uint8_t> channel_codes(g);
      for (size_t c = 0; c < d; ++c) {
        quantize_minmax(group + c, g, d, options_.bits, channel_codes.data(),
                        &key_scales_[h][scale_at + c], &key_zeros_[h][scale_at + c]);
        for (size_t t = 0; t < g; ++t) codes[t * d + c] = channel_codes[t];
      }
      const size_t code_at = key_codes_[h].size();
      key_codes_[h].resize(code_at + key_group_code_bytes_);
      baseline::pack_lsb(codes.data(), g * d, options_.bits, key_codes_[h].data() + code_at);
    }
    residual.erase(residual.begin(), residual.begin() + static_cast<std::ptrdiff_t>(n_flush * d));
  }
  key_groups_ += n_flush / g;
  key_tail_ -= n_flush;
}

void KiviKVCache::flush_values() {
  if (value_tail_ <= options_.residual) return;
  const size_t n_flush = value_tail_ - options_.residual;
  const size_t g = options_.group_size, d = head_dim_, groups = d / g;
  std::vector<float> row(d);
  std::vector<uint8_t> codes(d);
  for (int h = 0; h < kv_heads_; ++h) {
    auto& residual = value_residual_[h];
    for (size_t t = 0; t < n_flush; ++t) {
      for (size_t c = 0; c < d; ++c) row[c] = half_to_float(residual[t * d + c]);
      const size_t scale_at = value_scales_[h].size();
      value_scales_[h].resize(scale_at + groups);
      value_zeros_[h].resize(scale_at + groups);
      for (size_t k = 0; k < groups; ++k) {
        quantize_minmax(row.data() + k * g, g, 1, options_.bits, codes.data() + k * g,
                        &value_scales_[h][scale_at + k], &value_zeros_[h][scale_at + k]);
      }
      const size_t code_at = value_codes_[h].size();
      value_codes_[h].resize(code_at + value_code_bytes_);
      baseline::pack_lsb(codes.data(), d, options_.bits, value_codes_[h].data() + code_at);
    }
    residual.erase(residual.begin(), residual.begin() + static_cast<std::ptrdiff_t>(n_flush * d));
  }
  value_quantized_ += n_flush;
  value_tail_ -= n_flush;
}

void KiviKVCache::fetch(std::span<float> keys, std::span<float> values) const {
  const size_t n = size(), d = head_dim_, g = options_.group_size;
  baseline::check_fetch_output("KiviKVCache", keys, values, kv_heads_ * n * d);
  const int bits = options_.bits;
  for (int h = 0; h < kv_heads_; ++h) {
    float* k_out = keys.data() + h * n * d;
    for (size_t grp = 0; grp < key_groups_; ++grp) {
      const uint8_t* codes = key_codes_[h].data() + grp * key_group_code_bytes_;
      const uint16_t* scales = key_scales_[h].data() + grp * d;
      const uint16_t* zeros = key_zeros_[h].data() + grp * d;
      for (size_t t = 0; t < g; ++t) {
        for (size_t c = 0; c < d; ++c) {
          k_out[(grp * g + t) * d + c] =
              static_cast<float>(baseline::code_at(codes, t * d + c, bits)) *
                  half_to_float(scales[c]) + half_to_float(zeros[c]);
        }
      }
    }
    const size_t kq = key_groups_ * g;
    for (size_t i = 0; i < key_tail_ * d; ++i) k_out[kq * d + i] = half_to_float(key_residual_[h][i]);

    float* v_out = values.data() + h * n * d;
    const size_t groups = d / g;
    for (size_t t = 0; t < value_quantized_; ++t) {
      const uint8_t* codes = value_codes_[h].data() + t * value_code_bytes_;
      for (size_t c = 0; c < d; ++c) {
        const size_t k = t * groups + c / g;
        v_out[t * d + c] = static_cast<float>(baseline::code_at(codes, c, bits)) *
                               half_to_float(value_scales_[h][k]) +
                           half_to_float(value_zeros_[h][k]);
      }
    }
    for (size_t i = 0; i < value_tail_ * d; ++i) {
      v_out[value_quantized_ * d + i] = half_to_float(value_residual_[h][i]);
    }
  }
}

size_t KiviKVCache::trim(size_t n) {
  const size_t dropped = std::min(n, size());
  if (dropped == 0) return 0;
  const size_t d = head_dim_, g = options_.group_size, groups = d / g;
  const size_t keep = size() - dropped;

  // Values: drop residual rows first, then quantized tokens (each token stands alone).
  const size_t v_tail_drop = std::min(dropped, value_tail_);
  value_tail_ -= v_tail_drop;
  value_quantized_ -= dropped - v_tail_drop;
  for (int h = 0; h < kv_heads_; ++h) {
    value_residual_[h].resize(value_tail_ * d);
    value_codes_[h].resize(value_quantized_ * value_code_bytes_);
    value_scales_[h].resize(value_quantized_ * groups);
    value_zeros_[h].resize(value_quantized_ * groups);
  }

  // Keys: a group cut in the middle is dissolved, its surviving tokens (already lossy) go back
  // to the fp16 residual and are quantized again when the next flush completes.
  const size_t kept_groups = keep / g;
  const size_t survivors = keep >= key_groups_ * g ? 0 : keep - kept_groups * g;
  std::vector<float> decoded;
  for (int h = 0; h < kv_heads_; ++h) {
    auto& residual = key_residual_[h];
    if (keep >= key_groups_ * g) {
      residual.resize((keep - key_groups_ * g) * d);
      continue;
    }
    std::vector<uint16_t> new_residual(survivors * d);
    if (survivors > 0) {
      const uint8_t* codes = key_codes_[h].data() + kept_groups * key_group_code_bytes_;
      const uint16_t* scales = key_scales_[h].data() + kept_groups * d;
      const uint16_t* zeros = key_zeros_[h].data() + kept_groups * d;
      for (size_t t = 0; t < survivors; ++t) {
        for (size_t c = 0; c < d; ++c) {
          const float x = static_cast<float>(baseline::code_at(codes, t * d + c, options_.bits)) *
                              half_to_float(scales[c]) + half_to_float(zeros[c]);
          new_residual[t * d + c] = float_to_half(x);
        }
      }
    }
    residual = std::move(new_residual);
    key_codes_[h].resize(kept_groups * key_group_code_bytes_);
    key_scales_[h].resize(kept_groups * d);
    key_zeros_[h].resize(kept_groups * d);
  }
  if (keep < key_groups_ * g) {
    key_groups_ = kept_groups;
    key_tail_ = survivors;
  } else {
    key_tail_ = keep - key_groups_ * g;
  }
  return dropped;
}

size_t KiviKVCache::nbytes() const {
  size_t total = 0;
  for (int h = 0; h < kv_heads_; ++h) {
    total += key_codes_[h].size() + 2 * (key_scales_[h].size() + key_zeros_[h].size()) +
             2 * key_residual_[h].size();
    total += value_codes_[h].size() + 2 * (value_scales_[h].size() + value_zeros_[h].size()) +
             2 * value_residual_[h].size();
  }
  return total;
}

double KiviKVCache::bits_per_value() const {
  if (size() == 0) {
    // Asymptotic: every token quantized. Per key group of g tokens x d channels: codes plus two
    // fp16 per channel; per value token: codes plus two fp16 per g channels.
    const double g = options_.group_size, d = head_dim_;
    const double key_bits = 8.0 * (static_cast<double>(key_group_code_bytes_) + 4.0 * d) / (g * d);
    const double value_bits = 8.0 * (static_cast<double>(value_code_bytes_) + 4.0 * d / g) / d;
    return 0.5 * (key_bits + value_bits);
  }
  return 8.0 * static_cast<double>(nbytes()) /
         (2.0 * static_cast<double>(size()) * kv_heads_ * head_dim_);
}

CacheState KiviKVCache::save_state() const {
  CacheState state;
  state.metadata = {{"class", class_name()},
                    {"kv_heads", std::to_string(kv_heads_)},
                    {"head_dim", std::to_string(head_dim_)},
                    {"bits", std::to_string(options_.bits)},
                    {"group_size", std::to_string(options_.group_size)},
                    {"residual", std::to_string(options_.residual)},
                    {"key_groups", std::to_string(key_groups_)},
                    {"key_residual_tokens", std::to_string(key_tail_)},
                    {"value_quantized_tokens", std::to_string(value_quantized_)},
                    {"value_residual_tokens", std::to_string(value_tail_)}};
  const size_t d = head_dim_, groups = d / options_.group_size;
  auto& t = state.tensors;
  t.push_back(baseline::make_blob("key_codes", "U8", key_codes_, key_groups_, key_group_code_bytes_));
  t.push_back(baseline::make_blob("key_scales", "F16", key_scales_, key_groups_, d));
  t.push_back(baseline::make_blob("key_zeros", "F16", key_zeros_, key_groups_, d));
  t.push_back(baseline::make_blob("key_residual", "F16", key_residual_, key_tail_, d));
  t.push_back(baseline::make_blob("value_codes", "U8", value_codes_, value_quantized_,
                                  value_code_bytes_));
  t.push_back(baseline::make_blob("value_scales", "F16", value_scales_, value_quantized_, groups));
  t.push_back(baseline::make_blob("value_zeros", "F16", value_zeros_, value_quantized_, groups));
  t.push_back(baseline::make_blob("value_residual", "F16", value_residual_, value_tail_, d));
  return state;
}

std::unique_ptr<KiviKVCache> KiviKVCache::from_state(const CacheState& state) {
  TURBOKV_CHECK(detail::meta_string(state, "class") == "kivi",
                "KiviKVCache: state has class '{}', expected 'kivi'",
                detail::meta_string(state, "class"));
  const int kv_heads = static_cast<int>(detail::meta_int(state, "kv_heads", 1, 4096));
  const int head_dim = static_cast<int>(detail::meta_int(state, "head_dim", 1, 8192));
  KiviOptions options;
  options.bits = static_cast<int>(detail::meta_int(state, "bits", 1, 8));
  options.group_size = static_cast<int>(detail::meta_int(state, "group_size", 1, 1024));
  options.residual = static_cast<size_t>(detail::meta_int(state, "residual", 0, 65536));
  auto cache = std::make_unique<KiviKVCache>(kv_heads, head_dim, options);
  const int64_t max_tokens = (int64_t{1} << 40) / (int64_t{kv_heads} * head_dim);
  const auto key_groups =
      static_cast<size_t>(detail::meta_int(state, "key_groups", 0, max_tokens / options.group_size));
  const auto key_tail = static_cast<size_t>(detail::meta_int(
      state, "key_residual_tokens", 0, static_cast<int64_t>(cache->key_flush_tokens()) - 1));
  const auto value_q =
      static_cast<size_t>(detail::meta_int(state, "value_quantized_tokens", 0, max_tokens));
  const auto value_tail = static_cast<size_t>(detail::meta_int(
      state, "value_residual_tokens", 0, static_cast<int64_t>(options.residual)));
  TURBOKV_CHECK(key_groups * options.group_size + key_tail == value_q + value_tail,
                "cache state: kivi keys hold {} tokens but values hold {}",
                key_groups * options.group_size + key_tail, value_q + value_tail);
  detail::check_tensor_names(state, {"key_codes", "key_scales", "key_zeros", "key_residual",
                                     "value_codes", "value_scales", "value_zeros",
                                     "value_residual"});
  const int64_t h = kv_heads, d = head_dim, groups = head_dim / options.group_size;
  const auto i64 = [](size_t v) { return static_cast<int64_t>(v); };
  auto& c = *cache;
  baseline::read_blob(detail::find_tensor(state, "key_codes", "U8",
                                          {h, i64(key_groups), i64(c.key_group_code_bytes_)}),
                      c.key_codes_, key_groups, c.key_group_code_bytes_);
  baseline::read_blob(detail::find_tensor(state, "key_scales", "F16", {h, i64(key_groups), d}),
                      c.key_scales_, key_groups, d);
  baseline::read_blob(detail::find_tensor(state, "key_zeros", "F16", {h, i64(key_groups), d}),
                      c.key_zeros_, key_groups, d);
  baseline::read_blob(detail::find_tensor(state, "key_residual", "F16", {h, i64(key_tail), d}),
                      c.key_residual_, key_tail, d);
  baseline::read_blob(detail::find_tensor(state, "value_codes", "U8",
                                          {h, i64(value_q), i64(c.value_code_bytes_)}),
                      c.value_codes_, value_q, c.value_code_bytes_);
  baseline::read_blob(detail::find_tensor(state, "value_scales", "F16", {h, i64(value_q), groups}),
                      c.value_scales_, value_q, groups);
  baseline::read_blob(detail::find_tensor(state, "value_zeros", "F16", {h, i64(value_q), groups}),
                      c.value_zeros_, value_q, groups);
  baseline::read_blob(detail::find_tensor(state, "value_residual", "F16",
                                          {h, i64(value_tail), d}),
                      c.value_residual_, value_tail, d);
  for (auto [v, what] : {std::pair{&c.key_scales_, "key_scales"}, {&c.key_zeros_, "key_zeros"},
                         {&c.key_residual_, "key_residual"}, {&c.value_scales_, "value_scales"},
                         {&c.value_zeros_, "value_zeros"}, {&c.value_residual_, "value_residual"}}) {
    baseline::check_halves_finite(*v, what);
  }
  c.key_groups_ = key_groups;
  c.key_tail_ = key_tail;
  c.value_quantized_ = value_q;
  c.value_tail_ = value_tail;
  return cache;
}

}  // namespace turbokv
