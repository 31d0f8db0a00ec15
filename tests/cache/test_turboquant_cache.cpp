// TurboQuantKVCache: regions (sinks / compressed / window), chunking invariance, codes equal the
// codec's, quality vs the codec's distortion, trim semantics with and without windows, paged
// layout, exact nbytes formula and compression ratios, conversion from a dense cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "turbokv/attention.hpp"
#include "turbokv/codebook.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#include "turbokv/half.hpp"
#include "turbokv/turboquant_cache.hpp"
#include "cache_test_util.hpp"
#include "test_util.hpp"

using turbokv::test::expect_identical_caches;
using turbokv::test::random_normal;
using turbokv::test::slice_tokens;

namespace turbokv {
namespace {

struct Fetched {
  std::vector<float> keys, values;
};

Fetched fetch_all(const KVCache& c) {
  const size_t n = static_cast<size_t>(c.kv_heads()) * c.size() * c.head_dim();
  Fetched f{std::vector<float>(n), std::vector<float>(n)};
  c.fetch(f.keys, f.values);
  return f;
}

TurboQuantCacheOptions opts(double kb, double vb, size_t window = 0, size_t sinks = 0,
                            size_t page_tokens = 16) {
  TurboQuantCacheOptions o;
  o.norm_correction = false;  // the codec's plain distortion, which several tests compare with
  o.key_bits = kb;
  o.value_bits = vb;
  o.window = window;
  o.sinks = sinks;
  o.page_tokens = page_tokens;
  return o;
}

TEST(TurboQuantKVCache, ShapesAndAccessors) {
  TurboQuantKVCache cache(2, 64, opts(3, 2));
  EXPECT_EQ(cache.class_name(), "turboquant");
  EXPECT_EQ(cache.kv_heads(), 2);
  EXPECT_EQ(cache.head_dim(), 64);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.nbytes(), 0u);
  ASSERT_NE(cache.key_mse(), nullptr);
  EXPECT_EQ(cache.key_prod(), nullptr);
  EXPECT_EQ(cache.key_code_size(), cache.key_mse()->code_size());
  EXPECT_EQ(cache.value_code_size(), cache.value_codec().code_size());
  EXPECT_EQ(cache.key_mse()->options().seed, cache.options().seed);
  EXPECT_EQ(cache.value_codec().options().seed, cache.options().seed + 1);
  auto o = opts(3, 2);
  o.key_codec = TurboQuantCodecKind::prod;
  TurboQuantKVCache prod(1, 64, o);
  EXPECT_EQ(prod.key_mse(), nullptr);
  ASSERT_NE(prod.key_prod(), nullptr);
}

TEST(TurboQuantKVCache, RejectsBadOptions) {
  EXPECT_THROW(TurboQuantKVCache(0, 64, opts(3, 3)), Error);
  EXPECT_THROW(TurboQuantKVCache(1, 1, opts(3, 3)), Error);
  EXPECT_THROW(TurboQuantKVCache(1, 64, opts(0, 3)), Error);
  EXPECT_THROW(TurboQuantKVCache(1, 64, opts(3, 9)), Error);
  EXPECT_THROW(TurboQuantKVCache(1, 64, opts(2.3, 3)), Error);
  EXPECT_THROW(TurboQuantKVCache(1, 64, opts(3, 3, 0, 0, 0)), Error);
  auto o = opts(1, 3);
  o.key_codec = TurboQuantCodecKind::prod;  // prod needs >= 2 bits
  EXPECT_THROW(TurboQuantKVCache(1, 64, o), Error);
  o = opts(3, 3);
  o.value_codec = TurboQuantCodecKind::prod;
  EXPECT_THROW(TurboQuantKVCache(1, 64, o), Error);
  o = opts(3, 3);
  o.center = true;  // centering takes its mean from the sinks
  EXPECT_THROW(TurboQuantKVCache(1, 64, o), Error);
}

TEST(TurboQuantKVCache, NormCorrectionIsTheDefault) {
  EXPECT_TRUE(TurboQuantCacheOptions{}.norm_correction);
}

// Keys sharing a large common component (as real models' keys do): centering on the sinks'
// mean leaves the codec only the differences, so the compressed tokens come back closer.
TEST(TurboQuantKVCache, CenteringShrinksTheErrorOfKeysWithACommonComponent) {
  const int H = 2, D = 128;
  const size_t n = 300, sinks = 8;
  auto k = random_normal(H * n * D, 21), v = random_normal(H * n * D, 22);
  const auto common = random_normal(H * D, 23, 4.0f);
  for (int h = 0; h < H; ++h) {
    for (size_t t = 0; t < n; ++t) {
      for (int j = 0; j < D; ++j) {
        k[(h * n + t) * D + j] += common[h * D + j];
        v[(h * n + t) * D + j] += 0.5f * common[h * D + j];
      }
    }
  }
  double err[2][2] = {};  // [centered][keys|values]
  for (int centered = 0; centered < 2; ++centered) {
    auto o = opts(3, 3, 0, sinks);
    o.center = centered == 1;
    TurboQuantKVCache cache(H, D, o);
    cache.append(k, v, n);
    const Fetched f = fetch_all(cache);
    for (size_t i = 0; i < k.size(); ++i) {
      err[centered][0] += (f.keys[i] - k[i]) * (f.keys[i] - k[i]);
      err[centered][1] += (f.values[i] - v[i]) * (f.values[i] - v[i]);
    }
    if (centered == 1) {
      // The stored means are the sinks' means.
      for (int h = 0; h < H; ++h) {
        for (int j = 0; j < D; ++j) {
          double mk = 0;
          for (size_t t = 0; t < sinks; ++t) mk += k[(h * n + t) * D + j];
          EXPECT_NEAR(cache.key_center(h)[j], mk / sinks, 1e-5);
        }
      }
    } else {
      EXPECT_EQ(cache.key_center(0), nullptr);
    }
  }
  // The common part is ~16x the per-token variance for keys, 4x for values.
  EXPECT_LT(err[1][0], 0.2 * err[0][0]);
  EXPECT_LT(err[1][1], 0.5 * err[0][1]);
}

TEST(TurboQuantKVCache, CenteredStateRoundTripsAndIsRequiredWhole) {
  const int H = 3, D = 64;
  auto o = opts(4, 2.5, 8, 4);
  o.center = true;
  TurboQuantKVCache cache(H, D, o);
  cache.append(random_normal(H * 50 * D, 31, 2.0f), random_normal(H * 50 * D, 32), 50);
  const CacheState state = cache.save_state();
  const auto loaded = TurboQuantKVCache::from_state(state);
  expect_identical_caches(cache, *loaded);
  const Fetched a = fetch_all(cache), b = fetch_all(*loaded);
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.values, b.values);
  // Without its means a centered file would decode wrongly: rejected.
  CacheState missing = state;
  std::erase_if(missing.tensors, [](const TensorBlob& t) { return t.name == "value_center"; });
  EXPECT_THROW(TurboQuantKVCache::from_state(missing), Error);
  // And a build that does not center (metadata without center=true) rejects the extra tensors.
  CacheState unflagged = state;
  unflagged.metadata.erase("center");
  EXPECT_THROW(TurboQuantKVCache::from_state(unflagged), Error);
  CacheState poisoned = state;
  for (auto& t : poisoned.tensors) {
    if (t.name == "key_center") {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(t.data.data() + 4 * 5, &nan, 4);
    }
  }
  EXPECT_THROW(TurboQuantKVCache::from_state(poisoned), Error);
}

