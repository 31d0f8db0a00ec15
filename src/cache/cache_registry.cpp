// The cache class registry: which loader rebuilds a saved layer of each class.
//
// Each class has a loader (rebuilds a saved layer) and a maker (builds an empty layer from a
// CacheConfig, for make_prompt_cache). The built-in classes are an explicit table rather than static self-registration, because a
// registration object in a static library's translation unit that nothing references is dropped
// by the linker. Adding a class = one line in kBuiltinClasses (plus its functions above it).
#include <algorithm>
#include <mutex>

#include "core/check.hpp"
#include "turbokv/baseline_caches.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/prompt_cache.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv {
namespace {

struct BuiltinClass {
  const char* name;
  std::unique_ptr<KVCache> (*load)(const CacheState&);
  // May be null for a class that make_prompt_cache cannot build.
  std::unique_ptr<KVCache> (*make)(int kv_heads, int head_dim, const CacheConfig&);
};

std::unique_ptr<KVCache> load_dense(const CacheState& s) { return DenseKVCache::from_state(s); }
std::unique_ptr<KVCache> make_dense(int kv_heads, int head_dim, const CacheConfig& c) {
  return std::make_unique<DenseKVCache>(kv_heads, head_dim, c.dense_dtype, c.dense_page_tokens);
}
std::unique_ptr<KVCache> load_turboquant(const CacheState& s) {
  return TurboQuantKVCache::from_state(s);
}
std::unique_ptr<KVCache> make_turboquant(int kv_heads, int head_dim, const CacheConfig& c) {
  return std::make_unique<TurboQuantKVCache>(kv_heads, head_dim, c.tq);
}

// Baselines: add {"<class_name>", &<loader>, &<maker or nullptr>} lines here.
const BuiltinClass kBuiltinClasses[] = {
    {"dense", &load_dense, &make_dense},
    {"turboquant", &load_turboquant, &make_turboquant},
    {"q8_0", &load_baseline_cache, &make_baseline_cache},
    {"q4_0", &load_baseline_cache, &make_baseline_cache},
    {"kivi", &load_baseline_cache, &make_baseline_cache},
    {"affine", &load_baseline_cache, &make_baseline_cache},
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, CacheFactory> runtime;  // run-time registrations win over the table
  std::map<std::string, CacheMaker> makers;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_cache_class(const std::string& class_name, CacheFactory factory) {
  TURBOKV_CHECK(!class_name.empty(), "register_cache_class: empty class name");
  TURBOKV_CHECK(static_cast<bool>(factory), "register_cache_class: null factory for '{}'",
                class_name);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.runtime[class_name] = std::move(factory);
}

std::vector<std::string> registered_cache_classes() {
  std::vector<std::string> names;
  for (const auto& c : kBuiltinClasses) names.emplace_back(c.name);
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (const auto& [name, f] : r.runtime) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::unique_ptr<KVCache> load_kv_cache(const CacheState& state) {
  auto it = state.metadata.find("class");
  TURBOKV_CHECK(it != state.metadata.end(), "load_kv_cache: the state has no 'class' metadata");
  const std::string& name = it->second;
  CacheFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (auto f = r.runtime.find(name); f != r.runtime.end()) factory = f->second;
  }
  std::unique_ptr<KVCache> cache;
  if (factory) {
    cache = factory(state);
  } else {
    auto b = std::find_if(std::begin(kBuiltinClasses), std::end(kBuiltinClasses),
                          [&](const BuiltinClass& c) { return name == c.name; });
    TURBOKV_CHECK(b != std::end(kBuiltinClasses), "load_kv_cache: unknown cache class '{}' "
                  "(known: {})", name, fmt::join(registered_cache_classes(), ", "));
    cache = b->load(state);
  }
  TURBOKV_CHECK(cache != nullptr, "load_kv_cache: the loader of '{}' returned null", name);
  TURBOKV_CHECK(cache->class_name() == name,
                "load_kv_cache: the loader of '{}' built a '{}' cache", name, cache->class_name());
  return cache;
}

void register_cache_maker(const std::string& kind, CacheMaker maker) {
  TURBOKV_CHECK(!kind.empty(), "register_cache_maker: empty kind");
  TURBOKV_CHECK(static_cast<bool>(maker), "register_cache_maker: null maker for '{}'", kind);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.makers[kind] = std::move(maker);
}

std::unique_ptr<KVCache> make_kv_cache(int kv_heads, int head_dim, const CacheConfig& config) {
  TURBOKV_CHECK(config.layer_bits.empty(),
                "make_kv_cache: layer_bits sets a model's layers apart; build them with make_prompt_cache "
                "(one layer's configuration: layer_cache_config)");
  CacheMaker maker;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (auto m = r.makers.find(config.kind); m != r.makers.end()) maker = m->second;
  }
  std::unique_ptr<KVCache> cache;
  if (maker) {
    cache = maker(kv_heads, head_dim, config);
  } else {
    auto b = std::find_if(std::begin(kBuiltinClasses), std::end(kBuiltinClasses),
                          [&](const BuiltinClass& c) { return config.kind == c.name; });
    TURBOKV_CHECK(b != std::end(kBuiltinClasses) && b->make != nullptr,
                  "make_kv_cache: unknown cache kind '{}'", config.kind);
    cache = b->make(kv_heads, head_dim, config);
  }
  TURBOKV_CHECK(cache != nullptr, "make_kv_cache: the maker of '{}' returned null", config.kind);
  return cache;
}

}  // namespace turbokv
