// Baseline caches (q8_0/q4_0[h], KIVI, mlx affine): per-value error bounds derived from each
// format, exact byte layouts, trim, nbytes and bits/value, save/load bit-exactness.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "turbokv/baseline_caches.hpp"
#include "turbokv/error.hpp"
#include "turbokv/half.hpp"
#include "turbokv/rotation.hpp"
#include "cache_test_util.hpp"

using namespace turbokv;

namespace {

constexpr float kEps16 = 0x1.0p-11f;  // fp16 unit roundoff

// Gaussian data with a few outlier channels (keys look like this) and a per-token scale.
std::vector<float> random_kv(int heads, size_t tokens, int dim, uint32_t seed, float outlier = 12.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(heads) * tokens * dim);
  for (size_t i = 0; i < x.size(); ++i) {
    const int c = static_cast<int>(i % dim);
    x[i] = normal(rng) * (c % 29 == 3 ? outlier : 1.0f) + (c % 7 == 0 ? 0.5f : 0.0f);
  }
  return x;
}

float half_round(float x) { return half_to_float(float_to_half(x)); }

std::pair<std::vector<float>, std::vector<float>> fetch_all(const KVCache& c) {
  std::vector<float> k(static_cast<size_t>(c.kv_heads()) * c.size() * c.head_dim());
  std::vector<float> v(k.size());
  c.fetch(k, v);
  return {k, v};
}

// Saves, reloads and checks bit-exactness of state and fetch.
void expect_save_load_exact(const KVCache& cache) {
  const CacheState state = cache.save_state();
  auto loaded = load_baseline_cache(state);
  ASSERT_EQ(loaded->class_name(), cache.class_name());
  EXPECT_EQ(loaded->size(), cache.size());
  EXPECT_EQ(loaded->nbytes(), cache.nbytes());
  test::expect_same_state(state, loaded->save_state());
  const auto [k0, v0] = fetch_all(cache);
  const auto [k1, v1] = fetch_all(*loaded);
  EXPECT_EQ(std::memcmp(k0.data(), k1.data(), k0.size() * 4), 0);
  EXPECT_EQ(std::memcmp(v0.data(), v1.data(), v0.size() * 4), 0);
}

// Appends in uneven chunks (the caches must not depend on how tokens arrive).
void append_chunked(KVCache& cache, const std::vector<float>& k, const std::vector<float>& v,
                    size_t tokens, std::vector<size_t> chunks) {
  const int heads = cache.kv_heads(), dim = cache.head_dim();
  size_t done = 0;
  for (size_t ci = 0; done < tokens; ++ci) {
    const size_t n = std::min(chunks[ci % chunks.size()], tokens - done);
    std::vector<float> kc(heads * n * dim), vc(kc.size());
    for (int h = 0; h < heads; ++h) {
      std::copy_n(k.begin() + (h * tokens + done) * dim, n * dim, kc.begin() + h * n * dim);
      std::copy_n(v.begin() + (h * tokens + done) * dim, n * dim, vc.begin() + h * n * dim);
    }
    cache.append(kc, vc, n);
    done += n;
  }
}

}  // namespace

// ---- q8_0 / q4_0 ---------------------------------------------------------------------------

TEST(GgmlBlocks, Q8_0ErrorWithinHalfAStepOfTheStoredScale) {
  const auto x = random_kv(1, 64, 128, 1);
  std::vector<uint8_t> blocks(x.size() / 32 * kQ8_0BlockBytes);
  quantize_row_q8_0(x.data(), x.size(), blocks.data());
  std::vector<float> y(x.size());
  dequantize_row_q8_0(blocks.data(), x.size(), y.data());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f, d16 = half_round(d);
    // q = round(x / d) is within half a step of x / d; decode uses the fp16 d (|q| <= 127).
    const float bound = d / 2 + 127 * std::fabs(d - d16) + 1e-6f * amax;
    for (int j = 0; j < 32; ++j) {
      ASSERT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), bound) << b << " " << j;
    }
  }
}

