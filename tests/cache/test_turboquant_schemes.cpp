// The TurboQuant schemes behind the names tq3.5 and tq4 (issue 14: codes plus an fp16 sink and
// window of newest tokens) and per-layer widths (layer_bits, negative indices from the last
// layer). What they promise: the bits/value their names say with everything counted, a saved
// file that decodes alone, the fused attention reading every layer's codes, bad configurations
// and damaged files refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "turbokv/attention.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prng.hpp"
#include "turbokv/prompt_cache.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv {
namespace {

// kjv-llama-3M's shape: 4 layers of 2 kv heads x 64, 4 query heads.
constexpr int kLayers = 4, kKvHeads = 2, kQHeads = 4, kDim = 64;
// Per-layer widths: the first and the last layer wider than the others.
constexpr const char* kMixed = "turboquant:key_bits=3,value_bits=2.5,layer_bits=0k3v3;-1k4v3,sinks=1,window=4,exact=f16";

std::vector<float> gaussian(size_t n, uint64_t seed, float scale = 1.0f) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal()) * scale;
  return v;
}

// Appends `tokens` random tokens to every layer in chunks of 37 (not a page or window multiple).
void fill(PromptCache& cache, size_t tokens, uint64_t seed) {
  const size_t row = static_cast<size_t>(kKvHeads) * kDim;
  for (size_t l = 0; l < cache.n_layers(); ++l) {
    for (size_t done = 0; done < tokens;) {
      const size_t n = std::min<size_t>(37, tokens - done);
      const auto k = gaussian(n * row, seed + 1000 * l + done);
      const auto v = gaussian(n * row, seed + 1000 * l + done + 7, 0.5f);
      cache.layer(l).append(k, v, n);
      done += n;
    }
  }
}

double prompt_bits_per_value(const PromptCache& cache) {
  size_t values = 0;
  for (size_t l = 0; l < cache.n_layers(); ++l) values += 2 * cache.layer(l).size() * kKvHeads * kDim;
  return 8.0 * static_cast<double>(cache.nbytes()) / static_cast<double>(values);
}

const TurboQuantKVCache& tq_layer(const PromptCache& cache, size_t l) {
  return dynamic_cast<const TurboQuantKVCache&>(cache.layer(l));
}

TEST(TurboQuantSchemes, NamesAndPlainVariants) {
  const KVConfigSpec s35 = parse_kv_config("tq3.5");
  ASSERT_EQ(s35.config.kind, "turboquant");
  EXPECT_EQ(s35.config.tq.exact_dtype, DenseDtype::f16);
  EXPECT_GE(s35.config.tq.sinks, 1u);
  EXPECT_GE(s35.config.tq.window, 1u);
  EXPECT_LE(s35.config.tq.key_bits, 4);
  EXPECT_NE(s35.description.find("newest"), std::string::npos) << s35.description;
  const KVConfigSpec s4 = parse_kv_config("tq4");
  EXPECT_GE(s4.config.tq.window, 1u);
  // No code width above plain tq4's (the fused attention reads no more bytes per token).
  for (const auto& spec : {s35, s4}) {
    EXPECT_LE(spec.config.tq.key_bits, 4);
    EXPECT_LE(spec.config.tq.value_bits, 4);
    for (const LayerBits& lb : spec.config.layer_bits) EXPECT_LE(std::max(lb.key_bits, lb.value_bits), 4);
  }
  EXPECT_EQ(turboquant_scheme(3.5)->layer_bits, s35.config.layer_bits);
  EXPECT_FALSE(turboquant_scheme(3).has_value());
  EXPECT_FALSE(turboquant_scheme(4.5).has_value());
  // The plain codecs the bare names meant keep names of their own.
  for (const char* plain : {"tq4-plain", "tq3.5-plain", "k4v4"}) {
    const KVConfigSpec p = parse_kv_config(plain);
    EXPECT_TRUE(p.config.layer_bits.empty()) << plain;
    EXPECT_EQ(p.config.tq.window, 0u) << plain;
    EXPECT_EQ(p.config.tq.sinks, 0u) << plain;
  }
  EXPECT_EQ(parse_kv_config("tq3.5-plain").config.tq.key_bits, 3.5);
  // Suffixed names stay plain too.
  EXPECT_TRUE(parse_kv_config("tq4s1w32-x16").config.layer_bits.empty());
}