// The attention arithmetic is part of the state: a loaded cache (the server's restored prefix)
// attends as the saved one, int8 (serve's default) or exact, bit for bit; saving it again gives
// the same metadata; an unknown value is refused.
TEST(TurboQuantKVCache, AttentionArithmeticRoundTrips) {
  const int H = 2, D = 64;
  for (const bool int8 : {false, true}) {
    auto o = opts(4, 4, 8, 1);
    o.int8_attention = int8;
    TurboQuantKVCache cache(H, D, o);
    cache.append(random_normal(H * 40 * D, 41), random_normal(H * 40 * D, 42), 40);
    const CacheState state = cache.save_state();
    EXPECT_EQ(state.metadata.count("attention"), int8 ? 1u : 0u);
    const auto loaded = TurboQuantKVCache::from_state(state);
    EXPECT_EQ(loaded->options().int8_attention, int8);
    EXPECT_EQ(loaded->save_state().metadata, state.metadata);
    const auto q = random_normal(4 * 3 * D, 43);
    std::vector<float> want(q.size()), got(q.size());
    attend(q, 4, 3, cache, want);
    attend(q, 4, 3, *loaded, got);
    EXPECT_TRUE(turbokv::test::same_bits(want, got)) << "int8 " << int8;
    // The two arithmetics do differ here, so the comparison above tells them apart.
    AttentionOptions exact;
    exact.arithmetic = AttentionArithmetic::exact;
    std::vector<float> exact_out(q.size());
    attend(q, 4, 3, cache, exact_out, exact);
    EXPECT_EQ(turbokv::test::same_bits(want, exact_out), !int8);
  }
  CacheState bad = TurboQuantKVCache(H, D, opts(4, 4, 8, 1)).save_state();
  bad.metadata["attention"] = "fp8";
  EXPECT_THROW(TurboQuantKVCache::from_state(bad), Error);
}

