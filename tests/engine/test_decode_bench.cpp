// Random-weight models with real shapes (engine/model/synthetic_model.hpp) and the decode benchmark
// (engine/eval/evaluate_decode.hpp) on a tiny shape: shapes and byte counts of the named models,
// determinism, weight statistics, finite forward passes, and the benchmark's rows, KV bytes
// and JSON. Speed itself is measured by running the benchmark, not asserted here.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <set>

#include "engine/eval/evaluate_decode.hpp"
#include "engine/runtime/forward.hpp"
#include "engine/model/synthetic_model.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"

using namespace turbokv;
using namespace turbokv::engine;

namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.dim = 64;
  c.hidden_dim = 128;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 32;
  c.vocab_size = 256;
  c.seq_len = 1024;
  return c;
}

}  // namespace

TEST(SyntheticModel, NamedShapesAreTheRealOnes) {
  const ModelConfig l1 = synthetic_model_config("llama-3.2-1b");
  EXPECT_EQ(l1.dim, 2048);
  EXPECT_EQ(l1.n_layers, 16);
  EXPECT_EQ(l1.n_kv_heads, 8);
  EXPECT_EQ(l1.head_dim, 64);
  EXPECT_EQ(l1.vocab_size, 128256);
  EXPECT_TRUE(l1.tied_embeddings);
  EXPECT_EQ(l1.rope_freq_factors.size(), 32u);
  // 1.236e9 parameters at 34 bytes per 32: ~1.31 GB.
  const double q8 = static_cast<double>(synthetic_weight_bytes(l1, GgmlType::Q8_0));
  EXPECT_GT(q8, 1.30e9);
  EXPECT_LT(q8, 1.33e9);
  EXPECT_NEAR(static_cast<double>(synthetic_weight_bytes(l1, GgmlType::F32)) / q8, 4.0 * 32 / 34, 1e-9);

  const ModelConfig l8 = synthetic_model_config("llama-3.1-8b");
  EXPECT_EQ(l8.head_dim, 128);
  EXPECT_EQ(l8.n_layers, 32);
  EXPECT_FALSE(l8.tied_embeddings);
  const double p8 = static_cast<double>(synthetic_weight_bytes(l8, GgmlType::F16)) / 2;
  EXPECT_NEAR(p8, 8.03e9, 0.02e9);  // Llama 3.1 8B: 8.03 billion parameters

  const ModelConfig q3 = synthetic_model_config("qwen3-0.6b");
  EXPECT_EQ(q3.arch, "qwen3");
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_TRUE(q3.rope_neox);
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_NE(q3.q_dim(), q3.dim);  // 16 heads x 128 = 2048 != 1024
  for (const char* name : {"gemma3-1b", "gemma3-4b"}) {
    const ModelConfig g = synthetic_model_config(name);
    EXPECT_EQ(g.arch, "gemma3");
    EXPECT_EQ(g.head_dim, 256);
    EXPECT_TRUE(g.post_norms && g.gelu_ffn && g.qk_norm && g.tied_embeddings);
    int sliding = 0;
    for (int l = 0; l < g.n_layers; ++l) sliding += g.layer_slides(l);
    EXPECT_EQ(sliding, g.n_layers - g.n_layers / 6) << name;  // 5 local to 1 global
  }
  // Gemma 3 1B: 1.00 billion parameters; 4B: 3.88 billion in its language model.
  EXPECT_NEAR(synthetic_weight_bytes(synthetic_model_config("gemma3-1b"), GgmlType::F16) / 2.0, 1.000e9, 0.01e9);
  EXPECT_NEAR(synthetic_weight_bytes(synthetic_model_config("gemma3-4b"), GgmlType::F16) / 2.0, 3.88e9, 0.02e9);
  // Phi-4-mini: 3.84 billion parameters, 96 of 128 coordinates rotating, 48 LongRoPE factors per set.
  const ModelConfig phi = synthetic_model_config("phi-4-mini");
  EXPECT_EQ(phi.arch, "phi3");
  EXPECT_EQ(phi.rotary_dims(), 96);
  EXPECT_EQ(phi.rope_freq_factors, phi.rope_factors_long);
  EXPECT_EQ(phi.rope_factors_short.size(), 48u);
  EXPECT_NEAR(synthetic_weight_bytes(phi, GgmlType::F16) / 2.0, 3.84e9, 0.02e9);
  EXPECT_THROW(synthetic_model_config("llama-7b"), Error);
  EXPECT_THROW(parse_synthetic_weight_type("iq2_xxs"), Error);
  EXPECT_EQ(parse_synthetic_weight_type("q5_k"), GgmlType::Q5_K);
  EXPECT_EQ(parse_synthetic_weight_type("q8_0"), GgmlType::Q8_0);
}

