// Configuration names -> cache configs and caches: every name issue 6 lists parses to the
// intended class and options, bad names fail with a clear Error, shapes that do not fit are
// "not applicable", and bits/value of a built cache comes from its bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "turbokv/baseline_caches.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prompt_cache.hpp"
#include "turbokv/turboquant_cache.hpp"

using namespace turbokv;

namespace {

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

}  // namespace

TEST(CacheConfig, TurboQuantNames) {
  auto s = parse_kv_config("tq3");
  EXPECT_EQ(s.config.kind, "turboquant");
  EXPECT_EQ(s.config.tq.key_bits, 3);
  EXPECT_EQ(s.config.tq.value_bits, 3);
  EXPECT_EQ(s.config.tq.key_codec, TurboQuantCodecKind::mse);
  EXPECT_EQ(s.config.tq.window, 0u);
  for (int b = 1; b <= 8; ++b) {
    // tq4 names the mixed scheme (test_turboquant_schemes.cpp); tq4-plain the uniform codec.
    EXPECT_EQ(parse_kv_config("tq" + std::to_string(b) + (b == 4 ? "-plain" : "")).config.tq.key_bits, b);
  }
  EXPECT_EQ(parse_kv_config("tq2.5").config.tq.value_bits, 2.5);
  EXPECT_EQ(parse_kv_config("tq3.5-plain").config.tq.key_bits, 3.5);
  s = parse_kv_config("k4v2");
  EXPECT_EQ(s.config.tq.key_bits, 4);
  EXPECT_EQ(s.config.tq.value_bits, 2);
  EXPECT_EQ(parse_kv_config("k3v2").config.tq.key_bits, 3);
  EXPECT_EQ(parse_kv_config("k4v3").config.tq.value_bits, 3);
  s = parse_kv_config("prod3");
  EXPECT_EQ(s.config.tq.key_codec, TurboQuantCodecKind::prod);
  EXPECT_EQ(s.config.tq.value_codec, TurboQuantCodecKind::mse);
  EXPECT_EQ(s.config.tq.key_bits, 3);
  s = parse_kv_config("tq3w64");
  EXPECT_EQ(s.config.tq.window, 64u);
  EXPECT_EQ(s.config.tq.sinks, 0u);
  s = parse_kv_config("tq3s4w64");
  EXPECT_EQ(s.config.tq.window, 64u);
  EXPECT_EQ(s.config.tq.sinks, 4u);
  s = parse_kv_config("k4v2s4-nc-f32n-haar");
  EXPECT_TRUE(s.config.tq.norm_correction);
  EXPECT_TRUE(s.config.tq.fp32_norm);
  EXPECT_EQ(s.config.tq.rotation, RotationKind::haar);
  EXPECT_EQ(s.config.tq.sinks, 4u);
  // Norm correction is the default; -nonc turns it off (and says so), -ctr centers.
  EXPECT_TRUE(parse_kv_config("tq4").config.tq.norm_correction);
  s = parse_kv_config("tq4-nonc");
  EXPECT_FALSE(s.config.tq.norm_correction);
  EXPECT_NE(s.description.find("no norm correction"), std::string::npos) << s.description;
  s = parse_kv_config("tq3s8-ctr");
  EXPECT_TRUE(s.config.tq.center);
  EXPECT_EQ(s.config.tq.sinks, 8u);
  EXPECT_NE(s.description.find("centered"), std::string::npos) << s.description;
  EXPECT_FALSE(parse_kv_config("tq3s8").config.tq.center);
  EXPECT_THROW(parse_kv_config("tq3-ctr"), turbokv::Error);  // centering needs sinks
  EXPECT_THROW(parse_kv_config("tq3s8-ctrx"), turbokv::Error);
  // The long form round-trips centering.
  const auto long_form = turbokv::parse_cache_config("turboquant:bits=3,sinks=4,center=1");
  EXPECT_TRUE(long_form.tq.center);
  EXPECT_TRUE(turbokv::parse_cache_config(turbokv::format_cache_config(long_form)).tq.center);
}