// A trim that reaches into the sinks empties the compressed region; the next tokens refill the
// sinks and the means are taken again from them.
TEST(TurboQuantKVCache, CentersFollowTheSinksAfterATrim) {
  const int H = 1, D = 64;
  auto o = opts(3, 3, 0, 2);
  o.center = true;
  TurboQuantKVCache cache(H, D, o);
  cache.append(random_normal(10 * D, 41), random_normal(10 * D, 42), 10);
  cache.trim(9);
  const auto k = random_normal(5 * D, 43), v = random_normal(5 * D, 44);
  cache.append(k, v, 5);  // token 0 kept, these refill the second sink and compress the rest
  TurboQuantKVCache fresh(H, D, o);
  Fetched kept = fetch_all(cache);
  std::vector<float> k2(6 * D), v2(6 * D);
  std::copy(kept.keys.begin(), kept.keys.begin() + D, k2.begin());
  std::copy(kept.values.begin(), kept.values.begin() + D, v2.begin());
  std::copy(k.begin(), k.end(), k2.begin() + D);
  std::copy(v.begin(), v.end(), v2.begin() + D);
  fresh.append(k2, v2, 6);
  expect_identical_caches(cache, fresh);
}

TEST(TurboQuantKVCache, RegionsFillInOrder) {
  const int H = 2, D = 32;
  TurboQuantKVCache cache(H, D, opts(4, 4, /*window=*/5, /*sinks=*/3, 4));
  const size_t n = 30;
  const auto k = random_normal(H * n * D, 1), v = random_normal(H * n * D, 2);
  size_t done = 0;
  for (size_t c : {2, 4, 1, 23}) {
    cache.append(slice_tokens(k, H, n, D, done, c), slice_tokens(v, H, n, D, done, c), c);
    done += c;
    EXPECT_EQ(cache.size(), done);
    EXPECT_EQ(cache.n_sinks(), std::min<size_t>(done, 3));
    EXPECT_EQ(cache.window_size(), std::min<size_t>(done - cache.n_sinks(), 5));
    EXPECT_EQ(cache.compressed_size(), done - cache.n_sinks() - cache.window_size());
  }
  EXPECT_EQ(cache.num_pages(), (22u + 3) / 4);
  // Sinks and window are the exact input tokens.
  const Fetched f = fetch_all(cache);
  for (int h = 0; h < H; ++h) {
    for (size_t t = 0; t < 3; ++t) {
      for (int i = 0; i < D; ++i) {
        ASSERT_EQ(cache.sink_keys(h)[t * D + i], k[(h * n + t) * D + i]);
        ASSERT_EQ(cache.sink_values(h)[t * D + i], v[(h * n + t) * D + i]);
      }
    }
    for (size_t t = 0; t < 5; ++t) {
      for (int i = 0; i < D; ++i) {
        ASSERT_EQ(cache.window_keys(h)[t * D + i], k[(h * n + 25 + t) * D + i]);
        ASSERT_EQ(cache.window_values(h)[t * D + i], v[(h * n + 25 + t) * D + i]);
        ASSERT_EQ(f.keys[(h * n + 25 + t) * D + i], k[(h * n + 25 + t) * D + i]);
      }
    }
  }
}

