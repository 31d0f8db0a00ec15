// TurboQuantKVCache: saved state (save_state / from_state) and conversion from other caches.
//
// Saved state (docs/formats.md): metadata
//   class=turboquant, kv_heads, head_dim, key_bits, value_bits, key_codec, value_codec,
//   rotation, seed, fp32_norm, norm_correction, window, sinks, page_tokens, tokens, n_sinks,
//   compressed, window_size, key_code_size, value_code_size, key_checksum, value_checksum
// and tensors
//   sink_keys, sink_values     F32 [kv_heads][n_sinks][head_dim] (F16 with exact_dtype=f16)
//   key_codes                  U8  [kv_heads][compressed][key_code_size]
//   value_codes                U8  [kv_heads][compressed][value_code_size]
//   window_keys, window_values F32 [kv_heads][window_size][head_dim] (likewise)
// exact_dtype is written only when it is f16 (files without it are f32, as before).
// and, for a centered cache only (metadata center=true), key_center, value_center F32
// [kv_heads][head_dim]: the means subtracted before encoding. A build without centering rejects
// such a file (unknown tensors) instead of decoding it without the means.
// The checksums hash the codec's rotation checksum and its codebooks' checksums, so a file
// whose codes would decode differently on this build is rejected instead of silently misread.
#include <cmath>
#include <cstring>

