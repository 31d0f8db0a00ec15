// PromptCache with TurboQuant and mixed layers: bit-exact save/load for every class and option,
// codec checksum verification, TurboQuant-specific broken states, make_prompt_cache and cache
// config strings.
#include <gtest/gtest.h>

#include "skip_policy.hpp"
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "turbokv/cache_io.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prompt_cache.hpp"
#include "turbokv/turboquant_cache.hpp"
#include "cache_test_util.hpp"
#include "test_util.hpp"

using turbokv::test::random_normal;
using turbokv::test::run_command;

namespace turbokv {
namespace {

void fill(KVCache& cache, size_t n, uint32_t seed) {
  const size_t len = static_cast<size_t>(cache.kv_heads()) * n * cache.head_dim();
  cache.append(random_normal(len, seed), random_normal(len, seed + 1), n);
}

std::vector<TurboQuantCacheOptions> all_option_variants() {
  std::vector<TurboQuantCacheOptions> out;
  for (double kb : {1.0, 2.5, 3.0, 4.0, 8.0}) {
    for (TurboQuantCodecKind kc : {TurboQuantCodecKind::mse, TurboQuantCodecKind::prod}) {
      if (kc == TurboQuantCodecKind::prod && kb < 2) continue;
      TurboQuantCacheOptions o;
      o.key_bits = kb;
      o.value_bits = kb == 8.0 ? 1.5 : 2;
      o.key_codec = kc;
      o.page_tokens = 8;
      out.push_back(o);
    }
  }
  for (int variant = 0; variant < 6; ++variant) {
    TurboQuantCacheOptions o;
    o.key_bits = 3;
    o.value_bits = 3.5;
    o.page_tokens = 16;
    o.rotation = variant % 2 ? RotationKind::haar : RotationKind::hadamard;
    o.seed = 1234 + variant;
    o.fp32_norm = variant & 2;
    o.norm_correction = variant & 4;
    o.window = variant >= 3 ? 7 : 0;
    o.sinks = variant >= 4 ? 3 : 0;
    out.push_back(o);
  }
  return out;
}

TEST(PromptCache, TurboQuantRoundTripIsBitExactForEveryOption) {
  for (const auto& o : all_option_variants()) {
    SCOPED_TRACE(format_cache_config(CacheConfig{"turboquant", DenseDtype::f16, 256, o, {}, {}, {}}));
    PromptCache cache;
    auto layer = std::make_unique<TurboQuantKVCache>(2, 64, o);
    fill(*layer, 29, 1);
    cache.add_layer(std::move(layer));
    auto trimmed = std::make_unique<TurboQuantKVCache>(2, 64, o);
    fill(*trimmed, 40, 3);
    trimmed->trim(9);
    cache.add_layer(std::move(trimmed));
    cache.add_layer(std::make_unique<TurboQuantKVCache>(2, 64, o));  // empty
    const auto bytes = serialize_prompt_cache(cache);
    const PromptCache loaded = parse_prompt_cache(bytes);
    ASSERT_EQ(loaded.n_layers(), 3u);
    for (size_t i = 0; i < 3; ++i) test::expect_identical_caches(cache.layer(i), loaded.layer(i));
    // The loaded cache keeps working identically: append the same tokens to both.
    auto& a = const_cast<KVCache&>(cache.layer(1));
    PromptCache reloaded = parse_prompt_cache(bytes);
    fill(a, 11, 5);
    fill(reloaded.layer(1), 11, 5);
    test::expect_identical_caches(a, reloaded.layer(1));
  }
}

TEST(PromptCache, MixedLayersSaveAndLoad) {
  PromptCache cache;
  cache.add_layer(std::make_unique<DenseKVCache>(2, 64, DenseDtype::f16, 16));
  TurboQuantCacheOptions o;
  o.key_bits = 4;
  o.value_bits = 2;
  o.window = 4;
  cache.add_layer(std::make_unique<TurboQuantKVCache>(2, 64, o));
  cache.add_layer(std::make_unique<DenseKVCache>(2, 64, DenseDtype::f32));
  o.key_codec = TurboQuantCodecKind::prod;
  o.key_bits = 3;
  cache.add_layer(std::make_unique<TurboQuantKVCache>(2, 64, o));
  for (size_t i = 0; i < cache.n_layers(); ++i) fill(cache.layer(i), 33, 10 + i);
  cache.metadata()["model"] = "stories15M";
  cache.metadata()["token_ids"] = "1 450 4996";
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("turbokv_test_mixed_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  save_prompt_cache(path, cache);
  const PromptCache loaded = load_prompt_cache(path);
  const PromptCacheFileInfo info = read_prompt_cache_info(path);
  std::remove(path.c_str());
  ASSERT_EQ(loaded.n_layers(), 4u);
  EXPECT_EQ(loaded.metadata(), cache.metadata());
  for (size_t i = 0; i < 4; ++i) test::expect_identical_caches(cache.layer(i), loaded.layer(i));
  EXPECT_EQ(info.layers[1].at("class"), "turboquant");
  EXPECT_EQ(info.layers[3].at("key_codec"), "prod");
  EXPECT_EQ(info.layers[2].at("dtype"), "f32");
  // Tensor bytes of a TurboQuant layer equal its nbytes (codes + exact window).
  EXPECT_EQ(info.layer_tensor_bytes[1], cache.layer(1).nbytes());
  EXPECT_EQ(info.layer_tensor_bytes[0], cache.layer(0).nbytes());
}

// TurboQuant layer states that must be rejected, each with its message.
TEST(PromptCache, BrokenTurboQuantStatesAreRejected) {
  TurboQuantCacheOptions o;
  o.key_bits = 3;
  o.value_bits = 3;
  o.window = 4;
  o.sinks = 2;
  o.page_tokens = 8;
  TurboQuantKVCache cache(2, 32, o);
  fill(cache, 20, 1);
  const CacheState good = cache.save_state();
  ASSERT_NO_THROW(load_kv_cache(good));
  struct Case {
    const char* name;
    std::function<void(CacheState&)> edit;
    const char* expected;
  };
  auto tensor = [](CacheState& s, const std::string& name) -> TensorBlob& {
    for (auto& t : s.tensors) {
      if (t.name == name) return t;
    }
    throw std::runtime_error("no tensor " + name);
  };
  const std::vector<Case> cases = {
      {"key checksum", [](CacheState& s) { s.metadata["key_checksum"] = std::string("12345"); },
       "key codec checksum mismatch"},
      {"value checksum", [](CacheState& s) { s.metadata["value_checksum"] = std::string("1"); },
       "value codec checksum mismatch"},
      {"other seed", [](CacheState& s) { s.metadata["seed"] = std::string("99"); }, "checksum mismatch"},
      {"code size", [](CacheState& s) { s.metadata["key_code_size"] = std::string("51"); }, "code sizes"},
      {"regions", [](CacheState& s) { s.metadata["compressed"] = std::string("15"); }, "!= tokens"},
      {"window too big", [](CacheState& s) { s.metadata["window_size"] = std::string("5"); }, "out of range"},
      {"sinks gap",
       [](CacheState& s) {
         s.metadata["sinks"] = std::string("3");
       },
       "sinks filled but later regions hold tokens"},
      {"bad bits", [](CacheState& s) { s.metadata["key_bits"] = std::string("2.3"); }, "steps of 0.5"},
      {"nan bits", [](CacheState& s) { s.metadata["key_bits"] = std::string("nan"); }, "not a number"},
      {"bad codec", [](CacheState& s) { s.metadata["key_codec"] = std::string("lzma"); }, "'mse' or 'prod'"},
      {"bad rotation", [](CacheState& s) { s.metadata["rotation"] = std::string("dct"); }, "dct"},
      {"bad bool", [](CacheState& s) { s.metadata["fp32_norm"] = std::string("yes"); }, "'true' or 'false'"},
      {"missing key", [](CacheState& s) { s.metadata.erase("window"); }, "missing metadata key 'window'"},
      {"codes dtype", [&](CacheState& s) { tensor(s, "key_codes").dtype = "I8"; }, "expected U8"},
      {"codes shape",
       [&](CacheState& s) {
         auto& t = tensor(s, "value_codes");
         t.shape[1] -= 1;
         t.data.resize(t.data.size() - 2 * 50);
       },
       "but the metadata says"},
      {"nan window",
       [&](CacheState& s) {
         auto& t = tensor(s, "window_keys");
         const float nan = std::nanf("");
         std::memcpy(t.data.data() + 8, &nan, 4);
       },
       "non-finite"},
      {"missing tensor",
       [](CacheState& s) { s.tensors.pop_back(); },
       "expected 6 tensors"},
  };
  for (const Case& c : cases) {
    CacheState s = good;
    c.edit(s);
    try {
      load_kv_cache(s);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos)
          << c.name << ": " << e.what();
    }
  }
}

TEST(PromptCache, MakePromptCache) {
  CacheConfig config = parse_cache_config("turboquant:key_bits=4,value_bits=2,window=8,dense_layers=0;3");
  PromptCache cache = make_prompt_cache(4, 2, 64, config);
  ASSERT_EQ(cache.n_layers(), 4u);
  EXPECT_EQ(cache.layer(0).class_name(), "dense");
  EXPECT_EQ(cache.layer(1).class_name(), "turboquant");
  EXPECT_EQ(cache.layer(3).class_name(), "dense");
  const auto& tq = dynamic_cast<const TurboQuantKVCache&>(cache.layer(2));
  EXPECT_EQ(tq.options().key_bits, 4);
  EXPECT_EQ(tq.options().value_bits, 2);
  EXPECT_EQ(tq.options().window, 8u);
  for (size_t i = 0; i < 4; ++i) fill(cache.layer(i), 10, 1);
  EXPECT_EQ(cache.size(), 10u);
  EXPECT_EQ(cache.trim(4), 4u);
  EXPECT_EQ(cache.layer(2).size(), 6u);
  EXPECT_EQ(cache.nbytes(), 2 * 6 * 2 * 64 * 2 * 2 + 2 * tq.nbytes());
  EXPECT_THROW(make_prompt_cache(2, 2, 64, config), Error);  // dense layer 3 out of range
  EXPECT_THROW(make_prompt_cache(2, 2, 64, parse_cache_config("nonexistent")), Error);
  EXPECT_THROW(cache.layer(4), Error);
}

TEST(PromptCache, CacheConfigStrings) {
  const CacheConfig c = parse_cache_config(
      "turboquant:key_bits=3.5,value_bits=2,key_codec=prod,rotation=haar,seed=7,fp32_norm=1,"
      "norm_correction=true,window=16,sinks=4,page_tokens=64");
  EXPECT_EQ(c.tq.key_bits, 3.5);
  EXPECT_EQ(c.tq.key_codec, TurboQuantCodecKind::prod);
  EXPECT_EQ(c.tq.rotation, RotationKind::haar);
  EXPECT_EQ(c.tq.seed, 7u);
  EXPECT_TRUE(c.tq.fp32_norm);
  EXPECT_TRUE(c.tq.norm_correction);
  EXPECT_EQ(c.tq.sinks, 4u);
  EXPECT_EQ(c.tq.page_tokens, 64u);
  const CacheConfig back = parse_cache_config(format_cache_config(c));
  EXPECT_EQ(format_cache_config(back), format_cache_config(c));
  EXPECT_EQ(back.tq.window, 16u);
  EXPECT_EQ(parse_cache_config("turboquant:bits=2").tq.value_bits, 2);
  EXPECT_EQ(parse_cache_config("dense:dtype=f32").dense_dtype, DenseDtype::f32);
  EXPECT_EQ(parse_cache_config("q8_0:hadamard=1").options.at("hadamard"), "1");
  EXPECT_THROW(parse_cache_config("turboquant:bitz=3"), Error);
  EXPECT_THROW(parse_cache_config("turboquant:bits=three"), Error);
  EXPECT_THROW(parse_cache_config("dense:dtype=f8"), Error);
  EXPECT_THROW(parse_cache_config("turboquant:window"), Error);
  EXPECT_THROW(parse_cache_config(":bits=3"), Error);
}


TEST(CacheCli, BenchSavesAFileThatInfoDescribes) {
  const std::string tool = TURBOKV_TOOL_PATH;
  if (tool.empty() || !std::filesystem::exists(tool)) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("turbokv_test_cli_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  const auto saved = run_command(tool + " cache-bench --head-dim 64 --kv-heads 2 --tokens 300 "
                                        "--key-bits 3 --value-bits 3 --reps 1 --json --save " + path + " 2>&1");
  ASSERT_EQ(saved.status, 0) << saved.text;
  const auto bench = nlohmann::json::parse(saved.text);
  std::vector<std::string> keys;
  for (const auto& [k, v] : bench.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"append_tokens_per_s", "bytes_per_token",
                                            "compression_vs_fp16", "fetch_tokens_per_s",
                                            "fp16_bytes_per_token", "head_dim", "key_bits",
                                            "kv_heads", "load_ms", "save_ms", "tokens",
                                            "value_bits"}));
  EXPECT_EQ(bench["bytes_per_token"].get<double>(), 2 * (26 + 26));  // 64 dims at 3 bits + norm
  EXPECT_EQ(bench["fp16_bytes_per_token"].get<double>(), 2 * 64 * 2 * 2);
  EXPECT_NEAR(bench["compression_vs_fp16"].get<double>(), 512.0 / 104, 1e-9);

  const auto described = run_command(tool + " cache-info --json " + path + " 2>&1");
  ASSERT_EQ(described.status, 0) << described.text;
  const auto info = nlohmann::json::parse(described.text);
  EXPECT_EQ(info["n_layers"], 1);
  EXPECT_EQ(info["tokens"], 300);
  EXPECT_EQ(info["layers"][0]["class"], "turboquant");
  EXPECT_EQ(info["layers"][0]["metadata"]["key_bits"], "3");
  EXPECT_EQ(info["nbytes"], 300 * 104);
  const auto text = run_command(tool + " cache-info " + path + " 2>&1");
  EXPECT_EQ(text.status, 0) << text.text;
  EXPECT_NE(text.text.find("turboquant"), std::string::npos) << text.text;

  // A truncated copy: non-zero exit with the error's message.
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 10);
  const auto truncated = run_command(tool + " cache-info " + path + " 2>&1");
  EXPECT_EQ(truncated.status, 1);
  EXPECT_NE(truncated.text.find("out of range"), std::string::npos) << truncated.text;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace turbokv