TEST(CacheConfig, Int8AttentionFlag) {
  EXPECT_FALSE(parse_kv_config("tq4").config.tq.int8_attention);
  for (const char* name : {"tq4-i8", "tq3.5-i8", "tq4-plain-i8", "tq3-i8", "k4v2s1w8-x16-i8"}) {
    const auto s = parse_kv_config(name);
    EXPECT_TRUE(s.config.tq.int8_attention) << name;
    EXPECT_NE(s.description.find("int8 attention"), std::string::npos) << s.description;
  }
  // The schemes keep their codes: only the arithmetic differs.
  const auto scheme = parse_kv_config("tq4").config.tq, scheme_i8 = parse_kv_config("tq4-i8").config.tq;
  EXPECT_EQ(scheme.key_bits, scheme_i8.key_bits);
  EXPECT_EQ(scheme.window, scheme_i8.window);
  const auto long_form = turbokv::parse_cache_config("turboquant:bits=3,attention=int8");
  EXPECT_TRUE(long_form.tq.int8_attention);
  EXPECT_TRUE(turbokv::parse_cache_config(turbokv::format_cache_config(long_form)).tq.int8_attention);
  EXPECT_FALSE(turbokv::parse_cache_config("turboquant:bits=3,attention=exact").tq.int8_attention);
  EXPECT_THROW(turbokv::parse_cache_config("turboquant:bits=3,attention=fast"), turbokv::Error);
  EXPECT_THROW(parse_kv_config("tq4-i9"), turbokv::Error);
}

TEST(CacheConfig, BaselineAndDenseNames) {
  EXPECT_EQ(parse_kv_config("dense16").config.kind, "dense");
  EXPECT_EQ(parse_kv_config("dense16").config.dense_dtype, DenseDtype::f16);
  EXPECT_EQ(parse_kv_config("dense32").config.dense_dtype, DenseDtype::f32);
  EXPECT_EQ(parse_kv_config("q8_0").config.kind, "q8_0");
  EXPECT_EQ(parse_kv_config("q8_0").config.options.count("hadamard"), 0u);
  EXPECT_EQ(parse_kv_config("q4_0h").config.kind, "q4_0");
  EXPECT_EQ(parse_kv_config("q4_0h").config.options.at("hadamard"), "1");
  EXPECT_EQ(parse_kv_config("q8_0h").config.options.at("hadamard"), "1");
  auto s = parse_kv_config("kivi2");
  EXPECT_EQ(s.config.kind, "kivi");
  EXPECT_EQ(s.config.options.at("bits"), "2");
  EXPECT_EQ(s.config.options.at("residual"), "32");
  EXPECT_EQ(parse_kv_config("kivi4r128").config.options.at("residual"), "128");
  EXPECT_EQ(parse_kv_config("affine8").config.options.at("bits"), "8");
  EXPECT_EQ(parse_kv_config("affine4").config.kind, "affine");
  // The long form of prompt_cache.hpp passes through.
  EXPECT_EQ(parse_kv_config("turboquant:key_bits=4,value_bits=2").config.tq.value_bits, 2);
}

TEST(CacheConfig, BadNamesFailClearly) {
  for (const char* bad : {"", "tq", "tq3x", "tq3-zz", "tq9", "tq0", "k4", "k4v", "prod1", "foo",
                          "kivi3", "kivi2r33", "affine5", "q5_0", "dense8", "tq3w", "tq3s4s4"}) {
    try {
      parse_kv_config(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      if (*bad) {
        EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      }
    }
  }
}

TEST(CacheConfig, Lists) {
  const auto specs = parse_kv_config_list("dense16,tq3,,q4_0h,kivi2");
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[2].name, "q4_0h");
  const auto mixed = parse_kv_config_list("turboquant:key_bits=4,value_bits=2,q8_0,tq2");
  ASSERT_EQ(mixed.size(), 3u);
  EXPECT_EQ(mixed[0].config.tq.key_bits, 4);
  EXPECT_EQ(mixed[0].config.tq.value_bits, 2);
  EXPECT_EQ(mixed[1].name, "q8_0");
  EXPECT_THROW(parse_kv_config_list(","), Error);
  EXPECT_THROW(parse_kv_config_list("tq3,bogus"), Error);
}