#include "cache/cache_state_util.hpp"
#include "core/check.hpp"
#include "core/hash.hpp"
#include "turbokv/codebook.hpp"
#include "turbokv/half.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv {
namespace {

template <typename Codec>
uint64_t codec_checksum(const Codec& codec) {
  detail::Hasher hasher;
  hasher.add(codec.rotation().checksum());
  hasher.add(codec.codebook(0).checksum());
  if (codec.layout().dims_lo > 0) hasher.add(codec.codebook(1).checksum());
  return hasher.finish();
}

uint64_t key_checksum(const TurboQuantKVCache& cache) {
  return cache.key_prod() ? codec_checksum(*cache.key_prod()) : codec_checksum(*cache.key_mse());
}

const char* bool_name(bool b) { return b ? "true" : "false"; }

// The cache's options as the file gives them (validated again by the constructor).
TurboQuantCacheOptions options_from_state(const CacheState& state) {
  using namespace detail;
  TurboQuantCacheOptions o;
  o.key_bits = meta_double(state, "key_bits", 1, 8);
  o.value_bits = meta_double(state, "value_bits", 1, 8);
  o.key_codec = parse_codec_kind(meta_string(state, "key_codec"));
  o.value_codec = parse_codec_kind(meta_string(state, "value_codec"));
  o.rotation = parse_rotation_kind(meta_string(state, "rotation"));
  o.seed = meta_u64(state, "seed");
  o.fp32_norm = meta_bool(state, "fp32_norm");
  o.norm_correction = meta_bool(state, "norm_correction");
  o.center = state.metadata.count("center") > 0 && meta_bool(state, "center");
  o.window = static_cast<size_t>(meta_int(state, "window", 0, int64_t{1} << 24));
  o.sinks = static_cast<size_t>(meta_int(state, "sinks", 0, int64_t{1} << 24));
  o.page_tokens = static_cast<size_t>(meta_int(state, "page_tokens", 1, 65536));
  if (state.metadata.count("exact_dtype") > 0) o.exact_dtype = parse_dense_dtype(meta_string(state, "exact_dtype"));
  if (state.metadata.count("attention") > 0) {
    const std::string attention = meta_string(state, "attention");
    // Only written as int8 (absent: exact), so that saving a loaded cache gives the same bytes.
    TURBOKV_CHECK(attention == "int8", "TurboQuantKVCache: attention must be int8 (or absent), got '{}'", attention);
    o.int8_attention = true;
  }
  return o;
}

// How the saved tokens split into sinks, compressed codes (some dropped by a sliding window)
// and the exact window, checked against each other and the options.
struct SavedRegions {
  size_t tokens = 0, n_sinks = 0, compressed = 0, window_size = 0;
  size_t first_held = 0;  // the first position still held
  size_t dropped = 0;     // compressed tokens before first_held (their pages are freed)
  size_t held = 0;        // compressed tokens with codes in the file
};

SavedRegions regions_from_state(const CacheState& state, const TurboQuantCacheOptions& o, int kv_heads,
                                int head_dim) {
  using namespace detail;
  SavedRegions r;
  const int64_t max_tokens = (int64_t{1} << 40) / (int64_t{kv_heads} * head_dim);
  r.tokens = static_cast<size_t>(meta_int(state, "tokens", 0, max_tokens));
  r.n_sinks = static_cast<size_t>(meta_int(state, "n_sinks", 0, static_cast<int64_t>(o.sinks)));
  r.compressed = static_cast<size_t>(meta_int(state, "compressed", 0, max_tokens));
  r.window_size = static_cast<size_t>(meta_int(state, "window_size", 0, static_cast<int64_t>(o.window)));
  TURBOKV_CHECK(r.n_sinks + r.compressed + r.window_size == r.tokens,
                "TurboQuantKVCache: n_sinks ({}) + compressed ({}) + window_size ({}) != tokens "
                "({})", r.n_sinks, r.compressed, r.window_size, r.tokens);
  TURBOKV_CHECK(r.n_sinks == o.sinks || (r.compressed == 0 && r.window_size == 0),
                "TurboQuantKVCache: {} of {} sinks filled but later regions hold tokens", r.n_sinks,
                o.sinks);
  // Absent in files written before sliding-window rings (they hold every position).
  r.first_held = state.metadata.count("first_held") != 0
                     ? static_cast<size_t>(meta_int(state, "first_held", 0, static_cast<int64_t>(r.tokens)))
                     : 0;
  r.dropped = r.first_held > r.n_sinks ? std::min(r.first_held - r.n_sinks, r.compressed) : 0;
  r.held = r.compressed - r.dropped;
  return r;
}

// The file's codes decode only with the codecs that wrote them: same code sizes, codebooks and
// rotation, or the file is rejected instead of silently misread.
void check_same_codecs(const CacheState& state, const TurboQuantKVCache& cache) {
  using namespace detail;
  const auto key_cs = meta_int(state, "key_code_size", 1, int64_t{1} << 20);
  const auto value_cs = meta_int(state, "value_code_size", 1, int64_t{1} << 20);
  TURBOKV_CHECK(static_cast<size_t>(key_cs) == cache.key_code_size() &&
                    static_cast<size_t>(value_cs) == cache.value_code_size(),
                "TurboQuantKVCache: code sizes in the file ({}, {}) differ from this build's "
                "codecs ({}, {})",
                key_cs, value_cs, cache.key_code_size(), cache.value_code_size());
  TURBOKV_CHECK(meta_u64(state, "key_checksum") == key_checksum(cache),
                "TurboQuantKVCache: key codec checksum mismatch: the codebook or rotation of this "
                "build differs from the one that wrote the file");
  TURBOKV_CHECK(meta_u64(state, "value_checksum") == codec_checksum(cache.value_codec()),
                "TurboQuantKVCache: value codec checksum mismatch: the codebook or rotation of "
                "this build differs from the one that wrote the file");
}

// Codes decode to scale * centroids: a non-finite stored norm would load a poisoned cache.
void check_norms(const TensorBlob& blob, const CodeLayout& layout) {
  using namespace detail;
  const size_t cs = layout.code_size;
  for (size_t off = 0; off + cs <= blob.data.size(); off += cs) {
    for (size_t field : {layout.norm_offset, layout.residual_norm_offset}) {
      if (field == CodeLayout::npos) continue;
      TURBOKV_CHECK(std::isfinite(load_norm(blob.data.data() + off + field, layout.fp32_norm)),
                    "TurboQuantKVCache: tensor '{}' holds a non-finite norm (record {})", blob.name,
                    off / cs);
    }
  }
}


// The file's tensors, each of the shape the metadata implies, checked for what append() would
// have refused: non-finite exact tokens or means, non-finite norms.
struct SavedTensors {
  const TensorBlob *sink_keys, *sink_values, *key_codes, *value_codes, *window_keys, *window_values;
  const TensorBlob* centers[2] = {nullptr, nullptr};  // centered caches only
};

SavedTensors saved_tensors(const CacheState& state, const TurboQuantCacheOptions& o, const SavedRegions& r,
                           const TurboQuantKVCache& cache) {
  using namespace detail;
  if (o.center) {
    check_tensor_names(state, {"sink_keys", "sink_values", "key_codes", "value_codes",
                               "window_keys", "window_values", "key_center", "value_center"});
  } else {
    check_tensor_names(state, {"sink_keys", "sink_values", "key_codes", "value_codes",
                               "window_keys", "window_values"});
  }
  const char* exact_type = o.exact_dtype == DenseDtype::f16 ? "F16" : "F32";
  const int64_t H = cache.kv_heads(), D = cache.head_dim();
  const auto sinks = static_cast<int64_t>(r.n_sinks), held = static_cast<int64_t>(r.held),
             window = static_cast<int64_t>(r.window_size);
  SavedTensors t{};
  t.sink_keys = &find_tensor(state, "sink_keys", exact_type, {H, sinks, D});
  t.sink_values = &find_tensor(state, "sink_values", exact_type, {H, sinks, D});
  t.key_codes = &find_tensor(state, "key_codes", "U8", {H, held, static_cast<int64_t>(cache.key_code_size())});
  t.value_codes = &find_tensor(state, "value_codes", "U8", {H, held, static_cast<int64_t>(cache.value_code_size())});
  t.window_keys = &find_tensor(state, "window_keys", exact_type, {H, window, D});
  t.window_values = &find_tensor(state, "window_values", exact_type, {H, window, D});
  if (o.center) {
    t.centers[0] = &find_tensor(state, "key_center", "F32", {H, D});
    t.centers[1] = &find_tensor(state, "value_center", "F32", {H, D});
  }
  // Exact tokens are never re-encoded; reject non-finite ones as append() would have (and
  // non-finite means, which decode would add to every compressed token).
  for (const TensorBlob* b : {t.sink_keys, t.sink_values, t.window_keys, t.window_values, t.centers[0], t.centers[1]}) {
    TURBOKV_CHECK(b == nullptr || first_non_finite(*b) == SIZE_MAX,
                  "TurboQuantKVCache: tensor '{}' holds a non-finite value", b->name);
  }
  check_norms(*t.key_codes, cache.key_prod() ? cache.key_prod()->layout() : cache.key_mse()->layout());
  check_norms(*t.value_codes, cache.value_codec().layout());
  return t;
}
}  // namespace

