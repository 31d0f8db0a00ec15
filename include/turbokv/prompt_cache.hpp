// Building a model's PromptCache (one KVCache per attention layer) from a cache configuration.
//
// CacheConfig.kind names a registered cache class: "dense", "turboquant", or a baseline class
// (listed in src/cache/cache_registry.cpp). A config can also be written as a string
// (parse_cache_config), e.g. for a command-line flag:
//   "dense"                       "dense:dtype=f32"
//   "turboquant:bits=3"           "turboquant:key_bits=4,value_bits=2,window=64,sinks=4"
//   "turboquant:key_codec=prod,rotation=haar,seed=7,fp32_norm=1,norm_correction=1"
//   "turboquant:bits=4,window=32,sinks=1,exact=f16"  (sinks and window stored in fp16)
//   "q8_0:hadamard=1"             (options of other classes go to CacheConfig.options)
//   "turboquant:key_bits=3,value_bits=3,layer_bits=0k4v4;-1k4v3"  (per-layer widths, below)
// Common keys: page_tokens (both built-ins), dense_layers=0;31 (layers kept dense),
// sliding=dense|same (how sliding-window layers are stored, below).
//
// Thread-safety: these functions are pure (make_kv_cache reads the registry under its lock).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "turbokv/cache_io.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv {

// One layer's TurboQuant widths in a mixed-precision configuration. A negative index counts
// from the last layer (-1: the last), so one configuration can name "the first and the last
// layer" of any model.
struct LayerBits {
  int layer = 0;
  double key_bits = 4, value_bits = 4;
  bool operator==(const LayerBits&) const = default;
};

struct CacheConfig {
  std::string kind = "dense";
  DenseDtype dense_dtype = DenseDtype::f16;
  size_t dense_page_tokens = 256;
  TurboQuantCacheOptions tq;
  // Class-specific options of other classes (strings, interpreted by that class's maker).
  std::map<std::string, std::string> options;
  // Layer indices kept in a DenseKVCache (dense_dtype) whatever `kind` says.
  std::vector<int> dense_layers;
  // TurboQuant only: layers whose widths differ from tq.key_bits / tq.value_bits (later
  // entries win when two name the same layer). Each layer's cache stores its own widths, so a
  // saved file needs nothing more to decode.
  std::vector<LayerBits> layer_bits;
  // How a sliding-window layer is stored (layer_cache_config with the layer's window > 0; it
  // keeps only its window, a ring of pages): "dense", a DenseKVCache of dense_dtype, exact;
  // "same": the configuration's own kind, as the global layers (TurboQuant compresses the window
  // too); "auto" (the default): dense for windows up to kDenseRingMaxWindow positions (Gemma 3's
  // 512 and 1024: small next to a long context's global layers), the same as the others for
  // wider ones (Gemma 2's 4096; Mistral's 4096 and Phi-3's 2047, where every layer slides and
  // dense rings would leave nothing compressed below 2-4K tokens). docs/architecture.md, Sliding
  // windows.
  std::string sliding = "auto";
};

// Parses "kind[:key=value,...]"; throws turbokv::Error on an unknown key or a bad value.
CacheConfig parse_cache_config(const std::string& spec);
// The canonical string of a config; parse_cache_config reads it back into an equivalent config
// (same values for every field the kind uses).
std::string format_cache_config(const CacheConfig& config);

// Builds an empty cache of config.kind for one layer; throws turbokv::Error for an unknown kind.
using CacheMaker =
    std::function<std::unique_ptr<KVCache>(int kv_heads, int head_dim, const CacheConfig&)>;
void register_cache_maker(const std::string& kind, CacheMaker maker);
std::unique_ptr<KVCache> make_kv_cache(int kv_heads, int head_dim, const CacheConfig& config);

// The widest sliding window whose ring sliding=auto keeps dense.
inline constexpr size_t kDenseRingMaxWindow = 1024;

// The configuration of layer `layer` of n_layers: a dense one for config.dense_layers, and for a
// sliding-window layer (window > 0: the positions it attends back) as config.sliding says, the
// layer's widths from config.layer_bits, without the per-layer lists. The one place
// a layer's kind chooses its cache. Throws turbokv::Error for a layer index outside the model
// (either list).
CacheConfig layer_cache_config(const CacheConfig& config, int layer, int n_layers, size_t window = 0);

// n_layers empty caches, each built from layer_cache_config; layer_windows[l] is layer l's
// sliding window (0: global; empty: no layer slides; engine::ModelConfig::layer_windows()).
PromptCache make_prompt_cache(int n_layers, int kv_heads, int head_dim, const CacheConfig& config,
                              const std::vector<size_t>& layer_windows = {});

}  // namespace turbokv