// Compressed tokens hold exactly the codec's codes, in the documented page layout, and fetch()
// returns exactly the codec's decode.
TEST(TurboQuantKVCache, PagesHoldTheCodecsCodes) {
  const int H = 3, D = 64;
  const size_t n = 37, pt = 8;
  for (TurboQuantCodecKind kc : {TurboQuantCodecKind::mse, TurboQuantCodecKind::prod}) {
    auto o = opts(3, 2.5, 0, 0, pt);
    o.key_codec = kc;
    TurboQuantKVCache cache(H, D, o);
    const auto k = random_normal(H * n * D, 3), v = random_normal(H * n * D, 4);
    cache.append(k, v, n);
    ASSERT_EQ(cache.compressed_size(), n);
    const size_t kcs = cache.key_code_size(), vcs = cache.value_code_size();
    std::vector<uint8_t> ek(n * kcs), ev(n * vcs);
    std::vector<float> dk(n * D), dv(n * D);
    const Fetched f = fetch_all(cache);
    for (int h = 0; h < H; ++h) {
      if (cache.key_prod()) {
        cache.key_prod()->encode(k.data() + h * n * D, n, ek.data());
        cache.key_prod()->decode(ek.data(), n, dk.data());
      } else {
        cache.key_mse()->encode(k.data() + h * n * D, n, ek.data());
        cache.key_mse()->decode(ek.data(), n, dk.data());
      }
      cache.value_codec().encode(v.data() + h * n * D, n, ev.data());
      cache.value_codec().decode(ev.data(), n, dv.data());
      for (size_t p = 0; p < cache.num_pages(); ++p) {
        const size_t m = cache.tokens_in_page(p);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(cache.key_codes(p, h)) % 64, 0u);
        EXPECT_EQ(0, std::memcmp(cache.key_codes(p, h), ek.data() + p * pt * kcs, m * kcs));
        EXPECT_EQ(0, std::memcmp(cache.value_codes(p, h), ev.data() + p * pt * vcs, m * vcs));
      }
      EXPECT_EQ(0, std::memcmp(f.keys.data() + h * n * D, dk.data(), n * D * 4));
      EXPECT_EQ(0, std::memcmp(f.values.data() + h * n * D, dv.data(), n * D * 4));
    }
    EXPECT_THROW(cache.key_codes(cache.num_pages(), 0), Error);
    EXPECT_THROW(cache.value_codes(0, H), Error);
    // prefetch_page takes any index: held pages, the one past the end, far past it, and a
    // freed one (under ASan a stray read of any of them fails here).
    for (size_t p : {size_t{0}, cache.num_pages() - 1, cache.num_pages(), cache.num_pages() + 1000, SIZE_MAX}) {
      cache.prefetch_page(p);
    }
    cache.drop_before(2 * pt);
    ASSERT_THROW(cache.key_codes(0, 0), Error);
    cache.prefetch_page(0);
    cache.prefetch_page(1);
  }
}

