// Phi-3's LongRoPE and partial rotary, on random-weight phi3 GGUFs written as llama.cpp's
// converter writes them (rope_factors_long/short tensors, rope.scaling.original_context_length,
// rope.scaling.attn_factor, rope.dimension_count below the head size): the engine against the
// float64 oracle of tests/forward_reference.hpp with each factor set, the oracle telling apart a
// model that ignores the factors, takes the other set, drops the magnitude or rotates every
// coordinate; the choice by context and its checks; bad factor tensors refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <system_error>
#include <vector>


#include "engine/eval/evaluate.hpp"
#include "engine/model/gguf.hpp"
#include "engine/model/model.hpp"
#include "forward_reference.hpp"
#include "turbokv/cache_config.hpp"
#include "test_util.hpp"
#include "turbokv/error.hpp"

using namespace turbokv::engine;
namespace fs = std::filesystem;

namespace {

constexpr int kDim = 64, kHidden = 96, kLayers = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kVocab = 64;
constexpr int kContext = 512, kOriginal = 128;

fs::path temp_dir() { return turbokv::test::scratch_dir("test_longrope"); }

// What a test writes into the file; the defaults are a valid Phi-3.5-style file.
struct Phi3File {
  int rope_dims = kHeadDim;        // rope.dimension_count (< head_dim: Phi-4-mini's partial rotary)
  int long_count = -1, short_count = -1;  // factor tensor lengths (-1: rope_dims / 2; 0: no tensor)
  float bad_value = 1.0f;          // written into rope_factors_long[1] when != 1
  bool with_original = true;       // rope.scaling.original_context_length
};

void add_f32(GgufWriter& w, const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(float));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  w.add_tensor(name, GgmlType::F32, shape, std::move(bytes));
}

// LongRoPE's magnitude as llama.cpp's converter computes it: sqrt(1 + ln(scale) / ln(original)).
float longrope_attn_factor() {
  const double scale = static_cast<double>(kContext) / kOriginal;
  return static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(kOriginal))));
}

// Long factors in [2, 6], short in [1, 1.5] (as Phi-3.5's: long ones well above 1), so every
// rotary pair's angle differs between the sets.
std::vector<float> factors(int n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& f : out) f = u(rng);
  return out;
}

std::string write_phi3(const Phi3File& f, const std::string& name) {
  GgufWriter w;
  w.set_string("general.architecture", "phi3");
  w.set_uint32("phi3.context_length", kContext);
  w.set_uint32("phi3.embedding_length", kDim);
  w.set_uint32("phi3.feed_forward_length", kHidden);
  w.set_uint32("phi3.block_count", kLayers);
  w.set_uint32("phi3.attention.head_count", kHeads);
  w.set_uint32("phi3.attention.head_count_kv", kKvHeads);
  w.set_float32("phi3.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_uint32("phi3.rope.dimension_count", static_cast<uint32_t>(f.rope_dims));
  w.set_float32("phi3.rope.freq_base", 10000.0f);
  w.set_uint32("phi3.attention.sliding_window", 0);  // Phi-4's "none"
  if (f.with_original) w.set_uint32("phi3.rope.scaling.original_context_length", kOriginal);
  w.set_float32("phi3.rope.scaling.attn_factor", longrope_attn_factor());
  std::mt19937 rng(27);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto tensor = [&](const std::string& tname, int rows, int cols, float mean, float scale) {
    std::vector<float> v(static_cast<size_t>(rows) * cols);
    for (float& x : v) x = mean + scale * normal(rng);
    add_f32(w, tname, rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{cols, rows}, v);
  };
  const float ws = 1.0f / std::sqrt(static_cast<float>(kDim));
  tensor("token_embd.weight", kVocab, kDim, 0.0f, 1.0f);
  tensor("output_norm.weight", 1, kDim, 1.0f, 0.1f);
  tensor("output.weight", kVocab, kDim, 0.0f, ws);
  const int half = f.rope_dims / 2;
  if (f.long_count != 0) {
    auto long_set = factors(f.long_count < 0 ? half : f.long_count, 2.0f, 6.0f, 1);
    if (f.bad_value != 1.0f) long_set[1] = f.bad_value;
    add_f32(w, "rope_factors_long.weight", {static_cast<int64_t>(long_set.size())}, long_set);
  }
  if (f.short_count != 0) {
    const auto short_set = factors(f.short_count < 0 ? half : f.short_count, 1.0f, 1.5f, 2);
    add_f32(w, "rope_factors_short.weight", {static_cast<int64_t>(short_set.size())}, short_set);
  }
  const int qkv = (kHeads + 2 * kKvHeads) * kHeadDim;
  for (int l = 0; l < kLayers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    tensor(b + "attn_norm.weight", 1, kDim, 1.0f, 0.1f);
    tensor(b + "attn_qkv.weight", qkv, kDim, 0.0f, ws);
    tensor(b + "attn_output.weight", kDim, kHeads * kHeadDim, 0.0f, 1.0f / std::sqrt(float{kHeads * kHeadDim}));
    tensor(b + "ffn_norm.weight", 1, kDim, 1.0f, 0.1f);
    tensor(b + "ffn_up.weight", 2 * kHidden, kDim, 0.0f, ws);  // gate rows, then up rows
    tensor(b + "ffn_down.weight", kDim, kHidden, 0.0f, 1.0f / std::sqrt(float{kHidden}));
  }
  const std::string path = (temp_dir() / name).string();
  w.write(path);
  return path;
}

std::vector<int> random_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> tokens(static_cast<size_t>(n));
  for (int& t : tokens) t = static_cast<int>(rng() % kVocab);
  return tokens;
}