TEST(SyntheticModel, DeterministicWithFanInScaledWeights) {
  ThreadPool pool(2);
  // The 256-value super-block types need rows of 256: a wider shape for them.
  ModelConfig wide = tiny_config();
  wide.dim = 256;
  wide.hidden_dim = 256;
  wide.head_dim = 64;
  for (const GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                              GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
    const ModelConfig& shape = block_size(type) == 256 ? wide : tiny_config();
    const Model a = make_synthetic_model(shape, type, pool, 7);
    const Model b = make_synthetic_model(shape, type, pool, 7);
    const Model c = make_synthetic_model(shape, type, pool, 8);
    const size_t bytes = row_bytes(type, shape.dim) * static_cast<size_t>(shape.hidden_dim);
    const WeightMatrix& wa = a.layers[1].w_gate;
    EXPECT_EQ(std::memcmp(wa.data, b.layers[1].w_gate.data, bytes), 0) << type_name(type);
    EXPECT_NE(std::memcmp(wa.data, c.layers[1].w_gate.data, bytes), 0) << type_name(type);
    EXPECT_EQ(a.weight_type_summary(), type_name(type));
    // Standard deviation 1/sqrt(fan-in), mean 0. Q2_K's rounding adds to the spread: four
    // levels per sub-block, so the decoded values spread ~9% wider (measured 1.093).
    std::vector<float> row(static_cast<size_t>(shape.dim));
    double ss = 0, s = 0;
    for (int64_t r = 0; r < wa.rows; ++r) {
      dequantize_row(wa, r, row.data());
      for (const float x : row) {
        ss += static_cast<double>(x) * x;
        s += x;
      }
    }
    const double n = static_cast<double>(wa.rows * wa.cols);
    const double want = 1.0 / std::sqrt(static_cast<double>(shape.dim));
    const double tolerance = type == GgmlType::Q2_K ? 0.15 : 0.08;
    EXPECT_NEAR(std::sqrt(ss / n) / want, 1.0, tolerance) << type_name(type);
    EXPECT_NEAR(s / n / want, 0.0, 0.04) << type_name(type);
  }
  EXPECT_THROW(make_synthetic_model(tiny_config(), GgmlType::Q4_K, pool), Error);  // rows of 64 < 256
  // Refused before allocating when over the limit.
  EXPECT_THROW(make_synthetic_model(tiny_config(), GgmlType::F32, pool, 1, 1000), Error);
}

TEST(SyntheticModel, ForwardGivesFiniteLogitsForEveryArchitecture) {
  ThreadPool pool(2);
  ModelConfig qwen = tiny_config();
  qwen.arch = "qwen3";
  qwen.qk_norm = true;
  qwen.rope_neox = true;
  qwen.head_dim = 64;  // q_dim 256 != dim 64
  qwen.tied_embeddings = true;
  for (const ModelConfig& c : {tiny_config(), qwen}) {
    const Model m = make_synthetic_model(c, GgmlType::Q8_0, pool);
    std::vector<std::unique_ptr<KVCache>> caches;
    std::vector<KVCache*> layers;
    for (int l = 0; l < c.n_layers; ++l) {
      caches.push_back(std::make_unique<DenseKVCache>(c.n_kv_heads, c.head_dim));
      layers.push_back(caches.back().get());
    }
    Forward f(m, pool, 8);
    const std::vector<int> tokens = {1, 17, 200, 3, 99};
    const auto logits = f.run(tokens, layers);
    ASSERT_EQ(logits.size(), 256u);
    double ss = 0;
    for (const float x : logits) {
      ASSERT_TRUE(std::isfinite(x));
      ss += static_cast<double>(x) * x;
    }
    EXPECT_GT(ss, 0.0);
    EXPECT_EQ(layers[0]->size(), tokens.size());
  }
}

