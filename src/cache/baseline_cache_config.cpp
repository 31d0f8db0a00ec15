// The maker of the baseline cache classes (q8_0/q4_0, KIVI, affine) from a CacheConfig's options,
// and which shapes each cannot take (kv_config_problem).
#include <charconv>

#include "core/check.hpp"
#include "turbokv/baseline_caches.hpp"
#include "turbokv/cache_config.hpp"

namespace turbokv {

namespace {

int option_int(const CacheConfig& c, const std::string& key, int fallback, int min, int max) {
  auto it = c.options.find(key);
  if (it == c.options.end()) return fallback;
  int v = 0;
  const auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  TURBOKV_CHECK(ec == std::errc() && end == it->second.data() + it->second.size() && v >= min &&
                    v <= max,
                "cache config '{}': option {} must be an integer in [{}, {}], got '{}'", c.kind,
                key, min, max, it->second);
  return v;
}

void check_option_keys(const CacheConfig& c, std::initializer_list<const char*> known) {
  for (const auto& [key, value] : c.options) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    TURBOKV_CHECK(ok, "cache config '{}': unknown option '{}'", c.kind, key);
  }
}

BlockQuantOptions block_options(const CacheConfig& c) {
  check_option_keys(c, {"hadamard", "rotation_seed"});
  BlockQuantOptions o;
  o.format = c.kind == "q8_0" ? BlockQuantFormat::q8_0 : BlockQuantFormat::q4_0;
  o.hadamard = option_int(c, "hadamard", 0, 0, 1) == 1;
  if (auto it = c.options.find("rotation_seed"); it != c.options.end()) {
    const auto [end, ec] =
        std::from_chars(it->second.data(), it->second.data() + it->second.size(), o.rotation_seed);
    TURBOKV_CHECK(ec == std::errc() && end == it->second.data() + it->second.size(),
                  "cache config '{}': bad rotation_seed '{}'", c.kind, it->second);
  }
  return o;
}

KiviOptions kivi_options(const CacheConfig& c) {
  check_option_keys(c, {"bits", "group_size", "residual"});
  KiviOptions o;
  o.bits = option_int(c, "bits", 2, 1, 8);
  o.group_size = option_int(c, "group_size", 32, 1, 1024);
  o.residual = static_cast<size_t>(option_int(c, "residual", 32, 0, 65536));
  return o;
}

AffineOptions affine_options(const CacheConfig& c) {
  check_option_keys(c, {"bits", "group_size"});
  AffineOptions o;
  o.bits = option_int(c, "bits", 4, 1, 8);
  o.group_size = option_int(c, "group_size", 64, 1, 1024);
  return o;
}
}  // namespace

std::string kv_config_problem(const KVConfigSpec& spec, int kv_heads, int head_dim) {
  (void)kv_heads;
  const CacheConfig& c = spec.config;
  std::string problem;
  if (c.kind == "q8_0" || c.kind == "q4_0") {
    problem = BlockQuantKVCache::shape_problem(head_dim, block_options(c));
  } else if (c.kind == "kivi") {
    problem = KiviKVCache::shape_problem(head_dim, kivi_options(c));
  } else if (c.kind == "affine") {
    problem = AffineKVCache::shape_problem(head_dim, affine_options(c));
  }
  if (!problem.empty() && spec.name != c.kind) problem = spec.name + ": " + problem;
  return problem;
}

std::unique_ptr<KVCache> make_baseline_cache(int kv_heads, int head_dim, const CacheConfig& c) {
  if (c.kind == "q8_0" || c.kind == "q4_0") {
    return std::make_unique<BlockQuantKVCache>(kv_heads, head_dim, block_options(c));
  }
  if (c.kind == "kivi") return std::make_unique<KiviKVCache>(kv_heads, head_dim, kivi_options(c));
  if (c.kind == "affine") {
    return std::make_unique<AffineKVCache>(kv_heads, head_dim, affine_options(c));
  }
  detail::fail("make_baseline_cache: '{}' is not a baseline cache kind", c.kind);
}

}  // namespace turbokv
