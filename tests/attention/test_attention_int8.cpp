// The integer attention path (AttentionArithmetic::int8):
//  - each SIMD table's int8 kernels (AVX2, and VNNI where the CPU has it) give the scalar
//    kernels' results bit for bit, at widths 2-4, group sizes 32-256, odd offsets in tight
//    records (no byte after the codes, so an over-read shows under ASan), every row count 1-8,
//    odd token counts, and the integer extremes (AVX2's maddubs must not saturate);
//    so do their prefill kernels (prefill_int8_*), at those and at prefill tiles' row counts;
//  - the weight rounding kernel likewise, with NaN / infinite / zero rows;
//  - attend() in int8 stays close to the exact fused path (which tests/test_attention_turboquant
//    ties to dequantize-then-attend) on every shape the exact path is tested on, falls back to
//    the exact path bit for bit where it does not apply, and a NaN query touches only its head.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/attention_kernels.hpp"
#include "attention_test_util.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/turboquant_cache.hpp"
#include "test_util.hpp"

using turbokv::test::same_bits;

namespace {

using turbokv::AttentionArithmetic;
using turbokv::AttentionOptions;
using turbokv::TurboQuantCacheOptions;
using turbokv::TurboQuantKVCache;
using turbokv::attn::CodeGroup;
using turbokv::attn::kBlockTokens;
using turbokv::attn::kInt8Chunk;
using turbokv::attn::KernelTable;

std::vector<const KernelTable*> simd_tables() {
  std::vector<const KernelTable*> t;
  if (const KernelTable* k = turbokv::attn::avx2_kernel_table()) t.push_back(k);
  if (const KernelTable* k = turbokv::attn::avx_vnni_kernel_table()) t.push_back(k);
  if (const KernelTable* k = turbokv::attn::vnni_kernel_table()) t.push_back(k);
  return t;
}

// Position j of a table's layout holds coordinate order[j]; checks it is a permutation.
std::vector<uint16_t> order_of(const KernelTable& k, int bits, int dims, bool values) {
  std::vector<uint16_t> order(dims);
  for (int j = 0; j < dims; ++j) order[j] = static_cast<uint16_t>(j);
  if (k.int8_order != nullptr) k.int8_order(bits, dims, values, order.data());
  std::vector<bool> seen(dims, false);
  for (uint16_t o : order) {
    EXPECT_LT(o, dims);
    if (o < dims) {
      EXPECT_FALSE(seen[o]) << "coordinate " << o << " twice";
      seen[o] = true;
    }
  }
  return order;
}

TEST(AttentionInt8Kernels, DotsAndAccumulateMatchScalarBitForBit) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  const KernelTable& scalar = turbokv::attn::scalar_kernel_table();
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> byte(-127, 127), scale_draw(1, 128);
  for (int bits = 2; bits <= 4; ++bits) {
    for (int dims : {32, 64, 96, 128, 256}) {
      for (size_t offset : {size_t{0}, size_t{3}}) {
        for (bool extreme : {false, true}) {
          // Extreme: every centroid, query byte and weight at its limit (centroids +-127, query
          // bytes +-int8_query_levels, weights the table's int8_weight_levels), so every pair of
          // products is as large as it gets in an AVX2 maddubs lane (2 * 255 * 63 for offset
          // centroids against 2- and 3-bit groups' query rows, 2 * 127 * 127 otherwise).
          int8_t table8[16];
          for (int i = 0; i < 16; ++i) table8[i] = static_cast<int8_t>(extreme ? (i % 2 ? 127 : -127) : byte(rng));
          CodeGroup g;
          g.bits = bits;
          g.dims = dims;
          g.offset = offset;
          g.table8 = table8;
          const size_t code_size = offset + static_cast<size_t>(dims) * bits / 8;  // tight
          for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{9}, size_t{13}, size_t{63}, size_t{kBlockTokens}}) {
            std::vector<uint8_t> records(n * code_size);
            for (auto& b : records) b = static_cast<uint8_t>(rng());
            for (int rows : {1, 2, 3, 4, 5, 6, 7, 8, 13, turbokv::attn::kPrefillRows}) {
              const size_t qs = dims + 5;  // an odd row stride in bytes
              std::vector<int8_t> q(rows * qs);
              const int levels = turbokv::attn::int8_query_levels(bits);
              std::uniform_int_distribution<int> query_byte(-levels, levels);
              for (auto& x : q) x = static_cast<int8_t>(extreme ? ((rng() & 1) ? levels : -levels) : query_byte(rng));
              std::vector<float> row_scale(rows);
              for (auto& s : row_scale) s = std::ldexp(static_cast<float>(scale_draw(rng)), -9);
              const size_t as = dims + 3;
              for (bool add : {false, true}) {
                std::vector<float> want(rows * kBlockTokens, 0.25f);
                scalar.int8_dots(q.data(), qs, rows, row_scale.data(), records.data(), code_size, n, g,
                                 want.data(), kBlockTokens, add);
                for (const KernelTable* k : tables) {
                  // Weights up to this table's levels, the scalar kernel on the same integers.
                  std::uniform_int_distribution<int> weight(0, k->int8_weight_levels);
                  std::vector<uint8_t> w8(rows * kBlockTokens, 0);
                  for (int r = 0; r < rows; ++r) {
                    for (size_t t = 0; t < n; ++t) {
                      w8[r * kBlockTokens + t] = static_cast<uint8_t>(extreme ? k->int8_weight_levels : weight(rng));
                    }
                  }
                  std::vector<float> acc_want(rows * as, 0.5f);
                  scalar.int8_accumulate(w8.data(), kBlockTokens, rows, row_scale.data(), records.data(),
                                         code_size, n, g, acc_want.data(), as);
                  const auto key_order = order_of(*k, bits, dims, false), value_order = order_of(*k, bits, dims, true);
                  std::vector<int8_t> qk(q.size());
                  for (int r = 0; r < rows; ++r) {
                    for (int j = 0; j < dims; ++j) qk[r * qs + j] = q[r * qs + key_order[j]];
                  }
                  for (bool prefill : {false, true}) {
                  std::vector<float> got(rows * kBlockTokens, 0.25f), acc_k(rows * as, 0.5f);
                  (prefill ? k->prefill_int8_dots : k->int8_dots)(qk.data(), qs, rows, row_scale.data(),
                                                                  records.data(), code_size, n, g, got.data(),
                                                                  kBlockTokens, add);
                  (prefill ? k->prefill_int8_accumulate : k->int8_accumulate)(
                      w8.data(), kBlockTokens, rows, row_scale.data(), records.data(), code_size, n, g,
                      acc_k.data(), as);
                  const std::string what = std::string(k->name) + (prefill ? " prefill" : "") + " bits " +
                                           std::to_string(bits) + " dims " +
                                           std::to_string(dims) + " offset " + std::to_string(offset) + " rows " +
                                           std::to_string(rows) + " n " + std::to_string(n) +
                                           (extreme ? " extreme" : "") + (add ? " add" : "");
                  for (int r = 0; r < rows; ++r) {
                    for (size_t t = 0; t < kBlockTokens; ++t) {
                      ASSERT_TRUE(same_bits(got[r * kBlockTokens + t], want[r * kBlockTokens + t]))
                          << what << " score row " << r << " token " << t << ": " << got[r * kBlockTokens + t]
                          << " vs " << want[r * kBlockTokens + t];
                    }
                    for (int j = 0; j < dims; ++j) {
                      const float a = acc_k[r * as + j];
                      const float b = acc_want[r * as + value_order[j]];
                      ASSERT_TRUE(same_bits(a, b)) << what << " acc row " << r << " pos " << j << ": " << a << " vs " << b;
                    }
                  }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// 8-bit codes in 16-bit integers (tables that have the kernels: the VNNI one).
TEST(AttentionInt8Kernels, Int16DotsAndAccumulateMatchScalarBitForBit) {
  std::vector<const KernelTable*> tables;
  for (const KernelTable* k : simd_tables()) {
    if (k->int16_dots != nullptr) tables.push_back(k);
  }
  if (tables.empty()) GTEST_SKIP() << "no table with int16 kernels on this CPU";
  const KernelTable& scalar = turbokv::attn::scalar_kernel_table();
  std::mt19937 rng(22);
  const int m = turbokv::attn::kInt16Max;
  std::uniform_int_distribution<int> value(-m, m), weight(0, m);
  for (int dims : {64, 128, 192, 256}) {
    for (size_t offset : {size_t{0}, size_t{5}}) {
      for (bool extreme : {false, true}) {
        std::vector<int16_t> table16(256);
        for (int i = 0; i < 256; ++i) table16[i] = static_cast<int16_t>(extreme ? (i % 2 ? m : -m) : value(rng));
        CodeGroup g;
        g.bits = 8;
        g.dims = dims;
        g.offset = offset;
        g.table16 = table16.data();
        const size_t code_size = offset + dims;  // tight
        for (size_t n : {size_t{1}, size_t{2}, size_t{5}, size_t{8}, size_t{17}, size_t{kBlockTokens}}) {
          std::vector<uint8_t> records(n * code_size);
          for (auto& b : records) b = static_cast<uint8_t>(rng());
          for (int rows = 1; rows <= 8; ++rows) {
            const size_t qs = dims + 3;  // elements
            std::vector<int16_t> q(rows * qs);
            for (auto& x : q) x = static_cast<int16_t>(extreme ? ((rng() & 1) ? m : -m) : value(rng));
            std::vector<uint16_t> w16(rows * kBlockTokens, 0);
            for (int r = 0; r < rows; ++r) {
              for (size_t t = 0; t < n; ++t) w16[r * kBlockTokens + t] = static_cast<uint16_t>(extreme ? m : weight(rng));
            }
            std::vector<float> row_scale(rows);
            for (auto& s : row_scale) s = std::ldexp(static_cast<float>(weight(rng) + 1), -20);
            const size_t as = dims + 3;
            for (bool add : {false, true}) {
              std::vector<float> want(rows * kBlockTokens, 0.25f), acc_want(rows * as, 0.5f);
              scalar.int16_dots(q.data(), qs, rows, row_scale.data(), records.data(), code_size, n, g, want.data(),
                                kBlockTokens, add);
              scalar.int16_accumulate(w16.data(), kBlockTokens, rows, row_scale.data(), records.data(), code_size,
                                      n, g, acc_want.data(), as);
              for (const KernelTable* k : tables) {
                std::vector<uint16_t> key_order(dims), value_order(dims);
                k->int16_order(dims, false, key_order.data());
                k->int16_order(dims, true, value_order.data());
                std::vector<bool> seen(dims, false);
                for (uint16_t o : key_order) {
                  ASSERT_LT(o, dims);
                  ASSERT_FALSE(seen[o]);
                  seen[o] = true;
                }
                std::vector<int16_t> qk(q.size());
                for (int r = 0; r < rows; ++r) {
                  for (int j = 0; j < dims; ++j) qk[r * qs + j] = q[r * qs + key_order[j]];
                }
                std::vector<float> got(rows * kBlockTokens, 0.25f), acc_k(rows * as, 0.5f);
                k->int16_dots(qk.data(), qs, rows, row_scale.data(), records.data(), code_size, n, g, got.data(),
                              kBlockTokens, add);
                k->int16_accumulate(w16.data(), kBlockTokens, rows, row_scale.data(), records.data(), code_size, n,
                                    g, acc_k.data(), as);
                const std::string what = std::string(k->name) + " dims " + std::to_string(dims) + " rows " +
                                         std::to_string(rows) + " n " + std::to_string(n) + (extreme ? " extreme" : "") +
                                         (add ? " add" : "");
                for (int r = 0; r < rows; ++r) {
                  for (size_t t = 0; t < kBlockTokens; ++t) {
                    ASSERT_TRUE(same_bits(got[r * kBlockTokens + t], want[r * kBlockTokens + t])) << what << " t " << t;
                  }
                  for (int j = 0; j < dims; ++j) {
                    ASSERT_TRUE(same_bits(acc_k[r * as + j], acc_want[r * as + value_order[j]])) << what << " pos " << j;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(AttentionInt8Kernels, WeightRoundingMatchesScalar) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  const KernelTable& scalar = turbokv::attn::scalar_kernel_table();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int rows = 1; rows <= 8; ++rows) {
    for (size_t n = 1; n <= kBlockTokens; n += (n < 10 ? 1 : 9)) {
      std::vector<float> p(rows * kBlockTokens), norm(kBlockTokens);
      for (auto& x : p) x = u(rng) * u(rng);
      for (auto& x : norm) x = 4.0f * u(rng);
      if (rows >= 2) std::fill(p.begin() + kBlockTokens, p.begin() + 2 * kBlockTokens, 0.0f);  // row 1: zeros
      if (rows >= 3) p[2 * kBlockTokens + n / 2] = nan;
      if (rows >= 4) p[3 * kBlockTokens + n - 1] = inf;
      std::vector<uint8_t> want(rows * kBlockTokens, 0xee);
      std::vector<float> want_scale(rows);
      scalar.int8_weights(p.data(), kBlockTokens, rows, norm.data(), n, 127, want.data(), want_scale.data());
      // The contract, on the scalar kernel: 7 bits, the max maps to 127, zeros to a multiple of 4.
      for (int r = 0; r < rows; ++r) {
        const size_t padded = (n + 3) / 4 * 4;
        for (size_t t = n; t < padded; ++t) EXPECT_EQ(want[r * kBlockTokens + t], 0);
        if (r == 2 || r == 3) {
          EXPECT_TRUE(std::isnan(want_scale[r])) << "row " << r;
          continue;
        }
        float wmax = 0.0f;
        for (size_t t = 0; t < n; ++t) wmax = std::max(wmax, p[r * kBlockTokens + t] * norm[t]);
        EXPECT_EQ(want_scale[r], wmax / 127.0f);
        for (size_t t = 0; t < n; ++t) {
          const float w = p[r * kBlockTokens + t] * norm[t];
          EXPECT_LE(want[r * kBlockTokens + t], 127);
          if (wmax > 0) {
            EXPECT_NEAR(want[r * kBlockTokens + t] * want_scale[r], w, 0.5001f * want_scale[r]);
          }
        }
      }
      std::vector<uint16_t> want16(rows * kBlockTokens, 0xeeee);
      std::vector<float> want_scale16(rows);
      scalar.int16_weights(p.data(), kBlockTokens, rows, norm.data(), n, want16.data(), want_scale16.data());
      for (int r = 0; r < rows; ++r) {
        for (size_t t = 0; t < n; ++t) EXPECT_LE(want16[r * kBlockTokens + t], turbokv::attn::kInt16Max);
        if (n % 2) {
          EXPECT_EQ(want16[r * kBlockTokens + n], 0);
        }
      }
      for (const KernelTable* k : tables) {
        if (k->int16_weights != nullptr) {
          std::vector<uint16_t> got16(rows * kBlockTokens, 0xeeee);
          std::vector<float> scale16(rows);
          k->int16_weights(p.data(), kBlockTokens, rows, norm.data(), n, got16.data(), scale16.data());
          for (int r = 0; r < rows; ++r) {
            EXPECT_TRUE(same_bits(scale16[r], want_scale16[r]) || (std::isnan(scale16[r]) && std::isnan(want_scale16[r])));
            for (size_t t = 0; t < (n + 1) / 2 * 2; ++t) ASSERT_EQ(got16[r * kBlockTokens + t], want16[r * kBlockTokens + t]);
          }
        }
        // Each table at its own levels against the scalar kernel at the same levels.
        const int levels = k->int8_weight_levels;
        std::vector<uint8_t> got(rows * kBlockTokens, 0xee);
        std::vector<float> scale(rows);
        k->int8_weights(p.data(), kBlockTokens, rows, norm.data(), n, levels, got.data(), scale.data());
        scalar.int8_weights(p.data(), kBlockTokens, rows, norm.data(), n, levels, want.data(), want_scale.data());
        for (int r = 0; r < rows; ++r) {
          EXPECT_TRUE(same_bits(scale[r], want_scale[r]) || (std::isnan(scale[r]) && std::isnan(want_scale[r])))
              << k->name << " rows " << rows << " n " << n << " row " << r;
          for (size_t t = 0; t < (n + 3) / 4 * 4; ++t) {
            ASSERT_EQ(got[r * kBlockTokens + t], want[r * kBlockTokens + t]) << k->name << " n " << n << " row " << r << " t " << t;
          }
        }
      }
    }
  }
}

using turbokv::test::random_normal;
using turbokv::test::rel_l2;
using TableGuard = turbokv::test::KernelTableGuard;

std::vector<const KernelTable*> all_tables() { return turbokv::test::all_kernel_tables(); }

struct Shape {
  int head_dim, q_heads, kv_heads;
  size_t tokens;
  double key_bits, value_bits;
  size_t sinks = 0, window = 0;
  bool center = false;
  int n_queries = 1;
};

// int8 output vs the exact fused output, for every kernel table; the SIMD tables with the same
// weight levels (they share their float kernels) give the same bits.
void check_close_to_exact(const Shape& s, double tolerance, std::mt19937& rng) {
  TurboQuantCacheOptions o;
  o.key_bits = s.key_bits;
  o.value_bits = s.value_bits;
  o.sinks = s.sinks;
  o.window = s.window;
  o.center = s.center;
  TurboQuantKVCache cache(s.kv_heads, s.head_dim, o);
  const size_t count = static_cast<size_t>(s.kv_heads) * s.tokens * s.head_dim;
  const auto keys = random_normal(count, rng, 2.0f), values = random_normal(count, rng);
  cache.append(keys, values, s.tokens);
  const auto q = random_normal(static_cast<size_t>(s.q_heads) * s.n_queries * s.head_dim, rng);
  AttentionOptions exact_options, int8_options;
  exact_options.arithmetic = AttentionArithmetic::exact;
  int8_options.arithmetic = AttentionArithmetic::int8;
  std::vector<float> truth(q.size()), exact(q.size()), first(q.size()), got(q.size());
  turbokv::attend_reference(q, s.q_heads, s.n_queries, keys, values, s.kv_heads, s.tokens, s.head_dim, truth);
  turbokv::attend(q, s.q_heads, s.n_queries, cache, exact, exact_options);
  const double exact_error = rel_l2(exact, truth);
  const std::string what = "dim " + std::to_string(s.head_dim) + " heads " + std::to_string(s.q_heads) + "/" +
                           std::to_string(s.kv_heads) + " tokens " + std::to_string(s.tokens) + " bits " +
                           std::to_string(s.key_bits) + "/" + std::to_string(s.value_bits) + " queries " +
                           std::to_string(s.n_queries);
  bool have_first = false;
  const bool needs_int16 = s.key_bits == 8 || s.value_bits == 8;
  for (const KernelTable* table : all_tables()) {
    if (needs_int16 && table->int16_dots == nullptr) continue;  // 8-bit codes attend exactly there
    const bool simd = table != &turbokv::attn::scalar_kernel_table();
    TableGuard guard(table);
    turbokv::attend(q, s.q_heads, s.n_queries, cache, got, int8_options);
    const double err = rel_l2(got, exact);
    EXPECT_LT(err, tolerance) << table->name << " " << what;
    // What the roundings add to the codes' own error (vs float attention over the originals).
    EXPECT_LT(rel_l2(got, truth), 1.05 * exact_error) << table->name << " " << what << " exact path's error " << exact_error;
    EXPECT_GT(err, 0.0) << table->name << " " << what << ": the int8 path did not run";
    if (!simd || table->int8_weight_levels != turbokv::attn::avx2_kernel_table()->int8_weight_levels) continue;
    if (!have_first) {
      first = got;
      have_first = true;
    } else {
      for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(got[i], first[i])) << table->name << " " << what;
    }
  }
}

TEST(AttentionInt8, CloseToExactOnEveryShape) {
  std::mt19937 rng(77);
  // Keys of spread 2 make the softmax peaked (logits of spread ~16 at head_dim 64), where the
  // int8 roundings move the output by 1.4-3.3% from the exact path's (measured) while the codes
  // themselves are off by far more; 5% leaves room without hiding a broken kernel (a wrong
  // order or scale gives errors of order 1).
  const double tol = 0.05;
  for (double bits : {2.0, 3.0, 4.0}) {
    check_close_to_exact({128, 32, 8, 300, bits, bits}, tol, rng);
    check_close_to_exact({64, 8, 2, 77, bits, bits}, tol, rng);
  }
  check_close_to_exact({128, 8, 8, 129, 3.5, 2.5}, tol, rng);  // two code groups per record
  check_close_to_exact({64, 4, 4, 65, 4.0, 3.0}, tol, rng);  // no GQA
  check_close_to_exact({64, 24, 3, 200, 3.0, 3.0, 1, 16, true}, tol, rng);  // sinks, window, centered
  check_close_to_exact({256, 16, 2, 90, 4.0, 2.0}, tol, rng);
  check_close_to_exact({64, 8, 2, 150, 4.0, 4.0, 0, 0, false, 7}, tol, rng);  // prefill: causal rows
  if (turbokv::attn::active_kernel_table().int16_dots != nullptr) {  // 8-bit codes in int16
    check_close_to_exact({128, 32, 8, 300, 8.0, 8.0}, tol, rng);
    check_close_to_exact({64, 8, 2, 77, 8.0, 4.0}, tol, rng);
    check_close_to_exact({256, 8, 2, 70, 3.0, 8.0, 1, 8, true}, tol, rng);
  }
}

TEST(AttentionInt8, FallsBackToExactWhereItDoesNotApply) {
  std::mt19937 rng(3);
  struct Fallback {
    int head_dim;
    double key_bits, value_bits;
    turbokv::TurboQuantCodecKind key_codec;
  };
  const Fallback cases[] = {
      {80, 4, 4, turbokv::TurboQuantCodecKind::mse},   // groups of 80: not whole chunks of 32
      {64, 5, 4, turbokv::TurboQuantCodecKind::mse},   // 5-bit keys
      {64, 4, 7, turbokv::TurboQuantCodecKind::mse},   // 7-bit values
      {320, 4, 8, turbokv::TurboQuantCodecKind::mse},  // 8-bit values beyond 256 coordinates
      {64, 1, 4, turbokv::TurboQuantCodecKind::mse},   // 1-bit keys
      {64, 4, 4, turbokv::TurboQuantCodecKind::prod},  // QJL keys
  };
  for (const Fallback& c : cases) {
    TurboQuantCacheOptions o;
    o.key_bits = c.key_bits;
    o.value_bits = c.value_bits;
    o.key_codec = c.key_codec;
    TurboQuantKVCache cache(2, c.head_dim, o);
    const size_t count = size_t{2} * 50 * c.head_dim;
    cache.append(random_normal(count, rng), random_normal(count, rng), 50);
    const auto q = random_normal(size_t{4} * c.head_dim, rng);
    AttentionOptions exact_options, int8_options;
    exact_options.arithmetic = AttentionArithmetic::exact;
    int8_options.arithmetic = AttentionArithmetic::int8;
    std::vector<float> exact(q.size()), got(q.size());
    turbokv::attend(q, 4, 1, cache, exact, exact_options);
    turbokv::attend(q, 4, 1, cache, got, int8_options);
    for (size_t i = 0; i < q.size(); ++i) ASSERT_TRUE(same_bits(got[i], exact[i])) << "dim " << c.head_dim;
  }
}

TEST(AttentionInt8, CacheOptionSelectsTheIntegerPath) {
  std::mt19937 rng(4);
  TurboQuantCacheOptions o;
  o.int8_attention = true;
  TurboQuantKVCache cache(2, 64, o);
  cache.append(random_normal(2 * 40 * 64, rng), random_normal(2 * 40 * 64, rng), 40);
  const auto q = random_normal(4 * 64, rng);
  AttentionOptions by_default, int8_options, exact_options;
  int8_options.arithmetic = AttentionArithmetic::int8;
  exact_options.arithmetic = AttentionArithmetic::exact;
  std::vector<float> a(q.size()), b(q.size()), c(q.size());
  turbokv::attend(q, 4, 1, cache, a, by_default);
  turbokv::attend(q, 4, 1, cache, b, int8_options);
  turbokv::attend(q, 4, 1, cache, c, exact_options);
  for (size_t i = 0; i < q.size(); ++i) ASSERT_TRUE(same_bits(a[i], b[i]));
  EXPECT_GT(rel_l2(a, c), 0.0);
}

// The input policy of every path (tests/core/test_input_policy.cpp): a non-finite query is the
// caller's problem, but it must not crash or touch the other heads' outputs.
TEST(AttentionInt8, NonFiniteQueryTouchesOnlyItsHead) {
  std::mt19937 rng(8);
  TurboQuantKVCache cache(1, 64, TurboQuantCacheOptions{});
  cache.append(random_normal(30 * 64, rng), random_normal(30 * 64, rng), 30);
  AttentionOptions o;
  o.arithmetic = AttentionArithmetic::int8;
  const auto clean_q = random_normal(2 * 64, rng);
  std::vector<float> clean(clean_q.size());
  turbokv::attend(clean_q, 2, 1, cache, clean, o);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto q = clean_q;
    q[5] = bad;  // head 0 only
    std::vector<float> out(q.size());
    turbokv::attend(q, 2, 1, cache, out, o);
    for (int j = 64; j < 128; ++j) EXPECT_TRUE(same_bits(out[j], clean[j])) << "head 1 coordinate " << j;
  }
}

}  // namespace