TEST(DecodeBench, RowsBytesAndJson) {
  ThreadPool pool(2);
  const Model m = make_synthetic_model(tiny_config(), GgmlType::Q8_0, pool);
  DecodeBenchOptions o;
  o.contexts = {64, 100};
  o.configs = parse_kv_config_list("dense16,tq4-plain,affine4,q8_0");  // the uniform 4-bit codec
  o.steps = 3;
  int notes = 0;
  o.progress = [&](const std::string&) { ++notes; };
  const DecodeBenchResult r = run_decode_bench(m, o, pool);
  ASSERT_EQ(r.rows.size(), 8u);
  EXPECT_GT(notes, 0);
  EXPECT_EQ(r.threads, 2);
  for (const DecodeBenchRow& row : r.rows) {
    const size_t ctx = row.context;
    if (row.config == "affine4") {  // groups of 64 do not fit a head row of 32
      EXPECT_FALSE(row.applicable);
      continue;
    }
    ASSERT_TRUE(row.applicable) << row.config;
    EXPECT_GT(row.tokens_per_s, 0.0);
    EXPECT_GT(row.ms_per_token_mean, 0.0);
    if (row.config == "dense16") {
      // Keys and values, 2 heads x 32 values x 2 bytes, 2 layers, at the context length.
      EXPECT_EQ(row.kv_bytes, ctx * 2 * 2 * 32 * 2 * 2);
      EXPECT_DOUBLE_EQ(row.speedup_vs_dense16, 1.0);
      EXPECT_DOUBLE_EQ(row.kv_bytes_vs_dense16, 1.0);
    } else if (row.config == "q8_0") {
      EXPECT_EQ(row.kv_bytes, ctx * 2 * 2 * 34 * 2);  // one 34-byte block per head row
    } else {
      EXPECT_LT(row.kv_bytes_vs_dense16, 0.4);  // 4-bit codes + a norm per row of 32
      EXPECT_GT(row.kv_bytes_vs_dense16, 0.25);
    }
    EXPECT_GT(row.speedup_vs_dense16, 0.0);
  }
  const auto j = nlohmann::json::parse(format_decode_bench_json(r));
  EXPECT_TRUE(j.at("model").is_string());
  ASSERT_EQ(j.at("rows").size(), 8u);
  const std::set<std::string> fields = {"config",   "context",            "batch",         "tokens_per_s",
                                        "step_ms",  "kv_bytes",           "speedup_vs_dense16",
                                        "step_vs_batch1"};
  for (const auto& jr : j["rows"]) {
    std::set<std::string> keys;
    for (auto it = jr.begin(); it != jr.end(); ++it) keys.insert(it.key());
    EXPECT_EQ(keys, fields);
  }
  EXPECT_TRUE(j["rows"][2]["tokens_per_s"].is_null());  // affine4 at 64
  EXPECT_EQ(j["rows"][4]["context"].get<size_t>(), 100u);
  EXPECT_NE(format_decode_bench_table(r).find("n/a"), std::string::npos);
}

