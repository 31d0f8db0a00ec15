// The fused TurboQuant attention (scores and values straight from packed codes) must equal
// dequantize-then-attend within 1e-4 relative L2, for every key/value width, both key codecs,
// half widths, head dims, GQA ratios, odd cache sizes, sinks and windows, split-K, and every
// kernel table this CPU runs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <vector>

#include "attention/attention_kernels.hpp"
#include "attention_test_util.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/error.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace {

using turbokv::AttentionOptions;
using turbokv::TurboQuantCacheOptions;
using turbokv::TurboQuantCodecKind;
using turbokv::TurboQuantKVCache;

using turbokv::test::random_normal;
using turbokv::test::rel_l2;
using TableGuard = turbokv::test::KernelTableGuard;

std::vector<const turbokv::attn::KernelTable*> tables() { return turbokv::test::all_kernel_tables(); }

struct Case {
  int head_dim = 64, q_heads = 8, kv_heads = 2;
  size_t tokens = 77;
  TurboQuantCacheOptions cache;
  int n_queries = 1;
  AttentionOptions options;
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "dim " << c.head_dim << " heads " << c.q_heads << "/" << c.kv_heads << " tokens " << c.tokens
    << " key " << turbokv::codec_kind_name(c.cache.key_codec) << " " << c.cache.key_bits
    << " value " << c.cache.value_bits << " sinks " << c.cache.sinks << " window " << c.cache.window
    << " page " << c.cache.page_tokens << " queries " << c.n_queries << " threads " << c.options.threads
    << (c.cache.center ? " centered" : "");
  return s.str();
}

void check_case(const Case& c, std::mt19937& rng) {
  TurboQuantKVCache cache(c.kv_heads, c.head_dim, c.cache);
  const size_t count = static_cast<size_t>(c.kv_heads) * c.tokens * c.head_dim;
  // Keys with a spread that makes the softmax peaked, values plain Gaussian.
  cache.append(random_normal(count, rng, 2.0f), random_normal(count, rng), c.tokens);
  const auto q = random_normal(static_cast<size_t>(c.q_heads) * c.n_queries * c.head_dim, rng);
  std::vector<float> expected(q.size()), got(q.size());
  turbokv::attend_dequantized(q, c.q_heads, c.n_queries, cache, expected, c.options);
  for (const auto* table : tables()) {
    TableGuard guard(table);
    std::fill(got.begin(), got.end(), -7.0f);
    turbokv::attend(q, c.q_heads, c.n_queries, cache, got, c.options);
    EXPECT_LT(rel_l2(got, expected), 1e-4) << table->name << " " << describe(c);
  }
}

TEST(AttentionTurboQuant, EveryKeyAndValueWidth) {
  std::mt19937 rng(1);
  for (int kb = 1; kb <= 8; ++kb) {
    for (int vb = 1; vb <= 8; ++vb) {
      Case c;
      c.cache.key_bits = kb;
      c.cache.value_bits = vb;
      c.cache.page_tokens = 32;
      check_case(c, rng);
    }
  }
}

TEST(AttentionTurboQuant, ProdKeysEveryWidth) {
  std::mt19937 rng(2);
  for (int kb = 2; kb <= 8; ++kb) {
    Case c;
    c.cache.key_codec = TurboQuantCodecKind::prod;
    c.cache.key_bits = kb;
    c.cache.value_bits = 9 - kb;
    c.cache.sinks = kb % 2 ? 3 : 0;
    c.cache.window = kb % 3 ? 10 : 0;
    check_case(c, rng);
  }
}

TEST(AttentionTurboQuant, HalfWidths) {
  std::mt19937 rng(3);
  for (double kb : {1.5, 2.5, 3.5}) {
    for (double vb : {2.5, 4.0}) {
      for (int dim : {64, 80}) {
        Case c;
        c.head_dim = dim;
        c.cache.key_bits = kb;
        c.cache.value_bits = vb;
        check_case(c, rng);
      }
    }
  }
  Case prod;
  prod.cache.key_codec = TurboQuantCodecKind::prod;
  prod.cache.key_bits = 3.5;
  prod.cache.value_bits = 2.5;
  prod.head_dim = 96;
  check_case(prod, rng);
}

TEST(AttentionTurboQuant, HeadDimsRatiosSizesSinksWindows) {
  std::mt19937 rng(4);
  for (int dim : {64, 80, 96, 128, 256}) {
    for (int ratio : {1, 4, 8}) {
      for (size_t tokens : {size_t{1}, size_t{37}, size_t{203}}) {
        Case c;
        c.head_dim = dim;
        c.kv_heads = 2;
        c.q_heads = 2 * ratio;
        c.tokens = tokens;
        c.cache.key_bits = 4;
        c.cache.value_bits = 3;
        c.cache.page_tokens = 64;
        c.cache.sinks = ratio == 4 ? 4 : 0;
        c.cache.window = ratio == 8 ? 16 : 0;
        c.cache.key_codec = ratio == 1 ? TurboQuantCodecKind::prod : TurboQuantCodecKind::mse;
        check_case(c, rng);
      }
    }
  }
}