TEST(GgmlBlocks, Q4_0ErrorBoundAndSignedMaxIsExact) {
  const auto x = random_kv(1, 64, 128, 2);
  std::vector<uint8_t> blocks(x.size() / 32 * kQ4_0BlockBytes);
  quantize_row_q4_0(x.data(), x.size(), blocks.data());
  std::vector<float> y(x.size());
  dequantize_row_q4_0(blocks.data(), x.size(), y.data());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[b * 32 + j])) {
        amax = std::fabs(x[b * 32 + j]);
        max = x[b * 32 + j];
      }
    }
    const float d = max / -8.0f, d16 = half_round(d);
    for (int j = 0; j < 32; ++j) {
      const float v = x[b * 32 + j], err = std::fabs(v - y[b * 32 + j]);
      const double t = double(v) / d;  // in [-8, 8]; codes reach only +7 (t > 7.5 clamps)
      const float step_err = t > 7.5 ? std::fabs(d) : std::fabs(d) / 2;
      ASSERT_LE(err, step_err + 8 * std::fabs(d - d16) + 1e-6f * amax) << b << " " << j;
      if (v == max) {
        EXPECT_EQ(y[b * 32 + j], -8.0f * d16);
      }
    }
  }
}

TEST(GgmlBlocks, ByteLayoutMatchesGgml) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);  // max magnitude: -16
  uint8_t q4[kQ4_0BlockBytes];
  quantize_row_q4_0(x, 32, q4);
  EXPECT_EQ(half_to_float(static_cast<uint16_t>(q4[0] | q4[1] << 8)), 2.0f);  // d = -16 / -8
  for (int j = 0; j < 16; ++j) {
    // q = trunc(x / 2 + 8.5): value j in the low nibble of byte j, value j + 16 in the high.
    const int lo = std::min(15, static_cast<int>(x[j] / 2 + 8.5f));
    const int hi = std::min(15, static_cast<int>(x[j + 16] / 2 + 8.5f));
    EXPECT_EQ(q4[2 + j], lo | hi << 4) << j;
  }
  uint8_t q8[kQ8_0BlockBytes];
  quantize_row_q8_0(x, 32, q8);
  EXPECT_EQ(half_to_float(static_cast<uint16_t>(q8[0] | q8[1] << 8)), half_round(16.0f / 127));
  EXPECT_EQ(static_cast<int8_t>(q8[2]), -127);       // x = -16
  EXPECT_EQ(static_cast<int8_t>(q8[2 + 16]), 0);     // x = 0
  EXPECT_EQ(static_cast<int8_t>(q8[2 + 31]), 119);   // round(15 * 127 / 16) = round(119.06)
  // Blocks so small that 1 / d overflows decode to zero (no undefined float -> int conversion).
  float tiny[32];
  for (int j = 0; j < 32; ++j) tiny[j] = (j % 2 ? 1e-39f : -2e-39f);
  float back_tiny[32];
  quantize_row_q4_0(tiny, 32, q4);
  dequantize_row_q4_0(q4, 32, back_tiny);
  for (float b : back_tiny) EXPECT_EQ(b, 0.0f);
  quantize_row_q8_0(tiny, 32, q8);
  dequantize_row_q8_0(q8, 32, back_tiny);
  for (float b : back_tiny) EXPECT_EQ(b, 0.0f);
  float zeros[32] = {};
  quantize_row_q4_0(zeros, 32, q4);
  float back[32];
  dequantize_row_q4_0(q4, 32, back);
  for (float b : back) EXPECT_EQ(b, 0.0f);
}

