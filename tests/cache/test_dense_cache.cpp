// DenseKVCache: shapes, chunked appends, paged layout, trim, exact byte accounting, input policy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#include "turbokv/half.hpp"
#include "cache_test_util.hpp"
#include "test_util.hpp"

using turbokv::test::random_normal;
using turbokv::test::slice_tokens;

namespace turbokv {
namespace {

std::vector<float> round_half(std::vector<float> x) {
  for (float& v : x) v = half_to_float(float_to_half(v));
  return x;
}

TEST(DenseKVCache, ShapesAndClassName) {
  DenseKVCache cache(4, 64);
  EXPECT_EQ(cache.class_name(), "dense");
  EXPECT_EQ(cache.kv_heads(), 4);
  EXPECT_EQ(cache.head_dim(), 64);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.dtype(), DenseDtype::f16);
  EXPECT_EQ(cache.page_tokens(), 256u);
  EXPECT_EQ(cache.nbytes(), 0u);
  EXPECT_EQ(cache.num_pages(), 0u);
}

TEST(DenseKVCache, UnevenChunksEqualOneAppend) {
  for (DenseDtype dtype : {DenseDtype::f16, DenseDtype::f32}) {
    const int heads = 3, dim = 20;
    const size_t n = 123;
    const auto keys = random_normal(heads * n * dim, 1);
    const auto values = random_normal(heads * n * dim, 2);
    DenseKVCache whole(heads, dim, dtype, 16), chunked(heads, dim, dtype, 16);
    whole.append(keys, values, n);
    const size_t chunks[] = {1, 15, 16, 0, 40, 2, 49};
    size_t first = 0;
    for (size_t c : chunks) {
      chunked.append(slice_tokens(keys, heads, n, dim, first, c),
                     slice_tokens(values, heads, n, dim, first, c), c);
      first += c;
    }
    ASSERT_EQ(first, n);
    ASSERT_EQ(chunked.size(), n);
    EXPECT_EQ(chunked.num_pages(), (n + 15) / 16);
    std::vector<float> k1(keys.size()), v1(keys.size()), k2(keys.size()), v2(keys.size());
    whole.fetch(k1, v1);
    chunked.fetch(k2, v2);
    EXPECT_EQ(k1, k2);
    EXPECT_EQ(v1, v2);
    if (dtype == DenseDtype::f32) {
      EXPECT_EQ(k1, keys);
      EXPECT_EQ(v1, values);
    } else {
      EXPECT_EQ(k1, round_half(keys));
      EXPECT_EQ(v1, round_half(values));
    }
  }
}

TEST(DenseKVCache, PageLayoutIsHeadMajor) {
  const int heads = 2, dim = 8;
  const size_t n = 11, pt = 4;
  const auto keys = random_normal(heads * n * dim, 3);
  const auto values = random_normal(heads * n * dim, 4);
  DenseKVCache cache(heads, dim, DenseDtype::f32, pt);
  cache.append(keys, values, n);
  ASSERT_EQ(cache.num_pages(), 3u);
  EXPECT_EQ(cache.tokens_in_page(2), 3u);
  for (size_t p = 0; p < 3; ++p) {
    for (int h = 0; h < heads; ++h) {
      const auto* kp = static_cast<const float*>(cache.key_page(p, h));
      const auto* vp = static_cast<const float*>(cache.value_page(p, h));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(kp) % 64, 0u);
      for (size_t t = 0; t < cache.tokens_in_page(p); ++t) {
        for (int i = 0; i < dim; ++i) {
          const size_t src = (h * n + p * pt + t) * dim + i;
          ASSERT_EQ(kp[t * dim + i], keys[src]);
          ASSERT_EQ(vp[t * dim + i], values[src]);
        }
      }
    }
  }
  EXPECT_THROW(cache.key_page(3, 0), Error);
  EXPECT_THROW(cache.value_page(0, 2), Error);
}

TEST(DenseKVCache, HeadSlabsAreAligned) {
  DenseKVCache cache(3, 20, DenseDtype::f16, 3);  // 120-byte slabs, padded
  std::vector<float> x(3 * 20, 0.5f);
  cache.append(x, x, 1);
  for (int h = 0; h < 3; ++h) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(cache.key_page(0, h)) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(cache.value_page(0, h)) % 64, 0u);
    EXPECT_EQ(static_cast<const uint16_t*>(cache.key_page(0, h))[19], float_to_half(0.5f));
  }
}

TEST(DenseKVCache, F16PagesHoldHalfBits) {
  DenseKVCache cache(1, 4, DenseDtype::f16, 2);
  const std::vector<float> k = {1.0f, -2.0f, 0.5f, 65504.0f}, v = {0.0f, 1e-5f, 3.0f, -1.0f};
  cache.append(k, v, 1);
  const auto* kp = static_cast<const uint16_t*>(cache.key_page(0, 0));
  const auto* vp = static_cast<const uint16_t*>(cache.value_page(0, 0));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(kp[i], float_to_half(k[i]));
    EXPECT_EQ(vp[i], float_to_half(v[i]));
  }
}