// Exact centering: the fused path adds <q, mean_k> to compressed scores and mean_v with the
// compressed tokens' softmax mass; it must still equal dequantize-then-attend (fetch adds the
// means back), with both key codecs, windows, prefill chunks and split-K over a long cache.
TEST(AttentionTurboQuant, CenteredCaches) {
  std::mt19937 rng(12);
  for (auto codec : {TurboQuantCodecKind::mse, TurboQuantCodecKind::prod}) {
    for (size_t sinks : {size_t{1}, size_t{8}}) {
      for (size_t window : {size_t{0}, size_t{16}}) {
        for (int n_queries : {1, 3}) {
          Case c;
          c.head_dim = 128;
          c.q_heads = 8;
          c.kv_heads = 2;
          c.tokens = 700;
          c.cache.key_bits = 4;
          c.cache.value_bits = 3;
          c.cache.key_codec = codec;
          c.cache.sinks = sinks;
          c.cache.window = window;
          c.cache.center = true;
          c.n_queries = n_queries;
          c.options.threads = 2;
          check_case(c, rng);
        }
      }
    }
  }
}

TEST(AttentionTurboQuant, PrefillOptionsAndSplitK) {
  std::mt19937 rng(5);
  for (int threads : {1, 2}) {
    Case c;
    c.options.threads = threads;
    c.tokens = 150;
    c.cache.sinks = 5;
    c.cache.window = 20;
    c.n_queries = 33;  // reaches back into the compressed region
    check_case(c, rng);
    c.options.softcap = 2.0f;
    c.options.scale = 0.2f;
    c.n_queries = 3;
    check_case(c, rng);
    c.options.causal = false;
    check_case(c, rng);
    // One kv head and a long context: split-K ranges crossing sinks, pages and window.
    Case k;
    k.options.threads = threads;
    k.kv_heads = 1;
    k.q_heads = 4;
    k.head_dim = 128;
    k.tokens = 2600;
    k.cache.sinks = 3;
    k.cache.window = 100;
    k.cache.page_tokens = 200;
    check_case(k, rng);
  }
}

TEST(AttentionTurboQuant, PrefillChunkEqualsTokenByTokenDecode) {
  std::mt19937 rng(6);
  const int kv_heads = 2, q_heads = 8, dim = 64, chunk = 7;
  const size_t prefix = 90;
  TurboQuantCacheOptions options;
  options.key_bits = 3;
  options.value_bits = 4;
  options.sinks = 4;
  options.page_tokens = 40;
  const auto pk = random_normal(static_cast<size_t>(kv_heads) * prefix * dim, rng, 2.0f);
  const auto pv = random_normal(pk.size(), rng);
  const auto k = random_normal(static_cast<size_t>(kv_heads) * chunk * dim, rng, 2.0f);
  const auto v = random_normal(k.size(), rng);
  const auto q = random_normal(static_cast<size_t>(q_heads) * chunk * dim, rng);

  TurboQuantKVCache step_cache(kv_heads, dim, options);
  step_cache.append(pk, pv, prefix);
  const std::vector<float> decoded =
      turbokv::test::attend_token_by_token(step_cache, q, k, v, q_heads, kv_heads, chunk, dim);
  TurboQuantKVCache cache(kv_heads, dim, options);
  cache.append(pk, pv, prefix);
  cache.append(k, v, chunk);
  std::vector<float> prefilled(q.size());
  turbokv::attend(q, q_heads, chunk, cache, prefilled);
  EXPECT_LT(rel_l2(prefilled, decoded), 1e-6);
}

// Prompt chunks (several queries, mse keys) attend in prefill tiles: blocks decoded once by
// group_decode, then the blocked float kernels. Every width (whole and half), head dims
// 64/128/256, GQA groups 1/4/8, odd query counts, chunks after an existing cache (the causal
// offset reaching into the compressed region), sinks, window and centering. (Int8 arithmetic
// keeps its own kernels and tiles for prompts: test_attention_int8.cpp.)
TEST(AttentionTurboQuant, PrefillTilesEveryWidthShapeAndOffset) {
  std::mt19937 rng(29);
  for (double bits : {2.0, 3.0, 4.0, 3.5, 2.5}) {
    for (int dim : {64, 128, 256}) {
      for (int ratio : {1, 4, 8}) {
        for (int n_queries : {2, 9, 41}) {
          Case c;
          c.head_dim = dim;
          c.kv_heads = 2;
          c.q_heads = 2 * ratio;
          c.cache.key_bits = c.cache.value_bits = bits;
          c.n_queries = n_queries;
          c.tokens = n_queries == 9 ? 9 : 101 + n_queries;  // alone, or after a prefix
          c.cache.sinks = ratio == 4 ? 3 : 0;
          c.cache.window = ratio == 8 ? 16 : 0;
          c.cache.center = dim == 128 && ratio == 4;  // centering takes its mean from the sinks
          c.cache.page_tokens = 48;
          c.options.threads = 2;
          check_case(c, rng);
        }
      }
    }
  }
}

TEST(AttentionTurboQuant, EmptyCacheIsAnError) {
  TurboQuantKVCache cache(2, 64, {});
  std::vector<float> q(4 * 64), out(4 * 64);
  EXPECT_THROW(turbokv::attend(q, 4, 1, cache, out), turbokv::Error);
}

}  // namespace
