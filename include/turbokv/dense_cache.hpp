// DenseKVCache: the uncompressed baseline cache (fp16 by default, f32 as an option).
//
// Page layout (read in place by attention kernels through key_page()/value_page()):
//   page p holds tokens [p * page_tokens, (p + 1) * page_tokens). Each page has two slabs,
//   keys and values, each head-major: [kv_heads][page_tokens][head_dim] elements of fp16
//   (IEEE binary16 bits as uint16_t, little-endian) or float32. One head's part of a page,
//   key_page(p, h), is contiguous [page_tokens][head_dim]; only the first tokens_in_page(p)
//   rows hold data. Every head slab starts 64-byte aligned (slab stride: page_tokens * head_dim
//   * element_size rounded up to 64 bytes). Every page but the last is full.
//
// Memory accounting: nbytes() == (tokens in held pages) * kv_heads * head_dim * 2 * element_size,
// i.e. the bytes of the stored keys and values themselves (size() tokens unless drop_before()
// freed pages at the front: a sliding-window layer's ring; freed pages are null in the page
// table, so page p still holds positions [p * page_tokens, ...)). The unused tail of the last page is
// allocated but is not data; allocated_bytes() reports the page memory including it.
//
// Cost: append is amortized O(1) per token and never copies stored data (a new page is
// allocated when the last one is full; the page table holds pointers, so growing it moves
// no tokens); trim frees every page that no longer holds a token.
//
// Input policy: append() rejects NaN/Inf (and, for fp16 storage, finite values beyond the
// fp16 range, which would silently become Inf) with turbokv::Error unless
// set_allow_non_finite(true). A rejected append leaves the cache unchanged.
//
// Thread-safety: one writer, many readers. append(), trim() and set_allow_non_finite() must
// not run concurrently with anything else on the same cache; const methods (size, fetch,
// nbytes, key_page, attend, save_state) may run concurrently with each other. Distinct caches
// share no mutable state and may be used from different threads freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "turbokv/kv_cache.hpp"

namespace turbokv {

enum class DenseDtype { f16, f32 };

// "f16" / "f32"; parse_dense_dtype throws turbokv::Error on anything else.
std::string dense_dtype_name(DenseDtype dtype);
DenseDtype parse_dense_dtype(const std::string& name);

// Element type of 16-bit input buffers (append_half()).
enum class HalfFormat { f16, bf16 };

class DenseKVCache : public KVCache {
 public:
  // Throws turbokv::Error unless 1 <= kv_heads <= 4096, 1 <= head_dim <= 8192 and
  // 1 <= page_tokens <= 65536.
  DenseKVCache(int kv_heads, int head_dim, DenseDtype dtype = DenseDtype::f16,
               size_t page_tokens = 256);
  ~DenseKVCache() override;
  DenseKVCache(const DenseKVCache&) = delete;
  DenseKVCache& operator=(const DenseKVCache&) = delete;
  DenseKVCache(DenseKVCache&&) noexcept;
  DenseKVCache& operator=(DenseKVCache&&) noexcept;

  std::string class_name() const override { return "dense"; }
  int kv_heads() const override { return kv_heads_; }
  int head_dim() const override { return head_dim_; }
  size_t size() const override { return size_; }

  void append(std::span<const float> keys, std::span<const float> values,
              size_t n_tokens) override;
  void fetch(std::span<float> keys, std::span<float> values) const override;
  size_t trim(size_t n) override;
  size_t nbytes() const override;
  CacheState save_state() const override;
  size_t first_held() const override { return first_held_; }
  size_t drop_before(size_t position) override;

  // Rebuilds a cache from save_state() output; throws turbokv::Error on any inconsistency.
  static std::unique_ptr<DenseKVCache> from_state(const CacheState& state);

  // Appends 16-bit input ([kv_heads][n_tokens][head_dim] of fp16 or bf16 bits).
  void append_half(std::span<const uint16_t> keys, std::span<const uint16_t> values,
                   size_t n_tokens, HalfFormat format);

  // Tokens [first, first + count) of every head as float32, [kv_heads][count][head_dim];
  // throws for positions before first_held().
  void fetch_range(size_t first, size_t count, std::span<float> keys,
                   std::span<float> values) const;

  size_t page_tokens() const { return page_tokens_; }
  size_t num_pages() const { return pages_.size(); }
  DenseDtype dtype() const { return dtype_; }
  size_t element_size() const { return dtype_ == DenseDtype::f16 ? 2 : 4; }
  size_t tokens_in_page(size_t page) const;
  // -> [page_tokens][head_dim] elements (uint16_t fp16 bits or float); throws on a bad index or
  // a page freed by drop_before().
  const void* key_page(size_t page, int head) const;
  const void* value_page(size_t page, int head) const;

  size_t allocated_bytes() const;
  bool allow_non_finite() const { return allow_non_finite_; }
  void set_allow_non_finite(bool allow) { allow_non_finite_ = allow; }

 private:
  struct Page;
  void check_finite(std::span<const float> data, const char* what) const;
  // Allocates page `page` (appended, or one drop_before() freed that a trim and append refill).
  void ensure_page(size_t page);
  uint8_t* slab(size_t page, int head, bool value) const;

  int kv_heads_;
  int head_dim_;
  DenseDtype dtype_;
  size_t page_tokens_;
  size_t size_ = 0;
  size_t first_held_ = 0;
  bool allow_non_finite_ = false;
  std::vector<std::unique_ptr<Page>> pages_;
};

}  // namespace turbokv