TEST(TurboQuantKVCache, UnevenChunksEqualOneAppend) {
  const int H = 2, D = 48;
  const size_t n = 101;
  const auto k = random_normal(H * n * D, 5), v = random_normal(H * n * D, 6);
  std::vector<TurboQuantCacheOptions> configs = {opts(4, 4), opts(3, 2, 7, 0), opts(2.5, 3.5, 0, 4),
                                                 opts(3, 3, 16, 2, 256)};
  configs.push_back(opts(3, 2, 5, 1));
  configs.back().key_codec = TurboQuantCodecKind::prod;
  configs.back().rotation = RotationKind::haar;
  for (const auto& o : configs) {
    TurboQuantKVCache whole(H, D, o), chunked(H, D, o), single(H, D, o);
    whole.append(k, v, n);
    size_t done = 0;
    for (size_t c : {1, 3, 0, 17, 8, 40, 32}) {
      chunked.append(slice_tokens(k, H, n, D, done, c), slice_tokens(v, H, n, D, done, c), c);
      done += c;
    }
    ASSERT_EQ(done, n);
    for (size_t t = 0; t < n; ++t) {
      single.append(slice_tokens(k, H, n, D, t, 1), slice_tokens(v, H, n, D, t, 1), 1);
    }
    expect_identical_caches(whole, chunked);
    expect_identical_caches(whole, single);
  }
}

// Relative MSE of fetch() vs the input matches the codec's distortion (Lloyd-Max unit-vector MSE
// at integer widths), within sampling noise and the fp16 norm rounding.
TEST(TurboQuantKVCache, FetchErrorMatchesCodecDistortion) {
  const int H = 4, D = 128;
  const size_t n = 256;
  const auto k = random_normal(H * n * D, 7, 3.0f), v = random_normal(H * n * D, 8, 0.5f);
  for (int bits : {1, 2, 3, 4}) {
    TurboQuantKVCache cache(H, D, opts(bits, bits));
    cache.append(k, v, n);
    const Fetched f = fetch_all(cache);
    for (int which = 0; which < 2; ++which) {
      const auto& x = which == 0 ? k : v;
      const auto& y = which == 0 ? f.keys : f.values;
      double rel = 0;
      for (size_t t = 0; t < H * n; ++t) {
        double err = 0, norm = 0;
        for (int i = 0; i < D; ++i) {
          const double e = x[t * D + i] - y[t * D + i];
          err += e * e;
          norm += double(x[t * D + i]) * x[t * D + i];
        }
        rel += err / norm;
      }
      rel /= H * n;
      const double expected = LloydMaxCodebook::get(D, bits).unit_vector_mse();
      EXPECT_NEAR(rel, expected, 0.06 * expected) << "bits " << bits;
    }
  }
}

TEST(TurboQuantKVCache, TrimWithoutWindowThenAppendEqualsNeverAppended) {
  const int H = 2, D = 32;
  const size_t n = 60;
  const auto k = random_normal(H * n * D, 9), v = random_normal(H * n * D, 10);
  const auto junk = random_normal(H * 25 * D, 11);
  for (size_t sinks : {0, 4}) {
    TurboQuantKVCache a(H, D, opts(3, 3, 0, sinks, 8)), b(H, D, opts(3, 3, 0, sinks, 8));
    a.append(slice_tokens(k, H, n, D, 0, 30), slice_tokens(v, H, n, D, 0, 30), 30);
    a.append(junk, junk, 25);
    const size_t pages = a.num_pages();
    EXPECT_EQ(a.trim(25), 25u);
    EXPECT_LT(a.num_pages(), pages);  // whole pages freed
    EXPECT_EQ(a.num_pages(), (30 - sinks + 7) / 8);
    a.append(slice_tokens(k, H, n, D, 30, 30), slice_tokens(v, H, n, D, 30, 30), 30);
    b.append(k, v, n);
    expect_identical_caches(a, b);
    // Trimming into the sinks, then re-appending, refills them.
    a.trim(58);
    EXPECT_EQ(a.size(), 2u);
    EXPECT_EQ(a.n_sinks(), std::min<size_t>(2, sinks));
    a.append(slice_tokens(k, H, n, D, 2, 58), slice_tokens(v, H, n, D, 2, 58), 58);
    expect_identical_caches(a, b);
    EXPECT_EQ(a.trim(1000), n);
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(a.num_pages(), 0u);
    EXPECT_EQ(a.nbytes(), 0u);
  }
}

