#include "turbokv/dense_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cache/aligned_buffer.hpp"
#include "cache/cache_state_util.hpp"
#include "core/check.hpp"
#include "turbokv/half.hpp"

namespace turbokv {
namespace {

// Largest float that rounds to a finite fp16 (65504 plus just under half an ulp).
constexpr float kHalfOverflow = 65520.0f;
using detail::AlignedBytes;
using detail::allocate_aligned;

}  // namespace

struct DenseKVCache::Page {
  AlignedBytes keys;
  AlignedBytes values;
};

std::string dense_dtype_name(DenseDtype dtype) { return dtype == DenseDtype::f16 ? "f16" : "f32"; }

DenseDtype parse_dense_dtype(const std::string& name) {
  if (name == "f16") return DenseDtype::f16;
  if (name == "f32") return DenseDtype::f32;
  detail::fail("DenseKVCache: dtype must be 'f16' or 'f32', got '{}'", name);
}

DenseKVCache::DenseKVCache(int kv_heads, int head_dim, DenseDtype dtype, size_t page_tokens)
    : kv_heads_(kv_heads), head_dim_(head_dim), dtype_(dtype), page_tokens_(page_tokens) {
  TURBOKV_CHECK(kv_heads >= 1 && kv_heads <= 4096, "DenseKVCache: kv_heads must be in [1, 4096], got {}",
                kv_heads);
  TURBOKV_CHECK(head_dim >= 1 && head_dim <= 8192, "DenseKVCache: head_dim must be in [1, 8192], got {}",
                head_dim);
  TURBOKV_CHECK(page_tokens >= 1 && page_tokens <= 65536,
                "DenseKVCache: page_tokens must be in [1, 65536], got {}", page_tokens);
  TURBOKV_CHECK(dtype == DenseDtype::f16 || dtype == DenseDtype::f32,
                "DenseKVCache: unknown dtype {}", static_cast<int>(dtype));
}

DenseKVCache::~DenseKVCache() = default;
DenseKVCache::DenseKVCache(DenseKVCache&&) noexcept = default;
DenseKVCache& DenseKVCache::operator=(DenseKVCache&&) noexcept = default;

size_t DenseKVCache::nbytes() const {
  size_t tokens = 0;
  for (size_t p = 0; p < pages_.size(); ++p) {
    if (pages_[p]) tokens += tokens_in_page(p);
  }
  return tokens * static_cast<size_t>(kv_heads_) * head_dim_ * 2 * element_size();
}

size_t DenseKVCache::allocated_bytes() const {
  const size_t held = static_cast<size_t>(std::count_if(pages_.begin(), pages_.end(), [](const auto& p) { return p != nullptr; }));
  return held * kv_heads_ * 2 * detail::round_up_to_alignment(page_tokens_ * head_dim_ * element_size());
}

size_t DenseKVCache::tokens_in_page(size_t page) const {
  TURBOKV_CHECK(page < pages_.size(), "DenseKVCache: page {} out of range ({} pages)", page,
                pages_.size());
  return std::min(page_tokens_, size_ - page * page_tokens_);
}

uint8_t* DenseKVCache::slab(size_t page, int head, bool value) const {
  TURBOKV_CHECK(pages_[page] != nullptr, "DenseKVCache: page {} was freed (positions before {} are not held)", page,
                first_held_);
  const size_t head_bytes = detail::round_up_to_alignment(page_tokens_ * head_dim_ * element_size());
  uint8_t* base = value ? pages_[page]->values.get() : pages_[page]->keys.get();
  return base + static_cast<size_t>(head) * head_bytes;
}

const void* DenseKVCache::key_page(size_t page, int head) const {
  TURBOKV_CHECK(page < pages_.size() && head >= 0 && head < kv_heads_,
                "DenseKVCache: key_page({}, {}) out of range ({} pages, {} heads)", page, head,
                pages_.size(), kv_heads_);
  return slab(page, head, false);
}

const void* DenseKVCache::value_page(size_t page, int head) const {
  TURBOKV_CHECK(page < pages_.size() && head >= 0 && head < kv_heads_,
                "DenseKVCache: value_page({}, {}) out of range ({} pages, {} heads)", page, head,
                pages_.size(), kv_heads_);
  return slab(page, head, true);
}

void DenseKVCache::ensure_page(size_t page) {
  if (page < pages_.size() && pages_[page]) return;
  const size_t bytes =
      kv_heads_ * detail::round_up_to_alignment(page_tokens_ * head_dim_ * element_size());
  auto fresh = std::make_unique<Page>();
  fresh->keys = allocate_aligned(bytes);
  fresh->values = allocate_aligned(bytes);
  if (page >= pages_.size()) pages_.resize(page + 1);
  pages_[page] = std::move(fresh);
}

size_t DenseKVCache::drop_before(size_t position) {
  position = std::min(position, size_);
  // Only whole pages go: page p is freed when every position it holds is before `position`.
  for (size_t p = 0; (p + 1) * page_tokens_ <= position; ++p) pages_[p].reset();
  first_held_ = std::max(first_held_, position / page_tokens_ * page_tokens_);
  return first_held_;
}

void DenseKVCache::check_finite(std::span<const float> data, const char* what) const {
  if (allow_non_finite_) return;
  const float limit = dtype_ == DenseDtype::f16 ? kHalfOverflow
                                                : std::numeric_limits<float>::max();
  for (size_t i = 0; i < data.size(); ++i) {
    const float x = data[i];
    if (!(std::fabs(x) <= limit)) {  // also true for NaN
      if (!std::isfinite(x)) {
        detail::fail("DenseKVCache::append: {} element {} is {} (NaN/Inf input is rejected)",
                     what, i, x);
      }
      detail::fail("DenseKVCache::append: {} element {} = {} overflows fp16 storage", what, i, x);
    }
  }
}

void DenseKVCache::append(std::span<const float> keys, std::span<const float> values,
                          size_t n_tokens) {
  const size_t row = static_cast<size_t>(kv_heads_) * head_dim_;
  TURBOKV_CHECK(n_tokens <= (size_t{1} << 40) / row,
                "DenseKVCache::append: n_tokens {} is too large", n_tokens);
  const size_t expected = n_tokens * row;
  TURBOKV_CHECK(keys.size() == expected && values.size() == expected,
                "DenseKVCache::append: expected {} floats ([{}][{}][{}]) for keys and values, got "
                "{} and {}",
                expected, kv_heads_, n_tokens, head_dim_, keys.size(), values.size());
  check_finite(keys, "keys");
  check_finite(values, "values");

  const size_t d = head_dim_;
  size_t done = 0;
  while (done < n_tokens) {
    const size_t pos = size_ + done;
    const size_t page = pos / page_tokens_;
    const size_t slot = pos % page_tokens_;
    ensure_page(page);
    const size_t count = std::min(page_tokens_ - slot, n_tokens - done);
    for (int h = 0; h < kv_heads_; ++h) {
      const float* src_k = keys.data() + (static_cast<size_t>(h) * n_tokens + done) * d;
      const float* src_v = values.data() + (static_cast<size_t>(h) * n_tokens + done) * d;
      uint8_t* dst_k = slab(page, h, false) + slot * d * element_size();
      uint8_t* dst_v = slab(page, h, true) + slot * d * element_size();
      if (dtype_ == DenseDtype::f32) {
        std::memcpy(dst_k, src_k, count * d * sizeof(float));
        std::memcpy(dst_v, src_v, count * d * sizeof(float));
      } else {
        auto* hk = reinterpret_cast<uint16_t*>(dst_k);
        auto* hv = reinterpret_cast<uint16_t*>(dst_v);
        for (size_t i = 0; i < count * d; ++i) {
          hk[i] = float_to_half(src_k[i]);
          hv[i] = float_to_half(src_v[i]);
        }
      }
    }
    done += count;
  }
  size_ += n_tokens;
}

void DenseKVCache::append_half(std::span<const uint16_t> keys, std::span<const uint16_t> values,
                               size_t n_tokens, HalfFormat format) {
  const size_t row = static_cast<size_t>(kv_heads_) * head_dim_;
  TURBOKV_CHECK(n_tokens <= (size_t{1} << 40) / row,
                "DenseKVCache::append_half: n_tokens {} is too large", n_tokens);
  TURBOKV_CHECK(keys.size() == n_tokens * row && values.size() == n_tokens * row,
                "DenseKVCache::append_half: expected {} elements for keys and values, got {} and {}",
                n_tokens * row, keys.size(), values.size());
  auto convert = [format](uint16_t x) {
    return format == HalfFormat::f16 ? half_to_float(x) : bf16_to_float(x);
  };
  std::vector<float> k(keys.size()), v(values.size());
  std::transform(keys.begin(), keys.end(), k.begin(), convert);
  std::transform(values.begin(), values.end(), v.begin(), convert);
  append(k, v, n_tokens);
}

void DenseKVCache::fetch_range(size_t first, size_t count, std::span<float> keys,
                               std::span<float> values) const {
  TURBOKV_CHECK(first <= size_ && count <= size_ - first,
                "DenseKVCache::fetch_range: tokens [{}, {}+{}) out of range (size {})", first,
                first, count, size_);
  TURBOKV_CHECK(count == 0 || first >= first_held_,
                "DenseKVCache::fetch_range: tokens from {} asked, but positions before {} are no longer held "
                "(sliding window)", first, first_held_);
  const size_t d = head_dim_;
  const size_t expected = static_cast<size_t>(kv_heads_) * count * d;
  TURBOKV_CHECK(keys.size() == expected && values.size() == expected,
                "DenseKVCache::fetch: expected {} floats ([{}][{}][{}]) for keys and values, got "
                "{} and {}",
                expected, kv_heads_, count, head_dim_, keys.size(), values.size());
  size_t done = 0;
  while (done < count) {
    const size_t pos = first + done;
    const size_t page = pos / page_tokens_;
    const size_t slot = pos % page_tokens_;
    const size_t n = std::min(page_tokens_ - slot, count - done);
    for (int h = 0; h < kv_heads_; ++h) {
      float* dst_k = keys.data() + (static_cast<size_t>(h) * count + done) * d;
      float* dst_v = values.data() + (static_cast<size_t>(h) * count + done) * d;
      const uint8_t* src_k = slab(page, h, false) + slot * d * element_size();
      const uint8_t* src_v = slab(page, h, true) + slot * d * element_size();
      if (dtype_ == DenseDtype::f32) {
        std::memcpy(dst_k, src_k, n * d * sizeof(float));
        std::memcpy(dst_v, src_v, n * d * sizeof(float));
      } else {
        const auto* hk = reinterpret_cast<const uint16_t*>(src_k);
        const auto* hv = reinterpret_cast<const uint16_t*>(src_v);
        for (size_t i = 0; i < n * d; ++i) {
          dst_k[i] = half_to_float(hk[i]);
          dst_v[i] = half_to_float(hv[i]);
        }
      }
    }
    done += n;
  }
}

void DenseKVCache::fetch(std::span<float> keys, std::span<float> values) const {
  if (first_held_ == 0) return fetch_range(0, size_, keys, values);
  const size_t d = head_dim_, held = size_ - first_held_;
  const size_t expected = static_cast<size_t>(kv_heads_) * size_ * d;
  TURBOKV_CHECK(keys.size() == expected && values.size() == expected,
                "DenseKVCache::fetch: expected {} floats for keys and values, got {} and {}", expected, keys.size(),
                values.size());
  std::vector<float> k(kv_heads_ * held * d), v(k.size());
  fetch_range(first_held_, held, k, v);
  std::fill(keys.begin(), keys.end(), 0.0f);  // positions no longer held read as zeros
  std::fill(values.begin(), values.end(), 0.0f);
  for (int h = 0; h < kv_heads_; ++h) {
    std::copy_n(k.data() + h * held * d, held * d, keys.data() + (h * size_ + first_held_) * d);
    std::copy_n(v.data() + h * held * d, held * d, values.data() + (h * size_ + first_held_) * d);
  }
}

size_t DenseKVCache::trim(size_t n) {
  const size_t dropped = std::min(n, size_);
  size_ -= dropped;
  const size_t pages_needed = (size_ + page_tokens_ - 1) / page_tokens_;
  pages_.resize(pages_needed);  // frees whole pages; keeps the page table's capacity
  first_held_ = std::min(first_held_, size_);
  return dropped;
}

// Saved state: metadata {class, kv_heads, head_dim, dtype, page_tokens, tokens, and
// allow_non_finite = "1" only for a cache that opted in} and tensors "keys", "values":
// [kv_heads][tokens][head_dim] F16 or F32 (pages concatenated per head).
CacheState DenseKVCache::save_state() const {
  CacheState state;
  state.metadata = {{"class", class_name()},
                    {"kv_heads", std::to_string(kv_heads_)},
                    {"head_dim", std::to_string(head_dim_)},
                    {"dtype", dense_dtype_name(dtype_)},
                    {"page_tokens", std::to_string(page_tokens_)},
                    {"tokens", std::to_string(size_)}};
  // emplace, not operator[] = "1": GCC 12 reports a -Wrestrict false positive for the latter.
  if (allow_non_finite_) state.metadata.emplace("allow_non_finite", "1");
  // A sliding-window ring saves only the positions it holds, [first_held, tokens).
  if (first_held_ > 0) state.metadata["first_held"] = std::to_string(first_held_);
  const size_t held = size_ - first_held_;
  const std::string dtype = dtype_ == DenseDtype::f16 ? "F16" : "F32";
  const std::vector<int64_t> shape = {kv_heads_, static_cast<int64_t>(held), head_dim_};
  const size_t row_bytes = head_dim_ * element_size();
  for (int which = 0; which < 2; ++which) {
    TensorBlob blob{which == 0 ? "keys" : "values", dtype, shape, {}};
    blob.data.resize(kv_heads_ * held * row_bytes);
    for (int h = 0; h < kv_heads_; ++h) {
      for (size_t t = first_held_; t < size_;) {
        const size_t p = t / page_tokens_, slot = t % page_tokens_;
        const size_t n = std::min(page_tokens_ - slot, size_ - t);
        std::memcpy(blob.data.data() + (h * held + t - first_held_) * row_bytes,
                    slab(p, h, which == 1) + slot * row_bytes, n * row_bytes);
        t += n;
      }
    }
    state.tensors.push_back(std::move(blob));
  }
  return state;
}

std::unique_ptr<DenseKVCache> DenseKVCache::from_state(const CacheState& state) {
  TURBOKV_CHECK(detail::meta_string(state, "class") == "dense",
                "DenseKVCache: state has class '{}', expected 'dense'",
                detail::meta_string(state, "class"));
  const int kv_heads = static_cast<int>(detail::meta_int(state, "kv_heads", 1, 4096));
  const int head_dim = static_cast<int>(detail::meta_int(state, "head_dim", 1, 8192));
  const DenseDtype dtype = parse_dense_dtype(detail::meta_string(state, "dtype"));
  const auto page_tokens = static_cast<size_t>(detail::meta_int(state, "page_tokens", 1, 65536));
  const auto tokens = static_cast<size_t>(
      detail::meta_int(state, "tokens", 0, (int64_t{1} << 40) / (int64_t{kv_heads} * head_dim)));
  // Absent in files written before sliding-window rings (they hold every position).
  const size_t first_held =
      state.metadata.count("first_held") != 0
          ? static_cast<size_t>(detail::meta_int(state, "first_held", 0, static_cast<int64_t>(tokens)))
          : 0;
  const size_t held = tokens - first_held;
  detail::check_tensor_names(state, {"keys", "values"});
  const std::string dt = dtype == DenseDtype::f16 ? "F16" : "F32";
  const std::vector<int64_t> shape = {kv_heads, static_cast<int64_t>(held), head_dim};
  // find_tensor checks the byte count against the shape before anything is allocated.
  const TensorBlob& keys = detail::find_tensor(state, "keys", dt, shape);
  const TensorBlob& values = detail::find_tensor(state, "values", dt, shape);

  // The input policy holds for files too: NaN/Inf only from a cache that opted in, which its
  // file records (older files without the key never opted in).
  const auto opt_in = state.metadata.find("allow_non_finite");
  TURBOKV_CHECK(opt_in == state.metadata.end() || opt_in->second == "0" || opt_in->second == "1",
                "DenseKVCache: metadata allow_non_finite is '{}', expected 0 or 1", opt_in->second);
  const bool allow_non_finite = opt_in != state.metadata.end() && opt_in->second == "1";
  if (!allow_non_finite) {
    for (const TensorBlob* blob : {&keys, &values}) {
      const size_t bad = detail::first_non_finite(*blob);
      TURBOKV_CHECK(bad == SIZE_MAX,
                    "DenseKVCache: stored {} element {} is NaN/Inf, and the file does not record "
                    "the allow_non_finite opt-in", blob->name, bad);
    }
  }

  auto cache = std::make_unique<DenseKVCache>(kv_heads, head_dim, dtype, page_tokens);
  const size_t row_bytes = head_dim * cache->element_size();
  const size_t n_pages = (tokens + page_tokens - 1) / page_tokens;
  cache->pages_.resize(n_pages);  // pages before first_held stay freed
  for (size_t p = first_held / page_tokens; p < n_pages; ++p) cache->ensure_page(p);
  cache->size_ = tokens;
  cache->first_held_ = first_held;
  for (int which = 0; which < 2; ++which) {
    const TensorBlob& blob = which == 0 ? keys : values;
    for (int h = 0; h < kv_heads; ++h) {
      for (size_t t = first_held; t < tokens;) {
        const size_t p = t / page_tokens, slot = t % page_tokens;
        const size_t n = std::min(page_tokens - slot, tokens - t);
        std::memcpy(cache->slab(p, h, which == 1) + slot * row_bytes,
                    blob.data.data() + (h * held + t - first_held) * row_bytes, n * row_bytes);
        t += n;
      }
    }
  }
  cache->allow_non_finite_ = allow_non_finite;
  return cache;
}

}  // namespace turbokv
