// TurboQuant caches whose exact regions (sinks, window) are stored in fp16 (exact_dtype=f16):
// they hold exactly the fp16-rounded tokens, compress what an f32 cache compresses from the same
// rounded input, cost 2 bytes a value, save and load bit-exactly, and attend as the reference.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "turbokv/attention.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/error.hpp"
#include "turbokv/half.hpp"
#include "turbokv/prompt_cache.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv {
namespace {

constexpr int H = 2, D = 64;

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = half_to_float(float_to_half(v[i]));
  return out;
}

TurboQuantCacheOptions options(DenseDtype exact) {
  TurboQuantCacheOptions o;
  o.key_bits = 4;
  o.value_bits = 3;
  o.window = 24;
  o.sinks = 3;
  o.page_tokens = 16;
  o.exact_dtype = exact;
  return o;
}

// [H][n][D] slices of [H][total][D] data, tokens [first, first + n).
std::vector<float> slice(const std::vector<float>& all, size_t total, size_t first, size_t n) {
  std::vector<float> out(static_cast<size_t>(H) * n * D);
  for (int h = 0; h < H; ++h) {
    std::copy(all.begin() + static_cast<long>((h * total + first) * D), all.begin() + static_cast<long>((h * total + first + n) * D),
              out.begin() + static_cast<long>(h * n * D));
  }
  return out;
}

bool same_state(const CacheState& a, const CacheState& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    if (a.tensors[i].name != b.tensors[i].name || a.tensors[i].dtype != b.tensors[i].dtype ||
        a.tensors[i].shape != b.tensors[i].shape || a.tensors[i].data != b.tensors[i].data) {
      return false;
    }
  }
  return true;
}

const TensorBlob& tensor(const CacheState& s, const std::string& name) {
  for (const auto& t : s.tensors) {
    if (t.name == name) return t;
  }
  throw Error("no tensor " + name);
}

TEST(TurboQuantExactF16, HoldsRoundedTokensAndCompressesAsF32DoesOnTheSameInput) {
  const size_t n = 101;
  const auto k = gaussian(H * n * D, 1), v = gaussian(H * n * D, 2);
  TurboQuantKVCache half(H, D, options(DenseDtype::f16)), full(H, D, options(DenseDtype::f32));
  half.append(k, v, n);
  full.append(rounded(k), rounded(v), n);
  ASSERT_EQ(half.size(), n);
  std::vector<float> hk(k.size()), hv(v.size()), fk(k.size()), fv(v.size());
  half.fetch(hk, hv);
  full.fetch(fk, fv);
  EXPECT_EQ(hk, fk);  // sinks and window exactly the rounded input; codes identical
  EXPECT_EQ(hv, fv);
  const auto hs = half.save_state(), fs = full.save_state();
  EXPECT_EQ(tensor(hs, "key_codes").data, tensor(fs, "key_codes").data);
  EXPECT_EQ(tensor(hs, "value_codes").data, tensor(fs, "value_codes").data);
  EXPECT_EQ(tensor(hs, "window_keys").dtype, "F16");
  EXPECT_EQ(hs.metadata.at("exact_dtype"), "f16");
  // Two bytes a value in the exact regions.
  const size_t exact_tokens = half.n_sinks() + half.window_size();
  EXPECT_EQ(full.nbytes() - half.nbytes(), static_cast<size_t>(H) * exact_tokens * D * 2 * 2);
  EXPECT_LT(half.allocated_bytes(), full.allocated_bytes());
  EXPECT_THROW(half.window_keys(0), Error);
  EXPECT_THROW(full.window_keys_f16(0), Error);
}

TEST(TurboQuantExactF16, AnyChunkingGivesTheSameCache) {
  const size_t n = 90;
  const auto k = gaussian(H * n * D, 3), v = gaussian(H * n * D, 4);
  TurboQuantKVCache whole(H, D, options(DenseDtype::f16));
  whole.append(k, v, n);
  std::mt19937 rng(9);
  TurboQuantKVCache pieces(H, D, options(DenseDtype::f16));
  for (size_t first = 0; first < n;) {
    const size_t m = std::min<size_t>(n - first, 1 + rng() % 30);
    pieces.append(slice(k, n, first, m), slice(v, n, first, m), m);
    first += m;
  }
  EXPECT_TRUE(same_state(whole.save_state(), pieces.save_state()));
}

TEST(TurboQuantExactF16, SavesAndLoadsBitExactly) {
  const size_t n = 77;
  const auto k = gaussian(H * n * D, 5), v = gaussian(H * n * D, 6);
  TurboQuantKVCache cache(H, D, options(DenseDtype::f16));
  cache.append(k, v, n);
  const CacheState state = cache.save_state();
  const auto loaded = load_kv_cache(state);
  EXPECT_TRUE(same_state(loaded->save_state(), state));
  // A file claiming f16 with F32 tensors (or the other way round) is refused.
  CacheState wrong = state;
  wrong.metadata.erase("exact_dtype");
  EXPECT_THROW(load_kv_cache(wrong), Error);
  // Appending to the loaded cache continues as the original does.
  const auto more_k = gaussian(H * 5 * D, 7), more_v = gaussian(H * 5 * D, 8);
  cache.append(more_k, more_v, 5);
  loaded->append(more_k, more_v, 5);
  EXPECT_TRUE(same_state(loaded->save_state(), cache.save_state()));
}

TEST(TurboQuantExactF16, FusedAttentionMatchesTheReference) {
  for (const size_t n : {size_t{2}, size_t{20}, size_t{150}}) {
    const auto k = gaussian(H * n * D, 11), v = gaussian(H * n * D, 12);
    TurboQuantKVCache cache(H, D, options(DenseDtype::f16));
    cache.append(k, v, n);
    const int q_heads = 2 * H, nq = 3 > static_cast<int>(n) ? static_cast<int>(n) : 3;
    const auto q = gaussian(static_cast<size_t>(q_heads) * nq * D, 13);
    std::vector<float> fused(q.size()), reference(q.size());
    attend(q, q_heads, nq, cache, fused);
    attend_dequantized(q, q_heads, nq, cache, reference);
    for (size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], reference[i], 2e-5) << "n " << n << " at " << i;
  }
}

TEST(TurboQuantExactF16, RefusesValuesBeyondFp16AndStaysUnchanged) {
  TurboQuantKVCache cache(H, D, options(DenseDtype::f16));
  auto k = gaussian(H * 4 * D, 14), v = gaussian(H * 4 * D, 15);
  cache.append(k, v, 4);
  const CacheState before = cache.save_state();
  k[5] = 7e4f;  // finite in float32, infinite in fp16
  EXPECT_THROW(cache.append(k, v, 4), Error);
  EXPECT_TRUE(same_state(cache.save_state(), before));
  EXPECT_EQ(parse_cache_config("turboquant:bits=4,exact=f16").tq.exact_dtype, DenseDtype::f16);
  EXPECT_THROW(parse_cache_config("turboquant:bits=4,exact=f8"), Error);
  EXPECT_EQ(parse_cache_config(format_cache_config(parse_cache_config("turboquant:exact=f16"))).tq.exact_dtype,
            DenseDtype::f16);
  EXPECT_EQ(parse_kv_config("tq4s1w32-x16").config.tq.exact_dtype, DenseDtype::f16);
  EXPECT_EQ(parse_kv_config("tq4s1w32").config.tq.exact_dtype, DenseDtype::f32);
}

}  // namespace
}  // namespace turbokv