TEST(TurboQuantSchemes, LongFormLayerBitsRoundTripAndBadValuesFail) {
  const CacheConfig c = parse_cache_config(kMixed);
  ASSERT_EQ(c.layer_bits.size(), 2u);
  EXPECT_EQ(c.layer_bits[1].layer, -1);
  EXPECT_EQ(c.layer_bits[1].key_bits, 4);
  EXPECT_EQ(parse_cache_config(format_cache_config(c)).layer_bits, c.layer_bits);
  const CacheConfig s4 = parse_cache_config(format_cache_config(*turboquant_scheme(4)));
  EXPECT_EQ(s4.tq.window, turboquant_scheme(4)->tq.window);
  EXPECT_EQ(s4.tq.value_bits, turboquant_scheme(4)->tq.value_bits);
  EXPECT_EQ(s4.tq.exact_dtype, DenseDtype::f16);
  for (const char* bad : {"turboquant:layer_bits=0k4", "turboquant:layer_bits=0k9v4", "turboquant:layer_bits=xk4v4",
                          "turboquant:layer_bits=0k4v3.3", "turboquant:layer_bits=0k4v4;", "dense:layer_bits=0k4v4",
                          "turboquant:layer_bits=0v4k4"}) {
    EXPECT_THROW(parse_cache_config(bad), Error) << bad;
  }
  // A layer the model does not have is refused when the caches are built.
  const CacheConfig far = parse_cache_config("turboquant:layer_bits=4k4v4");
  EXPECT_THROW(make_prompt_cache(kLayers, kKvHeads, kDim, far), Error);
  EXPECT_THROW(make_prompt_cache(kLayers, kKvHeads, kDim, parse_cache_config("turboquant:layer_bits=-5k4v4")), Error);
  EXPECT_NO_THROW(make_prompt_cache(kLayers, kKvHeads, kDim, parse_cache_config("turboquant:layer_bits=-4k4v4")));
  // One cache of a per-layer configuration is ambiguous: refused, not silently the base widths.
  EXPECT_THROW(make_kv_cache(kKvHeads, kDim, c), Error);
}

TEST(TurboQuantSchemes, EachLayerGetsItsWidths) {
  const CacheConfig mixed = parse_cache_config(kMixed);
  const PromptCache cache = make_prompt_cache(kLayers, kKvHeads, kDim, mixed);
  EXPECT_EQ(tq_layer(cache, 0).options().key_bits, 3);
  EXPECT_EQ(tq_layer(cache, 0).options().value_bits, 3);
  EXPECT_EQ(tq_layer(cache, 3).options().key_bits, 4);
  EXPECT_EQ(tq_layer(cache, 3).options().value_bits, 3);
  for (size_t l : {1, 2}) {
    EXPECT_EQ(tq_layer(cache, l).options().key_bits, 3);
    EXPECT_EQ(tq_layer(cache, l).options().value_bits, 2.5);
  }
  // layer_cache_config: dense_layers win over layer_bits.
  CacheConfig with_dense = mixed;
  with_dense.dense_layers = {0};
  EXPECT_EQ(layer_cache_config(with_dense, 0, kLayers).kind, "dense");
  EXPECT_EQ(layer_cache_config(with_dense, 3, kLayers).tq.key_bits, 4);
  EXPECT_TRUE(layer_cache_config(with_dense, 3, kLayers).layer_bits.empty());
}

// Everything counted (codes, norms, fp16 sink and window) at the eval's 256 positions.
TEST(TurboQuantSchemes, BitsPerValueWithinTheirBudgets) {
  for (const auto& [name, budget] : {std::pair{"tq3.5", 3.5}, std::pair{"tq4", 4.25}}) {
    PromptCache cache = make_prompt_cache(kLayers, kKvHeads, kDim, parse_kv_config(name).config);
    fill(cache, 256, 11);
    const double bits = prompt_bits_per_value(cache);
    EXPECT_LE(bits, budget) << name;
    EXPECT_GT(bits, budget - 0.1) << name << ": the budget is meant to be spent";
    // nbytes is what the layers hold: codes per token, plus 16-bit sink and window tokens.
    size_t expect = 0;
    for (size_t l = 0; l < kLayers; ++l) {
      const auto& t = tq_layer(cache, l);
      expect += kKvHeads * (t.compressed_size() * (t.key_code_size() + t.value_code_size()) +
                            (t.n_sinks() + t.window_size()) * kDim * 2 * 2);
    }
    EXPECT_EQ(cache.nbytes(), expect) << name;
  }
}