// Largest logit error of `m` against the oracle run on `reference`, relative to the logits' scale
// (prefill in chunks of 7, then decode steps).
double error_against(const Model& m, const Model& reference) {
  return turbokv::test::max_relative_error(m, random_tokens(48, 5), 7, 2, &reference);
}

std::string load_error(const Phi3File& f, const std::string& name) {
  try {
    load_model(write_phi3(f, name));
  } catch (const turbokv::Error& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST(LongRope, Phi3FactorsLoadAsWrittenAndTheTrainedContextTakesTheLongSet) {
  const Model m = load_model(write_phi3({}, "phi35.gguf"));
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.rope_factors_long, factors(kHeadDim / 2, 2.0f, 6.0f, 1));
  EXPECT_EQ(c.rope_factors_short, factors(kHeadDim / 2, 1.0f, 1.5f, 2));
  EXPECT_EQ(c.rope_original_context, kOriginal);
  EXPECT_FLOAT_EQ(c.rope_attn_factor, longrope_attn_factor());
  EXPECT_EQ(c.rotary_dims(), kHeadDim);
  EXPECT_EQ(c.sliding_window, 0);
  // load_model prepares the model for its trained context, 512 > 128: the long set.
  EXPECT_EQ(c.rope_freq_factors, c.rope_factors_long);
  // Without original_context_length the trained context is the original one (llama.cpp).
  Phi3File no_original;
  no_original.with_original = false;
  EXPECT_EQ(load_model(write_phi3(no_original, "no-original.gguf")).config.rope_original_context, kContext);
}

TEST(LongRope, ChoiceByContextFollowsLlamaCpp) {
  Model m = load_model(write_phi3({}, "choice.gguf"));
  ModelConfig& c = m.config;
  // llama.cpp: long when n_ctx_seq > n_ctx_orig_yarn, so exactly the original context is short.
  EXPECT_NE(select_rope_factors(c, kOriginal).find("short factors"), std::string::npos);
  EXPECT_EQ(c.rope_freq_factors, c.rope_factors_short);
  EXPECT_NO_THROW(check_rope_factors_for(c, 64, "test"));
  EXPECT_THROW(check_rope_factors_for(c, kOriginal + 1, "test"), turbokv::Error);
  EXPECT_NE(select_rope_factors(c, kOriginal + 1).find("long factors"), std::string::npos);
  EXPECT_EQ(c.rope_freq_factors, c.rope_factors_long);
  EXPECT_THROW(check_rope_factors_for(c, kOriginal, "test"), turbokv::Error);
  // A model without LongRoPE: nothing chosen, nothing logged, every context fine.
  ModelConfig plain = c;
  plain.rope_factors_long.clear();
  plain.rope_factors_short.clear();
  plain.rope_freq_factors.clear();
  EXPECT_EQ(select_rope_factors(plain, 100000), "");
  EXPECT_TRUE(plain.rope_freq_factors.empty());
  EXPECT_NO_THROW(check_rope_factors_for(plain, 1, "test"));
}

TEST(LongRope, EvalRefusesAModelPreparedForAnotherContext) {
  const Model m = load_model(write_phi3({}, "eval.gguf"));  // the long set (context 512)
  EvalOptions options;
  options.ctx = 64;  // a window that takes the short set
  const auto specs = turbokv::parse_kv_config_list("dense16");
  turbokv::ThreadPool pool(1);
  const auto tokens = random_tokens(200, 3);
  try {
    evaluate_kv_configs(m, tokens, specs, options, pool);
    ADD_FAILURE() << "eval ran a window of 64 with the long factors";
  } catch (const turbokv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("LongRoPE"), std::string::npos) << e.what();
  }
}