TEST(TurboQuantKVCache, TrimWithWindow) {
  const int H = 2, D = 32;
  const size_t n = 40, W = 8, S = 2;
  const auto k = random_normal(H * n * D, 12), v = random_normal(H * n * D, 13);
  const auto junk = random_normal(H * 5 * D, 14);
  // Appending 5 tokens and trimming them again leaves the first n tokens as they would be had the
  // 5 never been appended, except that the 5 window tokens they pushed out stay compressed:
  // the codes equal, byte for byte, those of a cache that holds the 5 (e), the first n - S - W
  // of them those of a cache that never saw them (b); sinks and the rest of the window are exact.
  TurboQuantKVCache a(H, D, opts(3, 3, W, S, 8)), b(H, D, opts(3, 3, W, S, 8)),
      e(H, D, opts(3, 3, W, S, 8));
  a.append(k, v, n);
  a.append(junk, junk, 5);  // pushes 5 of the window's tokens into compressed storage...
  a.trim(5);
  // ...which stay compressed: the window now holds W - 5 tokens.
  EXPECT_EQ(a.window_size(), W - 5);
  EXPECT_EQ(a.compressed_size(), n - S - W + 5);
  EXPECT_EQ(a.size(), n);
  b.append(k, v, n);
  e.append(k, v, n);
  e.append(junk, junk, 5);
  const CacheState sa = a.save_state(), sb = b.save_state(), se = e.save_state();
  auto tensor = [](const CacheState& st, const std::string& name) -> const TensorBlob& {
    for (const TensorBlob& t : st.tensors) if (t.name == name) return t;
    throw Error("no tensor " + name);
  };
  for (const char* name : {"key_codes", "value_codes"}) {
    const TensorBlob &ta = tensor(sa, name), &tb = tensor(sb, name), &te = tensor(se, name);
    EXPECT_EQ(ta.shape, te.shape) << name;
    EXPECT_TRUE(ta.data == te.data) << name;
    const size_t cs = static_cast<size_t>(ta.shape[2]);
    ASSERT_EQ(static_cast<size_t>(tb.shape[1]), n - S - W);
    for (int h = 0; h < H; ++h) {  // per head, b's codes are a prefix of a's
      EXPECT_TRUE(std::equal(tb.data.begin() + h * (n - S - W) * cs, tb.data.begin() + (h + 1) * (n - S - W) * cs,
                             ta.data.begin() + h * (n - S - W + 5) * cs)) << name << " head " << h;
    }
  }
  for (const char* name : {"sink_keys", "sink_values"}) {
    EXPECT_TRUE(tensor(sa, name).data == tensor(sb, name).data) << name;
  }
  const Fetched fa = fetch_all(a), fb = fetch_all(b), fe = fetch_all(e);
  for (int h = 0; h < H; ++h) {
    for (size_t t = 0; t < n; ++t) {
      for (size_t i = 0; i < static_cast<size_t>(D); ++i) {
        const size_t at = (h * n + t) * D + i;
        if (t >= n - (W - 5)) {  // still in the window: exact
          ASSERT_EQ(fa.keys[at], k[at]) << h << " " << t;
          ASSERT_EQ(fa.values[at], v[at]) << h << " " << t;
        } else if (t >= n - W) {  // pushed out and compressed: as in e
          ASSERT_EQ(fa.keys[at], fe.keys[(h * (n + 5) + t) * D + i]) << h << " " << t;
        } else {  // sinks and older compressed tokens: as in b
          ASSERT_EQ(fa.keys[at], fb.keys[at]) << h << " " << t;
          ASSERT_EQ(fa.values[at], fb.values[at]) << h << " " << t;
        }
      }
    }
  }
  // Newest tokens come off first; compressed tokens are trimmed once the window is empty.
  TurboQuantKVCache c(H, D, opts(3, 3, W, S, 8));
  c.append(k, v, n);
  const size_t compressed = c.compressed_size();
  c.trim(3);
  EXPECT_EQ(c.window_size(), W - 3);
  EXPECT_EQ(c.compressed_size(), compressed);
  c.trim(W - 3 + 10);
  EXPECT_EQ(c.window_size(), 0u);
  EXPECT_EQ(c.compressed_size(), compressed - 10);
  EXPECT_EQ(c.n_sinks(), S);
  // Appending refills the window before anything more is compressed.
  c.append(slice_tokens(k, H, n, D, 0, W), slice_tokens(v, H, n, D, 0, W), W);
  EXPECT_EQ(c.window_size(), W);
  EXPECT_EQ(c.compressed_size(), compressed - 10);
  const Fetched f = fetch_all(c);
  for (int h = 0; h < H; ++h) {
    for (size_t i = 0; i < W * D; ++i) {
      ASSERT_EQ(f.keys[(h * c.size() + c.size() - W) * D + i], k[h * n * D + i]);
    }
  }
  // Prefix property: the compressed tokens that survived equal those of a fresh cache.
  TurboQuantKVCache d(H, D, opts(3, 3, W, S, 8));
  d.append(k, v, n);
  d.trim(W + 10);
  EXPECT_EQ(d.compressed_size(), compressed - 10);
  for (size_t p = 0; p < d.num_pages(); ++p) {
    EXPECT_EQ(0, std::memcmp(d.key_codes(p, 1), c.key_codes(p, 1),
                             d.tokens_in_page(p) * d.key_code_size()));
  }
}