// Batches of several sequences step through BatchForward: a row's bytes are its sequences'
// together, its tokens/s and per-token times follow from the step time, and the step ratios refer
// to the same configuration's batch-1 row.
TEST(DecodeBench, BatchesStepEverySequence) {
  ThreadPool pool(2);
  const Model m = make_synthetic_model(tiny_config(), GgmlType::Q8_0, pool);
  DecodeBenchOptions o;
  o.contexts = {40};
  o.batches = {1, 3};
  o.configs = parse_kv_config_list("dense16,tq4");
  o.steps = 2;
  o.warmup = 1;
  const DecodeBenchResult r = run_decode_bench(m, o, pool);
  ASSERT_EQ(r.rows.size(), 4u);
  const DecodeBenchRow* one[2] = {&r.rows[0], &r.rows[1]};
  const DecodeBenchRow* three[2] = {&r.rows[2], &r.rows[3]};
  for (int c = 0; c < 2; ++c) {
    EXPECT_EQ(one[c]->batch, 1u);
    EXPECT_EQ(three[c]->batch, 3u);
    EXPECT_EQ(one[c]->config, three[c]->config);
    EXPECT_EQ(three[c]->kv_bytes, 3 * one[c]->kv_bytes);
    EXPECT_DOUBLE_EQ(one[c]->step_vs_batch1, 1.0);
    EXPECT_NEAR(three[c]->step_vs_batch1, three[c]->step_ms_median / one[c]->step_ms_median, 1e-12);
    EXPECT_NEAR(three[c]->tokens_per_s, 3e3 / three[c]->step_ms_median, 1e-9 * three[c]->tokens_per_s);
    EXPECT_NEAR(three[c]->ms_per_token_median * 3, three[c]->step_ms_median, 1e-9);
  }
  EXPECT_DOUBLE_EQ(three[0]->speedup_vs_dense16, 1.0);  // dense16 of the same batch
  const auto j = nlohmann::json::parse(format_decode_bench_json(r));
  EXPECT_EQ(j["rows"][3]["batch"].get<size_t>(), 3u);
  EXPECT_NE(format_decode_bench_table(r).find("step/b1"), std::string::npos);

  o.batches = {0};
  EXPECT_THROW(run_decode_bench(m, o, pool), Error);
  o.batches = {};
  EXPECT_THROW(run_decode_bench(m, o, pool), Error);
}

TEST(DecodeBench, CpuTimeClockIsRecordedAndSelectable) {
  ThreadPool pool(2);
  const Model m = make_synthetic_model(tiny_config(), GgmlType::Q8_0, pool);
  DecodeBenchOptions o;
  o.contexts = {32};
  o.configs = parse_kv_config_list("dense16,tq3");
  o.steps = 3;
  o.cpu_time = true;
  const DecodeBenchResult r = run_decode_bench(m, o, pool);
  EXPECT_TRUE(r.cpu_time);
  ASSERT_EQ(r.rows.size(), 2u);
  for (const DecodeBenchRow& row : r.rows) {
    EXPECT_GT(row.cpu_ms_median, 0.0);
    EXPECT_GT(row.wall_ms_median, 0.0);
    EXPECT_DOUBLE_EQ(row.ms_per_token_median, row.cpu_ms_median);
    EXPECT_NEAR(row.tokens_per_s, 1e3 / row.cpu_ms_median, 1e-9 * row.tokens_per_s);
  }
  EXPECT_NE(format_decode_bench_table(r).find("CPU time / threads"), std::string::npos);
}

TEST(DecodeBench, BadOptionsThrow) {
  ThreadPool pool(1);
  const Model m = make_synthetic_model(tiny_config(), GgmlType::F32, pool);
  DecodeBenchOptions o;
  o.configs = parse_kv_config_list("dense16");
  EXPECT_THROW(run_decode_bench(m, o, pool), Error);  // no contexts
  o.contexts = {0};
  EXPECT_THROW(run_decode_bench(m, o, pool), Error);
  o.contexts = {16};
  o.steps = 0;
  EXPECT_THROW(run_decode_bench(m, o, pool), Error);
  o.steps = 1;
  o.configs.clear();
  EXPECT_THROW(run_decode_bench(m, o, pool), Error);
}