TEST(BlockQuantKVCache, MatchesTheRowQuantizerAndCountsBytes) {
  for (auto format : {BlockQuantFormat::q8_0, BlockQuantFormat::q4_0}) {
    const int heads = 3, dim = 64;
    const size_t tokens = 77;
    const auto k = random_kv(heads, tokens, dim, 3), v = random_kv(heads, tokens, dim, 4, 1.0f);
    BlockQuantKVCache cache(heads, dim, {format, false});
    EXPECT_EQ(cache.bits_per_value(), format == BlockQuantFormat::q8_0 ? 8.5 : 4.5);
    append_chunked(cache, k, v, tokens, {1, 5, 30});
    ASSERT_EQ(cache.size(), tokens);
    const size_t block = format == BlockQuantFormat::q8_0 ? 34 : 18;
    EXPECT_EQ(cache.nbytes(), 2 * heads * tokens * (dim / 32) * block);
    EXPECT_EQ(cache.bits_per_value(), format == BlockQuantFormat::q8_0 ? 8.5 : 4.5);
    const auto [kf, vf] = fetch_all(cache);
    std::vector<uint8_t> blocks(k.size() / 32 * block);
    std::vector<float> expect(k.size());
    for (int which = 0; which < 2; ++which) {
      const auto& src = which == 0 ? k : v;
      if (format == BlockQuantFormat::q8_0) {
        quantize_row_q8_0(src.data(), src.size(), blocks.data());
        dequantize_row_q8_0(blocks.data(), src.size(), expect.data());
      } else {
        quantize_row_q4_0(src.data(), src.size(), blocks.data());
        dequantize_row_q4_0(blocks.data(), src.size(), expect.data());
      }
      EXPECT_EQ(expect, which == 0 ? kf : vf);
    }
    expect_save_load_exact(cache);
    // Trim keeps an exact prefix.
    EXPECT_EQ(cache.trim(10), 10u);
    const auto [kt, vt] = fetch_all(cache);
    for (int h = 0; h < heads; ++h) {
      for (size_t i = 0; i < (tokens - 10) * dim; ++i) {
        ASSERT_EQ(kt[h * (tokens - 10) * dim + i], kf[h * tokens * dim + i]);
        ASSERT_EQ(vt[h * (tokens - 10) * dim + i], vf[h * tokens * dim + i]);
      }
    }
    EXPECT_EQ(cache.nbytes(), 2 * heads * (tokens - 10) * (dim / 32) * block);
    expect_save_load_exact(cache);
    EXPECT_EQ(cache.trim(1000), tokens - 10);
    EXPECT_EQ(cache.size(), 0u);
    EXPECT_EQ(cache.nbytes(), 0u);
  }
}

TEST(BlockQuantKVCache, HadamardUndoesItsRotationAndTamesOutliers) {
  const int heads = 2, dim = 128;
  const size_t tokens = 64;
  const auto k = random_kv(heads, tokens, dim, 5, 40.0f);  // strong outlier channels
  double err[2][2] = {};
  for (int rotated = 0; rotated < 2; ++rotated) {
    for (int fi = 0; fi < 2; ++fi) {
      const auto format = fi == 0 ? BlockQuantFormat::q8_0 : BlockQuantFormat::q4_0;
      BlockQuantKVCache cache(heads, dim, {format, rotated == 1});
      EXPECT_EQ(cache.class_name(), fi == 0 ? "q8_0" : "q4_0");
      cache.append(k, k, tokens);
      const auto [kf, vf] = fetch_all(cache);
      EXPECT_EQ(kf, vf);
      double num = 0, den = 0;
      for (size_t i = 0; i < k.size(); ++i) {
        num += (kf[i] - k[i]) * double(kf[i] - k[i]);
        den += double(k[i]) * k[i];
      }
      err[rotated][fi] = std::sqrt(num / den);
      if (rotated == 1) {
        // The error of the rotated row equals the rotated-domain error (orthogonal R), which
        // the per-block bound caps: ||x - x_hat||^2 <= sum over blocks of 32 * step^2.
        auto rot = make_rotation(RotationKind::hadamard, dim, BlockQuantOptions{}.rotation_seed);
        std::vector<float> y(k.size());
        rot->forward(k.data(), y.data(), heads * tokens);
        double cap = 0;
        for (size_t b = 0; b < y.size() / 32; ++b) {
          float amax = 0;
          for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(y[b * 32 + j]));
          const double step = fi == 0 ? amax / 127.0 * (0.5 + 127 * kEps16) : amax / 8.0 * (1 + 8 * kEps16);
          cap += 32 * step * step * 1.0001;
        }
        EXPECT_LE(num, cap);
        expect_save_load_exact(cache);
      }
    }
  }
  EXPECT_LT(err[0][0], 0.03);
  // With 40x outlier channels the rotation spreads them over the block: less error at 4 bits.
  EXPECT_LT(err[1][1], err[0][1]);
}