// nbytes = kv_heads * (compressed * (key_code_size + value_code_size) + (n_sinks + window_size)
// * head_dim * 8), and code_size follows the codec's layout (packed groups + norm).
TEST(TurboQuantKVCache, NbytesFormula) {
  const int H = 3, D = 128;
  auto o = opts(3, 2.5, 6, 2, 16);
  TurboQuantKVCache cache(H, D, o);
  EXPECT_EQ(cache.key_code_size(), 48u + 2);             // 128 * 3 / 8 + fp16 norm
  EXPECT_EQ(cache.value_code_size(), 32u + 8 + 2);       // 64 dims at 3 bits + 64 at 2 + norm
  const auto x = random_normal(H * 50 * D, 15);
  for (size_t n : {1, 1, 5, 20, 23}) {
    cache.append(std::span<const float>(x).first(H * n * D), std::span<const float>(x).first(H * n * D), n);
    const size_t expected =
        H * (cache.compressed_size() * (50 + 42) + (cache.n_sinks() + cache.window_size()) * D * 8);
    EXPECT_EQ(cache.nbytes(), expected);
  }
  cache.trim(9);
  EXPECT_EQ(cache.nbytes(), H * (cache.compressed_size() * 92 +
                                 (cache.n_sinks() + cache.window_size()) * D * 8));
  o.fp32_norm = true;
  o.key_codec = TurboQuantCodecKind::prod;
  TurboQuantKVCache prod(H, D, o);
  EXPECT_EQ(prod.key_code_size(), 32u + 4 + 16 + 4);  // 2-bit mse + fp32 norm + QJL signs + gamma
  // Centering adds its two means per head once a token is compressed.
  auto c = opts(3, 3, 0, 2, 16);
  c.center = true;
  TurboQuantKVCache centered(H, D, c);
  centered.append(std::span<const float>(x).first(H * 2 * D), std::span<const float>(x).first(H * 2 * D), 2);
  EXPECT_EQ(centered.nbytes(), H * 2 * D * 8u);  // the sinks only
  centered.append(std::span<const float>(x).first(H * 3 * D), std::span<const float>(x).first(H * 3 * D), 3);
  EXPECT_EQ(centered.nbytes(), H * (3 * 2 * (48u + 2) + 2 * D * 8 + 2 * D * 4));
}