CacheState TurboQuantKVCache::save_state() const {
  const TurboQuantCacheOptions& o = options_;
  CacheState state;
  state.metadata = {
      {"class", class_name()},
      {"kv_heads", std::to_string(kv_heads_)},
      {"head_dim", std::to_string(head_dim_)},
      {"key_bits", detail::format_double(o.key_bits)},
      {"value_bits", detail::format_double(o.value_bits)},
      {"key_codec", codec_kind_name(o.key_codec)},
      {"value_codec", codec_kind_name(o.value_codec)},
      {"rotation", rotation_kind_name(o.rotation)},
      {"seed", std::to_string(o.seed)},
      {"fp32_norm", bool_name(o.fp32_norm)},
      {"norm_correction", bool_name(o.norm_correction)},
      {"window", std::to_string(o.window)},
      {"sinks", std::to_string(o.sinks)},
      {"page_tokens", std::to_string(o.page_tokens)},
      {"tokens", std::to_string(size())},
      {"n_sinks", std::to_string(n_sinks_)},
      {"compressed", std::to_string(compressed_size_)},
      {"window_size", std::to_string(window_size_)},
      {"key_code_size", std::to_string(key_code_size_)},
      {"value_code_size", std::to_string(value_code_size_)},
      {"key_checksum", std::to_string(key_checksum(*this))},
      {"value_checksum", std::to_string(codec_checksum(*value_mse_))},
  };
  if (exact_f16()) state.metadata["exact_dtype"] = "f16";
  // A sliding-window ring saves only the compressed tokens it holds, [dropped, compressed).
  const size_t dropped = dropped_compressed(), held = compressed_size_ - dropped;
  if (first_held_ > 0) state.metadata["first_held"] = std::to_string(first_held_);
  // The arithmetic attend() uses is part of what the cache answers: a loaded cache (a restored
  // prefix) must attend as the saved one did (the server's default is int8).
  if (o.int8_attention) state.metadata["attention"] = "int8";
  const size_t d = head_dim_;
  const int64_t H = kv_heads_, D = head_dim_;
  const size_t element = exact_f16() ? 2 : 4;
  auto exact = [&](const char* name, size_t n, auto&& ptr) {
    TensorBlob blob{name, exact_f16() ? "F16" : "F32", {H, static_cast<int64_t>(n), D}, {}};
    blob.data.resize(kv_heads_ * n * d * element);
    for (int h = 0; h < kv_heads_; ++h) {
      if (n > 0) std::memcpy(blob.data.data() + h * n * d * element, ptr(h), n * d * element);
    }
    state.tensors.push_back(std::move(blob));
  };
  auto codes = [&](const char* name, bool value) {
    const size_t cs = value ? value_code_size_ : key_code_size_;
    TensorBlob blob{name, "U8", {H, static_cast<int64_t>(held), static_cast<int64_t>(cs)}, {}};
    blob.data.resize(kv_heads_ * held * cs);
    const size_t pt = options_.page_tokens;
    for (int h = 0; h < kv_heads_; ++h) {
      for (size_t c = dropped; c < compressed_size_;) {
        const size_t p = c / pt, slot = c % pt, n = std::min(pt - slot, compressed_size_ - c);
        std::memcpy(blob.data.data() + (h * held + c - dropped) * cs, codes_ptr(p, h, value) + slot * cs, n * cs);
        c += n;
      }
    }
    state.tensors.push_back(std::move(blob));
  };
  auto rows = [&](bool window, bool value) {
    return [this, window, value](int h) -> const void* {
      if (exact_f16()) return window ? (value ? window_values_f16(h) : window_keys_f16(h)) : sink_ptr16(value, h);
      return window ? (value ? window_values(h) : window_keys(h)) : sink_ptr(value, h);
    };
  };
  exact("sink_keys", n_sinks_, rows(false, false));
  exact("sink_values", n_sinks_, rows(false, true));
  codes("key_codes", false);
  codes("value_codes", true);
  exact("window_keys", window_size_, rows(true, false));
  exact("window_values", window_size_, rows(true, true));
  if (o.center) {
    state.metadata["center"] = "true";
    for (int which = 0; which < 2; ++which) {
      TensorBlob blob{which == 0 ? "key_center" : "value_center", "F32", {H, D}, {}};
      blob.data.resize(center_buf_[which].size() * sizeof(float));
      std::memcpy(blob.data.data(), center_buf_[which].data(), blob.data.size());
      state.tensors.push_back(std::move(blob));
    }
  }
  return state;
}

