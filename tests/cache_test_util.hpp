// Helpers of the cache tests: slicing a [heads][n][dim] tensor by tokens, and bit-identity of two
// caches (the same saved state, tensor for tensor, and the same fetched keys and values).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "turbokv/kv_cache.hpp"

namespace turbokv::test {

// Tokens [first, first + count) of a [heads][n][dim] tensor.
inline std::vector<float> slice_tokens(const std::vector<float>& x, int heads, size_t n, int dim, size_t first,
                                       size_t count) {
  std::vector<float> out(static_cast<size_t>(heads) * count * dim);
  for (int h = 0; h < heads && count > 0; ++h) {
    std::memcpy(out.data() + h * count * dim, x.data() + (h * n + first) * dim, count * dim * sizeof(float));
  }
  return out;
}

// The same saved state: metadata, and each tensor's name, type, shape and bytes.
inline void expect_same_state(const CacheState& a, const CacheState& b) {
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_EQ(a.tensors[i].dtype, b.tensors[i].dtype) << a.tensors[i].name;
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape) << a.tensors[i].name;
    EXPECT_TRUE(a.tensors[i].data == b.tensors[i].data) << a.tensors[i].name;
  }
}

// Bit-identical caches: class, shape and bytes, the saved state, and what fetch() gives.
inline void expect_identical_caches(const KVCache& a, const KVCache& b) {
  ASSERT_EQ(a.class_name(), b.class_name());
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.kv_heads(), b.kv_heads());
  ASSERT_EQ(a.head_dim(), b.head_dim());
  EXPECT_EQ(a.nbytes(), b.nbytes());
  expect_same_state(a.save_state(), b.save_state());
  const size_t n = static_cast<size_t>(a.kv_heads()) * a.size() * a.head_dim();
  std::vector<float> ka(n), va(n), kb(n), vb(n);
  a.fetch(ka, va);
  b.fetch(kb, vb);
  EXPECT_TRUE(n == 0 || std::memcmp(ka.data(), kb.data(), n * sizeof(float)) == 0);
  EXPECT_TRUE(n == 0 || std::memcmp(va.data(), vb.data(), n * sizeof(float)) == 0);
}

}  // namespace turbokv::test