TEST(BlockQuantKVCache, NotApplicableAndBadInput) {
  try {
    BlockQuantKVCache bad(1, 48, {});
    FAIL() << "head_dim 48 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not applicable"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(BlockQuantKVCache::shape_problem(96, {BlockQuantFormat::q4_0, true}).empty());
  EXPECT_TRUE(BlockQuantKVCache::shape_problem(96, {BlockQuantFormat::q4_0, false}).empty());
  BlockQuantKVCache cache(1, 32, {});
  std::vector<float> k(32, 1.0f), v(32, 1.0f);
  cache.append(k, v, 1);
  k[3] = std::nanf("");
  EXPECT_THROW(cache.append(k, v, 1), Error);
  EXPECT_THROW(cache.append(k, v, 2), Error);  // size mismatch
  EXPECT_EQ(cache.size(), 1u);
  std::vector<float> small(16);
  EXPECT_THROW(cache.fetch(small, small), Error);
}

// ---- KIVI ----------------------------------------------------------------------------------

namespace {

// Per-value bound of one min/max group quantized with the stored fp16 scale/zero: half a step
// inside the range; the clamped ends add the fp16 rounding of zero and of levels * scale.
float kivi_bound(float mn, float mx, int bits) {
  const int levels = (1 << bits) - 1;
  const float s = (mx - mn) / levels, s16 = half_round(s), z16 = half_round(mn);
  return s16 / 2 + levels * std::fabs(s - s16) + std::fabs(mn - z16) + 1e-5f * (std::fabs(mn) + std::fabs(mx));
}

}  // namespace

TEST(KiviKVCache, ResidualAndGroupsFollowKivi) {
  const int heads = 2, dim = 64;
  const size_t tokens = 100;
  for (int bits : {2, 4}) {
    const auto k = random_kv(heads, tokens, dim, 6), v = random_kv(heads, tokens, dim, 7, 1.0f);
    KiviKVCache cache(heads, dim, {bits, 32, 32});
    append_chunked(cache, k, v, tokens, {1, 3, 17});
    EXPECT_EQ(cache.size(), tokens);
    EXPECT_EQ(cache.key_groups(), 3u);            // 96 keys quantized in groups of 32
    EXPECT_EQ(cache.key_residual_size(), 4u);     // 4 wait for their group
    EXPECT_EQ(cache.value_quantized_size(), 68u); // the newest 32 values stay fp16
    EXPECT_EQ(cache.value_residual_size(), 32u);
    const auto [kf, vf] = fetch_all(cache);
    for (int h = 0; h < heads; ++h) {
      const size_t base = h * tokens * dim;
      // Keys: per channel over each group of 32 tokens, bound from the group's min and max.
      for (size_t g = 0; g < 3; ++g) {
        for (int c = 0; c < dim; ++c) {
          float mn = INFINITY, mx = -INFINITY;
          for (size_t t = g * 32; t < g * 32 + 32; ++t) {
            mn = std::min(mn, half_round(k[base + t * dim + c]));
            mx = std::max(mx, half_round(k[base + t * dim + c]));
          }
          const float bound = kivi_bound(mn, mx, bits);
          for (size_t t = g * 32; t < g * 32 + 32; ++t) {
            const size_t i = base + t * dim + c;
            ASSERT_LE(std::fabs(half_round(k[i]) - kf[i]), bound) << g << " " << c << " " << t;
          }
        }
      }
      for (size_t i = 96 * dim; i < tokens * dim; ++i) EXPECT_EQ(kf[base + i], half_round(k[base + i]));
      // Values: per token over groups of 32 channels.
      for (size_t t = 0; t < 68; ++t) {
        for (int g = 0; g < dim / 32; ++g) {
          float mn = INFINITY, mx = -INFINITY;
          for (int c = g * 32; c < g * 32 + 32; ++c) {
            mn = std::min(mn, half_round(v[base + t * dim + c]));
            mx = std::max(mx, half_round(v[base + t * dim + c]));
          }
          const float bound = kivi_bound(mn, mx, bits);
          for (int c = g * 32; c < g * 32 + 32; ++c) {
            const size_t i = base + t * dim + c;
            ASSERT_LE(std::fabs(half_round(v[i]) - vf[i]), bound) << t << " " << c;
          }
        }
      }
      for (size_t i = 68 * dim; i < tokens * dim; ++i) EXPECT_EQ(vf[base + i], half_round(v[base + i]));
    }
    // Bytes: key groups (codes + fp16 scale and zero per channel), fp16 key residual, value
    // tokens (codes + fp16 scale and zero per 32 channels), fp16 value residual.
    const size_t per_head = 3 * (32 * dim * bits / 8 + 4 * dim) + 4 * dim * 2 +
                            68 * (dim * bits / 8 + 4 * (dim / 32)) + 32 * dim * 2;
    EXPECT_EQ(cache.nbytes(), heads * per_head);
    EXPECT_DOUBLE_EQ(cache.bits_per_value(), 8.0 * heads * per_head / (2.0 * tokens * heads * dim));
    expect_save_load_exact(cache);
  }
}

TEST(KiviKVCache, AsymptoticBitsPerValue) {
  // Keys: b bits + 2 fp16 per channel per 32 tokens = b + 1; values: b + 2 fp16 per 32 = b + 1.
  EXPECT_DOUBLE_EQ(KiviKVCache(1, 128, {2, 32, 32}).bits_per_value(), 3.0);
  EXPECT_DOUBLE_EQ(KiviKVCache(1, 128, {4, 32, 32}).bits_per_value(), 5.0);
  // A long cache approaches it (the fp16 residual costs 32 tokens' worth).
  KiviKVCache cache(1, 64, {2, 32, 32});
  const auto k = random_kv(1, 4096, 64, 8);
  cache.append(k, k, 4096);
  EXPECT_NEAR(cache.bits_per_value(), 3.0 + 32.0 * (16 - 3) / 4096 / 2, 1e-9);
}

TEST(KiviKVCache, TrimDissolvesACutKeyGroupAndKeepsThePrefix) {
  const int heads = 2, dim = 32;
  const size_t tokens = 150;
  const auto k = random_kv(heads, tokens, dim, 9), v = random_kv(heads, tokens, dim, 10);
  KiviKVCache cache(heads, dim, {2, 32, 64});
  cache.append(k, v, tokens);
  EXPECT_EQ(cache.key_groups(), 4u);   // flushes of 64: 128 quantized, 22 waiting
  const auto [kf, vf] = fetch_all(cache);
  EXPECT_EQ(cache.trim(40), 40u);      // 110 left: group 3 (96..127) is cut at 110
  EXPECT_EQ(cache.key_groups(), 3u);
  EXPECT_EQ(cache.key_residual_size(), 14u);
  EXPECT_EQ(cache.value_quantized_size(), 86u);
  EXPECT_EQ(cache.value_residual_size(), 24u);
  const size_t n = tokens - 40;
  const auto [kt, vt] = fetch_all(cache);
  for (int h = 0; h < heads; ++h) {
    for (size_t i = 0; i < n * dim; ++i) {
      const float a = kf[h * tokens * dim + i];
      ASSERT_LE(std::fabs(kt[h * n * dim + i] - a), std::fabs(a) * kEps16) << i;  // fp16 again
      ASSERT_EQ(vt[h * n * dim + i], vf[h * tokens * dim + i]);
    }
  }
  expect_save_load_exact(cache);
  cache.append(k, v, tokens);
  EXPECT_EQ(cache.size(), n + tokens);
  EXPECT_LT(cache.key_residual_size(), cache.key_flush_tokens());
  EXPECT_EQ(cache.key_groups() * 32 + cache.key_residual_size(), cache.size());
  expect_save_load_exact(cache);
  EXPECT_EQ(cache.trim(10000), n + tokens);
  EXPECT_EQ(cache.nbytes(), 0u);
}

TEST(KiviKVCache, NotApplicableAndBadInput) {
  try {
    KiviKVCache bad(1, 8, {});
    FAIL() << "head_dim 8 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not applicable"), std::string::npos) << e.what();
  }
  EXPECT_THROW(KiviKVCache(1, 64, {2, 32, 48}), Error);  // residual not a multiple of the group
  KiviKVCache cache(1, 32, {});
  std::vector<float> k(32, 1.0f), v(32, 1.0f);
  k[0] = 70000.0f;  // does not fit the fp16 residual
  EXPECT_THROW(cache.append(k, v, 1), Error);
  EXPECT_EQ(cache.size(), 0u);
}

