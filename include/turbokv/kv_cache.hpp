// KVCache: the interface an inference engine holds for each attention layer.
//
// Tensor layout at this interface, for every cache class: [kv_heads][n_tokens][head_dim],
// row-major float32. A cache stores whatever it likes internally (fp16 pages, packed
// TurboQuant codes, baseline quantizers) and reproduces it on fetch().
//
// Thread-safety contract (all classes): a cache is one writer, many readers. append(), trim()
// and load must not run concurrently with anything else on the same cache; const methods
// (size, fetch, nbytes, attend, save_state) may run concurrently with each other. Distinct
// caches share no mutable state and may be used from different threads freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace turbokv {

struct AttentionRequest;  // attention.hpp

// One named tensor of a cache's saved state (safetensors dtype names: "U8", "F16", "F32", "I32",
// "I64").
struct TensorBlob {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // little-endian, contiguous, row-major
};

// Everything needed to rebuild a cache: string metadata (class, options, sizes) and tensors.
struct CacheState {
  std::map<std::string, std::string> metadata;
  std::vector<TensorBlob> tensors;
};

class KVCache {
 public:
  virtual ~KVCache() = default;

  // Stable identifier saved in files ("dense", "turboquant", "q8_0", ...).
  virtual std::string class_name() const = 0;
  virtual int kv_heads() const = 0;
  virtual int head_dim() const = 0;
  // Number of tokens held.
  virtual size_t size() const = 0;

  // Appends n_tokens tokens; keys and values are [kv_heads][n_tokens][head_dim].
  // Throws turbokv::Error on a size mismatch or (by default) NaN/Inf input.
  virtual void append(std::span<const float> keys, std::span<const float> values,
                      size_t n_tokens) = 0;
  // Writes the whole cache, dequantized, as [kv_heads][size()][head_dim] each.
  virtual void fetch(std::span<float> keys, std::span<float> values) const = 0;
  // Drops the newest n tokens (at most size()); returns how many were dropped.
  virtual size_t trim(size_t n) = 0;
  // Exact bytes held by the cache's data (codes, norms, scales, windows), not scratch.
  virtual size_t nbytes() const = 0;

  // Attention of the request's queries over this cache. The default dequantizes the whole
  // cache and runs the reference (what the Python original did); classes override it with
  // fused kernels.
  virtual void attend(const AttentionRequest& request) const;

  // Saved state; load_kv_cache() (cache_io.hpp) rebuilds the cache from it bit-exactly.
  virtual CacheState save_state() const = 0;
};

}  // namespace turbokv
