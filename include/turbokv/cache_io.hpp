// Saving and loading caches: the cache class registry, PromptCache (the per-layer caches of one
// model) and its single-file safetensors format (documented in docs/formats.md).
//
// File layout (format version 2): a safetensors file whose __metadata__ holds
//   "format" = "turbokv.prompt_cache", "format_version" = "2", "n_layers" = "<L>",
//   "layers.<i>.<key>" = each layer's CacheState metadata (always including "class"),
//   "user.<key>" = free-form user metadata (model name, token ids, ...),
//   "checksum.meta.<key>" = XXH3-64 (16 hex digits) of every other metadata key and its value,
//   "checksum.tensor.<name>" = XXH3-64 of every tensor's bytes;
// and whose tensors are "layers.<i>.<name>" for each layer's CacheState tensors. Any other key,
// a layer index >= n_layers, a newer format version, or a missing, extra or mismatching checksum
// is rejected with turbokv::Error naming the key or tensor. Version-1 files (the same without
// the checksum keys) still load, with a warning on stderr that damage to them goes undetected.
//
// Thread-safety: register_cache_class() and load_kv_cache() may be called from any thread (the
// registry is guarded by a mutex). A PromptCache follows the KVCache contract: one writer, many
// readers; save_prompt_cache() only reads it. Distinct PromptCaches are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "turbokv/kv_cache.hpp"

namespace turbokv {

constexpr int kPromptCacheFormatVersion = 2;
// The oldest version load_prompt_cache() still reads (1: no checksums).
constexpr int kPromptCacheOldestFormatVersion = 1;

// Builds a cache from its saved state; throws turbokv::Error on inconsistent state.
using CacheFactory = std::function<std::unique_ptr<KVCache>(const CacheState&)>;

// Registers (or replaces) the loader of a class at run time. The built-in classes ("dense",
// "turboquant", and the baselines) are listed in src/cache/cache_registry.cpp and need no call.
void register_cache_class(const std::string& class_name, CacheFactory factory);
// Every class load_kv_cache() resolves, sorted.
std::vector<std::string> registered_cache_classes();
// Dispatches on state.metadata["class"]; throws turbokv::Error for a missing or unknown class.
std::unique_ptr<KVCache> load_kv_cache(const CacheState& state);

class PromptCache {
 public:
  PromptCache() = default;
  explicit PromptCache(std::vector<std::unique_ptr<KVCache>> layers);
  PromptCache(PromptCache&&) noexcept = default;
  PromptCache& operator=(PromptCache&&) noexcept = default;

  size_t n_layers() const { return layers_.size(); }
  // Throws turbokv::Error on an index out of range.
  KVCache& layer(size_t i);
  const KVCache& layer(size_t i) const;
  void add_layer(std::unique_ptr<KVCache> cache);  // null -> turbokv::Error
  // Hands the layers over and leaves none (the metadata stays): for an owner that keeps each
  // layer on its own, e.g. the Python binding's per-layer cache objects.
  std::vector<std::unique_ptr<KVCache>> release_layers() { return std::exchange(layers_, {}); }

  // Free-form user metadata saved with the cache (keys and values: UTF-8 strings).
  std::map<std::string, std::string>& metadata() { return metadata_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Tokens held by layer 0 (0 without layers).
  size_t size() const;
  // Sum of the layers' nbytes().
  size_t nbytes() const;
  // Trims every layer by n; returns how many tokens layer 0 dropped.
  size_t trim(size_t n);

 private:
  std::vector<std::unique_ptr<KVCache>> layers_;
  std::map<std::string, std::string> metadata_;
};

// One file per prompt cache, written crash-safely (temporary file, fsync, rename).
void save_prompt_cache(const std::string& path, const PromptCache& cache);
// Validates everything before building each layer; throws turbokv::Error naming the file and
// the problem (truncated, corrupt header, wrong dtype/shape, bad offsets, newer version,
// checksum mismatch naming the tensor or metadata key, ...). Every metadata checksum is verified
// before any layer is built, each tensor's before its layer is built.
PromptCache load_prompt_cache(const std::string& path);

// The same format in memory (tests, fuzzing, network transfer).
std::vector<uint8_t> serialize_prompt_cache(const PromptCache& cache);
PromptCache parse_prompt_cache(std::span<const uint8_t> bytes,
                               const std::string& name = "<memory>");

// The metadata of a saved prompt cache without building it (header only; validated like a load,
// metadata checksums included, except for the tensors' contents): what `turbokv cache-info`
// prints.
struct PromptCacheFileInfo {
  int format_version = 0;
  bool checksummed = false;  // format version >= 2: every key and tensor carries a checksum
  uint64_t file_bytes = 0;
  std::map<std::string, std::string> user_metadata;
  std::vector<std::map<std::string, std::string>> layers;  // each layer's CacheState metadata
  std::vector<uint64_t> layer_tensor_bytes;                // bytes of each layer's tensors
};
PromptCacheFileInfo read_prompt_cache_info(const std::string& path);

}  // namespace turbokv