// ---- affine --------------------------------------------------------------------------------

TEST(AffineGroups, ErrorBoundAndEdgeIsExact) {
  const auto x = random_kv(1, 64, 128, 11);
  for (int bits : {4, 8}) {
    const int n_bins = (1 << bits) - 1;
    for (size_t g = 0; g < x.size() / 64; ++g) {
      const float* xg = x.data() + g * 64;
      uint8_t codes[64];
      uint16_t s16, b16;
      quantize_group_affine(xg, 64, bits, codes, &s16, &b16);
      const float s = half_to_float(s16), b = half_to_float(b16);
      // mlx snaps the scale so zero is exact (scale = edge / round(edge / scale)): values inside
      // the range are within half a (snapped) step, but the snapped scale can be smaller than
      // range / n_bins by up to a factor 1 + 1 / n_bins, so the far end may clamp, by at most one
      // original step. fp16 storage adds n_bins * |s - s16| + |b - b16|.
      const float bound = std::fabs(s) * (1 + 1.0f / n_bins) * (1 + 4 * kEps16) +
                          n_bins * std::fabs(s) * 2 * kEps16 + std::fabs(b) * kEps16 + 1e-7f;
      float amax = 0;
      int edge = 0;
      for (int j = 0; j < 64; ++j) {
        ASSERT_LE(codes[j], n_bins);
        ASSERT_LE(std::fabs(xg[j] - (s * codes[j] + b)), bound) << g << " " << j;
        if (std::fabs(xg[j]) > amax) {
          amax = std::fabs(xg[j]);
          edge = j;
        }
      }
      EXPECT_EQ(codes[edge], 0);
      EXPECT_EQ(b, half_round(xg[edge]));
    }
  }
}