std::unique_ptr<TurboQuantKVCache> TurboQuantKVCache::from_state(const CacheState& state) {
  using namespace detail;
  TURBOKV_CHECK(meta_string(state, "class") == "turboquant",
                "TurboQuantKVCache: state has class '{}', expected 'turboquant'",
                meta_string(state, "class"));
  const int kv_heads = static_cast<int>(meta_int(state, "kv_heads", 1, 4096));
  const int head_dim = static_cast<int>(meta_int(state, "head_dim", 2, 8192));
  const TurboQuantCacheOptions o = options_from_state(state);
  const SavedRegions r = regions_from_state(state, o, kv_heads, head_dim);
  const size_t n_sinks = r.n_sinks, compressed = r.compressed, window_size = r.window_size;
  const size_t element = o.exact_dtype == DenseDtype::f16 ? 2 : 4;

  // Builds the codecs (and validates the options) before any tensor is touched.
  auto cache = std::make_unique<TurboQuantKVCache>(kv_heads, head_dim, o);
  check_same_codecs(state, *cache);
  const size_t key_cs = cache->key_code_size_, value_cs = cache->value_code_size_;

  const SavedTensors saved = saved_tensors(state, o, r, *cache);
  const TensorBlob &sk = *saved.sink_keys, &sv = *saved.sink_values, &kc = *saved.key_codes,
                   &vc = *saved.value_codes, &wk = *saved.window_keys, &wv = *saved.window_values;
  const size_t d = head_dim;
  for (int h = 0; h < kv_heads && n_sinks > 0; ++h) {  // no sinks: null buffers, memcpy would be UB
    void* keys = element == 2 ? static_cast<void*>(cache->sink_ptr16(false, h)) : cache->sink_ptr(false, h);
    void* values = element == 2 ? static_cast<void*>(cache->sink_ptr16(true, h)) : cache->sink_ptr(true, h);
    std::memcpy(keys, sk.data.data() + h * n_sinks * d * element, n_sinks * d * element);
    std::memcpy(values, sv.data.data() + h * n_sinks * d * element, n_sinks * d * element);
  }
  cache->n_sinks_ = n_sinks;
  for (int which = 0; which < 2 && o.center; ++which) {
    std::memcpy(cache->center_buf_[which].data(), saved.centers[which]->data.data(),
                saved.centers[which]->data.size());
  }
  // Codes go straight into pages (no re-encoding: bit-exact by construction).
  const size_t pt = o.page_tokens;
  cache->resize_pages((compressed + pt - 1) / pt);  // pages before first_held stay freed
  for (size_t c = r.dropped; c < compressed;) {
    const size_t p = c / pt, slot = c % pt, n = std::min(pt - slot, compressed - c);
    cache->ensure_page(p);
    for (int h = 0; h < kv_heads; ++h) {
      std::memcpy(cache->codes_ptr(p, h, false) + slot * key_cs, kc.data.data() + (h * r.held + c - r.dropped) * key_cs,
                  n * key_cs);
      std::memcpy(cache->codes_ptr(p, h, true) + slot * value_cs,
                  vc.data.data() + (h * r.held + c - r.dropped) * value_cs, n * value_cs);
    }
    c += n;
  }
  cache->compressed_size_ = compressed;
  cache->first_held_ = r.first_held;
  if (window_size > 0) {
    // Through float: fp16 -> float -> fp16 gives back the same bits for every finite value.
    std::vector<float> k(kv_heads * window_size * d), v(k.size());
    if (element == 2) {
      for (size_t i = 0; i < k.size(); ++i) {
        uint16_t hk, hv;
        std::memcpy(&hk, wk.data.data() + 2 * i, 2);
        std::memcpy(&hv, wv.data.data() + 2 * i, 2);
        k[i] = half_to_float(hk);
        v[i] = half_to_float(hv);
      }
    } else {
      std::memcpy(k.data(), wk.data.data(), k.size() * 4);
      std::memcpy(v.data(), wv.data.data(), v.size() * 4);
    }
    cache->push_window(k.data(), v.data(), window_size * d, window_size);
  }
  return cache;
}

