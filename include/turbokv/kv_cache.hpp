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
  // Number of positions appended (minus those trimmed). Positions keep their absolute numbers:
  // after drop_before() the oldest ones are no longer held, but still counted here.
  virtual size_t size() const = 0;
  // Positions [0, first_held()) are no longer held (a sliding-window layer's ring, drop_before);
  // 0 for a cache that holds every position. fetch() writes zeros for them, and attention that
  // would read one of them is refused (validate_attention_request).
  virtual size_t first_held() const { return 0; }
  // Frees the storage of positions before `position` in whole pages (a page is freed only when
  // every position it holds is older), so a sliding-window layer holds about its window however
  // long the sequence grows; returns first_held(). Attention results over the positions still
  // held are bit-identical. Classes without pages keep everything (the default: returns 0).
  virtual size_t drop_before(size_t position) {
    (void)position;
    return first_held();
  }

  // Appends n_tokens tokens; keys and values are [kv_heads][n_tokens][head_dim].
  // Throws turbokv::Error on a size mismatch or (by default) NaN/Inf input.
  virtual void append(std::span<const float> keys, std::span<const float> values,
                      size_t n_tokens) = 0;
  // Writes the whole cache, dequantized, as [kv_heads][size()][head_dim] each.
  virtual void fetch(std::span<float> keys, std::span<float> values) const = 0;
  // Drops the newest n tokens (at most size()); returns how many were dropped. Trimming below
  // first_held() lowers first_held() to size(): the dropped positions do not come back.
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