TEST(AffineKVCache, BytesTrimAndSaveLoad) {
  for (int bits : {4, 8}) {
    const int heads = 2, dim = 128;
    const size_t tokens = 45;
    const auto k = random_kv(heads, tokens, dim, 12), v = random_kv(heads, tokens, dim, 13, 1.0f);
    AffineKVCache cache(heads, dim, {bits, 64});
    EXPECT_DOUBLE_EQ(cache.bits_per_value(), bits + 0.5);
    append_chunked(cache, k, v, tokens, {7, 2});
    EXPECT_EQ(cache.nbytes(), 2 * heads * tokens * (dim * bits / 8 + 2 * 2 * (dim / 64)));
    EXPECT_DOUBLE_EQ(cache.bits_per_value(), bits + 0.5);
    const auto [kf, vf] = fetch_all(cache);
    double num = 0, den = 0;
    for (size_t i = 0; i < k.size(); ++i) {
      num += (kf[i] - k[i]) * double(kf[i] - k[i]);
      den += double(k[i]) * k[i];
    }
    EXPECT_LT(std::sqrt(num / den), bits == 8 ? 0.02 : 0.3);
    expect_save_load_exact(cache);
    cache.trim(5);
    const auto [kt, vt] = fetch_all(cache);
    for (int h = 0; h < heads; ++h) {
      for (size_t i = 0; i < (tokens - 5) * dim; ++i) {
        ASSERT_EQ(kt[h * (tokens - 5) * dim + i], kf[h * tokens * dim + i]);
      }
    }
    expect_save_load_exact(cache);
  }
  try {
    AffineKVCache bad(1, 32, {4, 64});
    FAIL() << "head_dim 32 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not applicable"), std::string::npos) << e.what();
  }
}