TEST(TurboQuantSchemes, SaveLoadRoundTripIsBitExact) {
  for (const char* name : {"tq3.5", "tq4", kMixed}) {
    PromptCache cache = make_prompt_cache(kLayers, kKvHeads, kDim, parse_kv_config(name).config);
    fill(cache, 300, 21);  // two pages of codes at page_tokens 256, a full window
    const std::vector<uint8_t> bytes = serialize_prompt_cache(cache);
    const PromptCache loaded = parse_prompt_cache(bytes);
    ASSERT_EQ(loaded.n_layers(), cache.n_layers());
    for (size_t l = 0; l < kLayers; ++l) {
      const auto& a = tq_layer(cache, l);
      const auto& b = tq_layer(loaded, l);
      EXPECT_EQ(b.options().key_bits, a.options().key_bits) << name << " layer " << l;
      EXPECT_EQ(b.options().value_bits, a.options().value_bits) << name << " layer " << l;
      EXPECT_TRUE(b.exact_f16());
      const size_t n = static_cast<size_t>(kKvHeads) * a.size() * kDim;
      std::vector<float> ka(n), va(n), kb(n), vb(n);
      a.fetch(ka, va);
      b.fetch(kb, vb);
      EXPECT_EQ(0, std::memcmp(ka.data(), kb.data(), n * sizeof(float))) << name << " layer " << l;
      EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), n * sizeof(float))) << name << " layer " << l;
    }
    EXPECT_EQ(serialize_prompt_cache(loaded), bytes) << name;
  }
}

// A damaged width is refused: in a file by its checksum, in a layer's state (checksums
// recomputed or not in play) by the code sizes it implies.
TEST(TurboQuantSchemes, DamagedWidthsAreRejected) {
  PromptCache cache = make_prompt_cache(kLayers, kKvHeads, kDim, parse_cache_config(kMixed));
  fill(cache, 100, 31);
  std::vector<uint8_t> bytes = serialize_prompt_cache(cache);
  const std::string key = "\"layers.3.key_bits\":\"4\"";
  auto at = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  ASSERT_NE(at, bytes.end());
  *(at + static_cast<std::ptrdiff_t>(key.size()) - 2) = '3';
  EXPECT_THROW(parse_prompt_cache(bytes), Error);

  for (const auto& [field, value] : {std::pair{"key_bits", "3"}, std::pair{"value_bits", "2.5"}, std::pair{"key_bits", "4.5"}}) {
    CacheState state = cache.layer(3).save_state();
    state.metadata[field] = value;
    EXPECT_THROW(load_kv_cache(state), Error) << field << "=" << value;
  }
}

// The fused kernels read every layer's codes (half widths, fp16 sink and window) and agree
// with attention over the dequantized keys and values.
TEST(TurboQuantSchemes, FusedAttentionMatchesDequantizeThenAttend) {
  for (const char* name : {"tq3.5", "tq4", kMixed}) {
    PromptCache cache = make_prompt_cache(kLayers, kKvHeads, kDim, parse_kv_config(name).config);
    fill(cache, 300, 41);
    const int n_queries = 3;
    const auto q = gaussian(static_cast<size_t>(kQHeads) * n_queries * kDim, 51);
    for (size_t l = 0; l < kLayers; ++l) {
      const KVCache& layer = cache.layer(l);
      const size_t n = layer.size();
      std::vector<float> k(static_cast<size_t>(kKvHeads) * n * kDim), v(k.size());
      layer.fetch(k, v);
      std::vector<float> fused(q.size()), reference(q.size());
      attend(q, kQHeads, n_queries, layer, fused);
      attend_reference(q, kQHeads, n_queries, k, v, kKvHeads, n, kDim, reference, AttentionOptions{});
      double worst = 0;
      for (size_t i = 0; i < q.size(); ++i) worst = std::max(worst, std::abs(double(fused[i]) - reference[i]));
      EXPECT_LT(worst, 1e-4) << name << " layer " << l;
    }
  }
}

}  // namespace
}  // namespace turbokv