std::unique_ptr<TurboQuantKVCache> to_turboquant(const DenseKVCache& dense,
                                                 const TurboQuantCacheOptions& options) {
  auto cache = std::make_unique<TurboQuantKVCache>(dense.kv_heads(), dense.head_dim(), options);
  // Page-sized chunks keep the scratch small; chunking does not change the codes.
  const size_t chunk = dense.page_tokens();
  const size_t row = static_cast<size_t>(dense.kv_heads()) * dense.head_dim();
  std::vector<float> k, v;
  for (size_t first = 0; first < dense.size(); first += chunk) {
    const size_t n = std::min(chunk, dense.size() - first);
    k.resize(n * row);
    v.resize(n * row);
    dense.fetch_range(first, n, k, v);
    cache->append(k, v, n);
  }
  return cache;
}

std::unique_ptr<TurboQuantKVCache> to_turboquant(const KVCache& source,
                                                 const TurboQuantCacheOptions& options) {
  TURBOKV_CHECK(source.first_held() == 0,
                "to_turboquant: the cache no longer holds positions before {} (a sliding-window ring)",
                source.first_held());
  if (const auto* dense = dynamic_cast<const DenseKVCache*>(&source)) {
    return to_turboquant(*dense, options);
  }
  const size_t n = static_cast<size_t>(source.kv_heads()) * source.size() * source.head_dim();
  std::vector<float> k(n), v(n);
  source.fetch(k, v);
  auto cache = std::make_unique<TurboQuantKVCache>(source.kv_heads(), source.head_dim(), options);
  cache->append(k, v, source.size());
  return cache;
}

}  // namespace turbokv