TEST(DenseKVCache, NbytesIsExact) {
  const int heads = 2, dim = 10;
  DenseKVCache f16(heads, dim, DenseDtype::f16, 8), f32(heads, dim, DenseDtype::f32, 8);
  const auto x = random_normal(heads * 13 * dim, 5);
  f16.append(x, x, 13);
  f32.append(x, x, 13);
  EXPECT_EQ(f16.nbytes(), 13u * heads * dim * 2 * 2);
  EXPECT_EQ(f32.nbytes(), 13u * heads * dim * 2 * 4);
  // Two pages; each head slab (8 tokens * 10 dims * 2 bytes = 160) padded to 192 bytes.
  EXPECT_EQ(f16.allocated_bytes(), 2u * heads * 2 * 192);
  f16.trim(5);
  EXPECT_EQ(f16.nbytes(), 8u * heads * dim * 2 * 2);
  EXPECT_EQ(f16.allocated_bytes(), 1u * heads * 2 * 192);
}

TEST(DenseKVCache, TrimThenAppendEqualsNeverAppended) {
  const int heads = 2, dim = 16;
  const size_t n = 50;
  const auto keys = random_normal(heads * n * dim, 6);
  const auto values = random_normal(heads * n * dim, 7);
  const auto other = random_normal(heads * 30 * dim, 8);
  DenseKVCache a(heads, dim, DenseDtype::f16, 8), b(heads, dim, DenseDtype::f16, 8);
  a.append(slice_tokens(keys, heads, n, dim, 0, 20), slice_tokens(values, heads, n, dim, 0, 20), 20);
  a.append(other, other, 30);
  EXPECT_EQ(a.num_pages(), 7u);
  EXPECT_EQ(a.trim(30), 30u);
  EXPECT_EQ(a.size(), 20u);
  EXPECT_EQ(a.num_pages(), 3u);  // whole pages freed
  a.append(slice_tokens(keys, heads, n, dim, 20, 30), slice_tokens(values, heads, n, dim, 20, 30),
           30);
  b.append(keys, values, n);
  std::vector<float> ka(keys.size()), va(keys.size()), kb(keys.size()), vb(keys.size());
  a.fetch(ka, va);
  b.fetch(kb, vb);
  EXPECT_EQ(ka, kb);
  EXPECT_EQ(va, vb);
  EXPECT_EQ(a.trim(1000), n);  // capped at size()
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(a.num_pages(), 0u);
  EXPECT_EQ(a.trim(1), 0u);
}

TEST(DenseKVCache, RejectsBadInput) {
  EXPECT_THROW(DenseKVCache(0, 64), Error);
  EXPECT_THROW(DenseKVCache(2, 0), Error);
  EXPECT_THROW(DenseKVCache(2, 64, DenseDtype::f16, 0), Error);
  DenseKVCache cache(2, 4, DenseDtype::f16, 4);
  std::vector<float> x(2 * 3 * 4, 1.0f);
  EXPECT_THROW(cache.append(x, x, 2), Error);                                  // size mismatch
  EXPECT_THROW(cache.append(x, std::span<const float>(x).first(20), 3), Error);  // values short
  EXPECT_THROW(cache.append({}, {}, std::numeric_limits<size_t>::max() / 2), Error);
  auto bad = x;
  bad[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(cache.append(bad, x, 3), Error);
  bad[7] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(cache.append(x, bad, 3), Error);
  bad[7] = 1e6f;  // finite but not representable in fp16
  try {
    cache.append(bad, x, 3);
    FAIL() << "expected an overflow error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overflows fp16"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.size(), 0u);  // rejected appends change nothing
  cache.set_allow_non_finite(true);
  cache.append(bad, x, 3);
  EXPECT_EQ(cache.size(), 3u);
  std::vector<float> k(x.size()), v(x.size()), small(3);
  cache.fetch(k, v);
  EXPECT_TRUE(std::isinf(k[7]));
  EXPECT_THROW(cache.fetch(small, v), Error);
  EXPECT_THROW(cache.fetch_range(2, 2, k, v), Error);
}

TEST(DenseKVCache, AppendHalfInput) {
  const int heads = 2, dim = 8;
  const size_t n = 5;
  const auto x = random_normal(heads * n * dim, 9);
  std::vector<uint16_t> h(x.size()), b(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    h[i] = float_to_half(x[i]);
    b[i] = float_to_bf16(x[i]);
  }
  DenseKVCache a(heads, dim, DenseDtype::f32), c(heads, dim, DenseDtype::f32);
  a.append_half(h, h, n, HalfFormat::f16);
  c.append_half(b, b, n, HalfFormat::bf16);
  std::vector<float> k(x.size()), v(x.size());
  a.fetch(k, v);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(k[i], half_to_float(h[i]));
  c.fetch(k, v);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(v[i], bf16_to_float(b[i]));
}

TEST(DenseKVCache, AppendDoesNotMoveStoredPages) {
  DenseKVCache cache(1, 4, DenseDtype::f32, 2);
  std::vector<float> x(4, 1.0f);
  cache.append(x, x, 1);
  const void* first = cache.key_page(0, 0);
  for (int i = 0; i < 200; ++i) cache.append(x, x, 1);
  EXPECT_EQ(cache.key_page(0, 0), first);  // pages never relocate on growth
}

}  // namespace
}  // namespace turbokv