TEST(CacheConfig, MakesEveryListedConfiguration) {
  const int heads = 2, dim = 128;
  const size_t tokens = 300;
  const auto k = gaussian(heads * tokens * dim, 1), v = gaussian(heads * tokens * dim, 2);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"dense16", "dense"}, {"dense32", "dense"}, {"tq8", "turboquant"}, {"tq4-plain", "turboquant"},
      {"tq1", "turboquant"}, {"tq2.5", "turboquant"}, {"tq3.5-plain", "turboquant"},
      {"k4v2", "turboquant"}, {"k4v3", "turboquant"}, {"k3v2", "turboquant"},
      {"prod3", "turboquant"}, {"prod4", "turboquant"}, {"tq3w64", "turboquant"},
      {"tq3s4w64", "turboquant"}, {"q8_0", "q8_0"}, {"q4_0", "q4_0"}, {"q8_0h", "q8_0"},
      {"q4_0h", "q4_0"}, {"kivi2", "kivi"}, {"kivi4", "kivi"}, {"affine4", "affine"},
      {"affine8", "affine"}};
  for (const auto& [name, cls] : expected) {
    SCOPED_TRACE(name);
    auto cache = make_kv_cache(name, heads, dim);
    ASSERT_NE(cache, nullptr);
    EXPECT_EQ(cache->class_name(), cls);
    EXPECT_EQ(kv_bits_per_value(*cache), 0.0);
    cache->append(k, v, tokens);
    EXPECT_EQ(cache->size(), tokens);
    const double bits = kv_bits_per_value(*cache);
    EXPECT_EQ(bits, 8.0 * cache->nbytes() / (2.0 * tokens * heads * dim));
    if (name == "dense16") {
      EXPECT_EQ(bits, 16.0);
    }
    if (name == "dense32") {
      EXPECT_EQ(bits, 32.0);
    }
    if (name == "q8_0" || name == "q8_0h") {
      EXPECT_EQ(bits, 8.5);
    }
    if (name == "q4_0" || name == "q4_0h") {
      EXPECT_EQ(bits, 4.5);
    }
    if (name == "affine4") {
      EXPECT_EQ(bits, 4.5);
    }
    if (name == "affine8") {
      EXPECT_EQ(bits, 8.5);
    }
    if (name == "tq4-plain") {
      EXPECT_GT(bits, 4.0);
      EXPECT_LT(bits, 4.5);
    }
  }
  // Options reach the class.
  auto kivi = make_kv_cache("kivi4r64", heads, dim);
  EXPECT_EQ(dynamic_cast<KiviKVCache&>(*kivi).options().residual, 64u);
  EXPECT_EQ(dynamic_cast<KiviKVCache&>(*kivi).options().bits, 4);
  auto q = make_kv_cache("q4_0h", heads, dim);
  EXPECT_TRUE(dynamic_cast<BlockQuantKVCache&>(*q).options().hadamard);
}

TEST(CacheConfig, NotApplicableShapes) {
  for (const char* name : {"q8_0", "q4_0h", "kivi2"}) {
    EXPECT_FALSE(kv_config_problem(parse_kv_config(name), 4, 8).empty()) << name;
    EXPECT_THROW(make_kv_cache(name, 4, 8), NotApplicableError) << name;
    EXPECT_TRUE(kv_config_problem(parse_kv_config(name), 4, 64).empty()) << name;
  }
  EXPECT_THROW(make_kv_cache("affine4", 4, 32), NotApplicableError);
  EXPECT_TRUE(kv_config_problem(parse_kv_config("affine4"), 4, 64).empty());
  // affine's groups of 64 values do not fit head_dim 32 either: required to throw, and to say so.
  try {
    make_kv_cache("affine8", 1, 32);
    ADD_FAILURE() << "affine8 built a cache at head_dim 32";
  } catch (const NotApplicableError& e) {
    EXPECT_NE(std::string(e.what()).find("not applicable"), std::string::npos) << e.what();
  }
  // TurboQuant and dense apply to small heads.
  EXPECT_NO_THROW(make_kv_cache("tq3", 4, 8));
  EXPECT_NO_THROW(make_kv_cache("dense16", 4, 8));
  // Unknown class options are rejected by the maker.
  CacheConfig c;
  c.kind = "q8_0";
  c.options["bogus"] = "1";
  EXPECT_THROW(make_baseline_cache(1, 64, c), Error);
  c.options = {{"hadamard", "2"}};
  EXPECT_THROW(make_baseline_cache(1, 64, c), Error);
}

TEST(CacheConfig, RegistryLoadsEveryBaselineClass) {
  const int heads = 2, dim = 64;
  const auto k = gaussian(heads * 40 * dim, 3);
  for (const char* name : {"q8_0", "q4_0h", "kivi2", "affine4"}) {
    SCOPED_TRACE(name);
    auto cache = make_kv_cache(name, heads, dim);
    cache->append(k, k, 40);
    auto loaded = load_kv_cache(cache->save_state());
    EXPECT_EQ(loaded->class_name(), cache->class_name());
    std::vector<float> a(k.size()), b(k.size()), c(k.size()), d(k.size());
    cache->fetch(a, b);
    loaded->fetch(c, d);
    EXPECT_EQ(a, c);
    EXPECT_EQ(b, d);
  }
  const auto classes = registered_cache_classes();
  for (const char* cls : {"q8_0", "q4_0", "kivi", "affine"}) {
    EXPECT_NE(std::find(classes.begin(), classes.end(), cls), classes.end()) << cls;
  }
}