// The affine cache's values against an independent implementation of mlx's rule (mlx
// quantize(): scale = max(range / n_bins, eps), signed towards the endpoint of larger magnitude,
// snapped so that endpoint is exact; codes clip(round((x - bias) / scale)); scale and bias then
// rounded to fp16 (here by the compiler's _Float16, not turbokv/half.hpp); x' = q * s + b).
float mlx_affine_reference(const float* group, int n, int bits, int j) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const float lo = *std::min_element(group, group + n), hi = *std::max_element(group, group + n);
  const bool lo_is_edge = std::fabs(lo) > std::fabs(hi);
  float scale = std::max((hi - lo) / n_bins, 1e-7f);
  scale = lo_is_edge ? scale : -scale;
  const float edge = lo_is_edge ? lo : hi;
  const float q0 = std::nearbyint(edge / scale);
  const float bias = q0 != 0.0f ? edge : 0.0f;
  if (q0 != 0.0f) scale = edge / q0;
  const float q = std::min(std::max(std::nearbyint((group[j] - bias) / scale), 0.0f), n_bins);
  const float s16 = static_cast<float>(static_cast<_Float16>(scale));
  const float b16 = static_cast<float>(static_cast<_Float16>(bias));
  return q * s16 + b16;
}

TEST(AffineKVCache, ValuesEqualAnIndependentQuantizeDequantize) {
  const int heads = 2, dim = 128, group = 64;
  const size_t tokens = 9;
  for (int bits : {2, 4, 8}) {
    const auto k = random_kv(heads, tokens, dim, 31), v = random_kv(heads, tokens, dim, 32, 1.0f);
    AffineKVCache cache(heads, dim, {bits, group});
    append_chunked(cache, k, v, tokens, {4, 5});
    const auto [kf, vf] = fetch_all(cache);
    size_t differ = 0;
    for (size_t row = 0; row < static_cast<size_t>(heads) * tokens; ++row) {
      for (int c = 0; c < dim; ++c) {
        const size_t at = row * dim + static_cast<size_t>(c);
        const float* kg = k.data() + row * dim + static_cast<size_t>(c / group * group);
        const float* vg = v.data() + row * dim + static_cast<size_t>(c / group * group);
        differ += kf[at] != mlx_affine_reference(kg, group, bits, c % group);
        differ += vf[at] != mlx_affine_reference(vg, group, bits, c % group);
      }
    }
    EXPECT_EQ(differ, 0u) << bits << " bits: values that differ from the reference";
  }
}

TEST(BaselineCaches, LoadRejectsCorruptState) {
  AffineKVCache cache(1, 64, {4, 64});
  const auto k = random_kv(1, 3, 64, 14);
  cache.append(k, k, 3);
  CacheState state = cache.save_state();
  state.metadata["tokens"] = "4";  // tensors hold 3
  EXPECT_THROW(load_baseline_cache(state), Error);
  state = cache.save_state();
  state.tensors[1].data[0] = 0x00;
  state.tensors[1].data[1] = 0x7c;  // +inf scale
  EXPECT_THROW(load_baseline_cache(state), Error);
  KiviKVCache kivi(1, 64, {});
  kivi.append(k, k, 3);
  state = kivi.save_state();
  state.metadata["key_residual_tokens"] = "2";
  EXPECT_THROW(load_baseline_cache(state), Error);
}