TEST(LongRope, EachFactorSetMatchesTheReference) {
  Model m = load_model(write_phi3({}, "match.gguf"));
  for (const int context : {kContext, kOriginal}) {
    select_rope_factors(m.config, context);
    EXPECT_LT(turbokv::test::max_relative_error(m, random_tokens(48, 5), 7, 2), 2e-5) << "context " << context;
  }
}

TEST(LongRope, IgnoredFactorsWrongSetMissingMagnitudeOrFullRotationFailTheReference) {
  Model reference = load_model(write_phi3({}, "wrong.gguf"));  // long set chosen
  Model wrong = reference;
  select_rope_factors(wrong.config, kOriginal);  // the short set instead
  EXPECT_GT(error_against(wrong, reference), 1e-3) << "wrong set";
  wrong = reference;
  wrong.config.rope_freq_factors.clear();  // factors ignored
  EXPECT_GT(error_against(wrong, reference), 1e-3) << "no factors";
  wrong = reference;
  wrong.config.rope_attn_factor = 1.0f;  // magnitude ignored
  EXPECT_GT(error_against(wrong, reference), 1e-3) << "no attention factor";

  Phi3File partial;
  partial.rope_dims = 8;  // half of each head rotates (Phi-4-mini: 96 of 128)
  const Model partial_model = load_model(write_phi3(partial, "partial.gguf"));
  EXPECT_EQ(partial_model.config.rotary_dims(), 8);
  EXPECT_LT(turbokv::test::max_relative_error(partial_model, random_tokens(48, 5), 7, 2), 2e-5) << "partial";
  Model full = partial_model;  // every coordinate rotated, the 4 factors stretched over 8 pairs
  full.config.rope_dims = 0;
  full.config.rope_freq_factors.resize(kHeadDim / 2, 1.0f);
  full.config.rope_factors_long.clear();
  full.config.rope_factors_short.clear();
  EXPECT_GT(error_against(full, partial_model), 1e-3) << "partial rotary ignored";
}

TEST(LongRope, BadFactorTensorsAreRefusedByName) {
  Phi3File f;
  f.long_count = 5;  // rope_dims / 2 = 8 expected
  EXPECT_NE(load_error(f, "long-length.gguf").find("rope_factors_long.weight should be a vector of 8"), std::string::npos)
      << load_error(f, "long-length.gguf");
  f = {};
  f.short_count = 16;
  EXPECT_NE(load_error(f, "short-length.gguf").find("rope_factors_short.weight should be a vector of 8"), std::string::npos);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), 0.0f, -2.0f, std::numeric_limits<float>::infinity()}) {
    f = {};
    f.bad_value = bad;
    const std::string e = load_error(f, "bad-value.gguf");
    EXPECT_NE(e.find("rope_factors_long.weight[1]"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("finite and > 0"), std::string::npos) << bad << ": " << e;
  }
  f = {};
  f.short_count = 0;  // only the long set
  EXPECT_NE(load_error(f, "long-only.gguf").find("needs both"), std::string::npos);
  f = {};
  f.rope_dims = 7;
  EXPECT_NE(load_error(f, "odd-dims.gguf").find("rope.dimension_count 7 is odd"), std::string::npos)
      << load_error(f, "odd-dims.gguf");
  f = {};
  f.rope_dims = 18;  // more than the head size
  EXPECT_NE(load_error(f, "wide-dims.gguf").find("rope.dimension_count"), std::string::npos);
}