double compression_vs_fp16(int D, double bits) {
  const int H = 2;
  const size_t n = 512;
  const auto x = random_normal(H * n * D, 16);
  TurboQuantKVCache tq(H, D, opts(bits, bits, 0, 0, 256));
  DenseKVCache dense(H, D, DenseDtype::f16);
  tq.append(x, x, n);
  dense.append(x, x, n);
  return static_cast<double>(dense.nbytes()) / tq.nbytes();
}

TEST(TurboQuantKVCache, CompressionVsFp16) {
  EXPECT_GE(compression_vs_fp16(128, 2), 7.4);
  EXPECT_GE(compression_vs_fp16(128, 3), 5.0);
  EXPECT_GE(compression_vs_fp16(128, 4), 3.85);
  EXPECT_GE(compression_vs_fp16(64, 3), 4.5);
}

TEST(TurboQuantKVCache, ConversionFromDenseIsBitIdentical) {
  const int H = 2, D = 64;
  const size_t n = 70;
  const auto k = random_normal(H * n * D, 17), v = random_normal(H * n * D, 18);
  DenseKVCache dense(H, D, DenseDtype::f16, 16);
  dense.append(k, v, n);
  const Fetched fd = fetch_all(dense);
  for (const auto& o : {opts(3, 3), opts(4, 2, 9, 3, 32)}) {
    const auto converted = to_turboquant(dense, o);
    TurboQuantKVCache direct(H, D, o);
    direct.append(fd.keys, fd.values, n);
    expect_identical_caches(*converted, direct);
    // From a non-dense cache: its fetched (decoded) values are encoded, exactly as appending
    // them to a fresh cache would.
    const auto generic = to_turboquant(static_cast<const KVCache&>(*converted), o);
    EXPECT_EQ(generic->size(), n);
    const Fetched fc = fetch_all(*converted);
    TurboQuantKVCache reencoded(H, D, o);
    reencoded.append(fc.keys, fc.values, n);
    expect_identical_caches(*generic, reencoded);
  }
}

TEST(TurboQuantKVCache, RejectedAppendLeavesCacheUnchanged) {
  const int H = 2, D = 32;
  const auto x = random_normal(H * 10 * D, 19);
  for (size_t window : {0, 4}) {
    TurboQuantKVCache cache(H, D, opts(3, 3, window, 1, 4));
    cache.append(x, x, 10);
    const CacheState before = cache.save_state();
    auto bad = x;
    bad[H * 10 * D - 1] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_THROW(cache.append(bad, x, 10), Error);
    bad[H * 10 * D - 1] = std::numeric_limits<float>::infinity();
    EXPECT_THROW(cache.append(x, bad, 10), Error);
    // Finite but with a norm beyond fp16: the codec refuses it (after other tokens were encoded
    // in this call), and the cache rolls back.
    bad[H * 10 * D - 1] = 1e6f;
    EXPECT_THROW(cache.append(bad, x, 10), Error);
    EXPECT_THROW(cache.append(x, bad, 10), Error);
    EXPECT_THROW(cache.append(x, x, 9), Error);
    const CacheState after = cache.save_state();
    EXPECT_EQ(before.metadata, after.metadata);
    for (size_t i = 0; i < before.tensors.size(); ++i) {
      EXPECT_TRUE(before.tensors[i].data == after.tensors[i].data) << before.tensors[i].name;
    }
    // fp32 norms accept it.
    auto o = opts(3, 3, window, 1, 4);
    o.fp32_norm = true;
    TurboQuantKVCache wide(H, D, o);
    EXPECT_NO_THROW(wide.append(bad, x, 10));
  }
}

TEST(TurboQuantKVCache, AppendHalfInput) {
  const int H = 1, D = 64;
  const size_t n = 9;
  const auto x = random_normal(H * n * D, 20);
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    h[i] = float_to_half(x[i]);
    back[i] = half_to_float(h[i]);
  }
  TurboQuantKVCache a(H, D, opts(3, 3, 2)), b(H, D, opts(3, 3, 2));
  a.append_half(h, h, n, HalfFormat::f16);
  b.append(back, back, n);
  expect_identical_caches(a, b);
}

}  // namespace
}  // namespace turbokv
