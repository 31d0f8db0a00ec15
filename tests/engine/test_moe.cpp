// qwen3moe, the mixture-of-experts decoder: a random-weight GGUF written with llama.cpp's names
// and shapes (3-D expert tensors), its logits against the float64 oracle of forward_reference.hpp;
// the routing's edge cases (equal logits, k = 1, k = all experts, NaN); the batch invariance of
// the expert step and of BatchForward over it; bad metadata and missing tensors refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/model/gguf.hpp"
#include "engine/model/model.hpp"
#include "engine/model/synthetic_model.hpp"
#include "engine/runtime/batch_forward.hpp"
#include "engine/runtime/forward.hpp"
#include "engine/runtime/moe.hpp"
#include "forward_reference.hpp"
#include "random_gguf.hpp"
#include "test_util.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"

using turbokv::test::max_relative_error;
using turbokv::test::random_gguf_writer;
using turbokv::test::RandomGgufShape;
using turbokv::test::random_normal;
using turbokv::test::same_bits;
using turbokv::test::temp_path;

namespace turbokv::engine {
namespace {

// The small qwen3moe of these tests: 6 experts of 32 rows, 2 of them used, 2 layers of 4 query and
// 2 kv heads x 16, written by the tests' one writer of random GGUFs (random_gguf.hpp) with
// llama.cpp's names and shapes: blk.N.ffn_gate_inp [dim, E] (F32, as llama.cpp keeps it),
// ffn_gate_exps / ffn_up_exps [dim, ff, E], ffn_down_exps [ff, dim, E].
RandomGgufShape moe_shape() {
  RandomGgufShape s{"qwen3moe", 64, 32, 2, 4, 2, 16, false, false, GgmlType::F32};
  s.experts = 6;
  s.experts_used = 2;
  s.context = 256;
  s.keep_values = false;
  return s;
}

// Its file in weights of `type`, without the tensors `left_out`.
GgufWriter moe_writer(const RandomGgufShape& shape, GgmlType type, uint32_t seed,
                      std::vector<std::string> left_out = {}) {
  RandomGgufShape s = shape;
  s.type = type;
  s.left_out = std::move(left_out);
  return random_gguf_writer(s, seed);
}

std::string write_moe(const std::string& name, const GgufWriter& w) {
  const std::string path = temp_path(name);
  w.write(path);
  return path;
}

std::vector<int> some_tokens(int n, int vocab) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + 11) % vocab);
  return t;
}

TEST(Qwen3Moe, LoadsLlamaCppsNamesAndShapes) {
  const RandomGgufShape s = moe_shape();
  const Model m = load_gguf(write_moe("moe_load.gguf", moe_writer(s, GgmlType::Q8_0, 1)));
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.arch, "qwen3moe");
  EXPECT_EQ(c.n_experts, 6);
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.hidden_dim, 32);  // expert_feed_forward_length, not feed_forward_length
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.rope_neox);
  EXPECT_FALSE(c.qkv_bias);
  const LayerWeights& w = m.layers[1];
  EXPECT_EQ(w.router.rows, 6);
  EXPECT_EQ(w.router.type, GgmlType::F32);
  EXPECT_EQ(w.w_gate.rows, 6 * 32);
  EXPECT_EQ(w.w_down.rows, 6 * 64);
  EXPECT_EQ(w.w_down.cols, 32);
  // Expert 4's down matrix starts 4 * 64 rows into the stack.
  const WeightMatrix down4 = expert_block(w.w_down, 6, 4);
  EXPECT_EQ(down4.rows, 64);
  EXPECT_EQ(static_cast<const uint8_t*>(down4.data) - static_cast<const uint8_t*>(w.w_down.data),
            static_cast<ptrdiff_t>(4 * 64 * row_bytes(GgmlType::Q8_0, 32)));
  EXPECT_THROW(expert_block(w.w_down, 6, 6), Error);
  EXPECT_THROW(expert_block(w.w_down, 5, 0), Error);  // 384 rows are not 5 equal blocks
  EXPECT_EQ(m.weight_type_summary(), "Q8_0");
}

// Without expert_feed_forward_length llama.cpp takes feed_forward_length / expert_used_count.
TEST(Qwen3Moe, ExpertWidthFallsBackAsLlamaCpp) {
  RandomGgufShape s = moe_shape();
  s.expert_width_key = false;
  GgufWriter w = moe_writer(s, GgmlType::F32, 2);
  w.set_uint32("qwen3moe.feed_forward_length", static_cast<uint32_t>(s.hidden * s.experts_used));
  EXPECT_EQ(load_gguf(write_moe("moe_fallback.gguf", w)).config.hidden_dim, 32);
  w.set_uint32("qwen3moe.feed_forward_length", 65);
  try {
    load_gguf(write_moe("moe_fallback_odd.gguf", w));
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of expert_used_count 2"), std::string::npos) << e.what();
  }
}

TEST(Qwen3Moe, LogitsMatchTheFloat64Oracle) {
  for (const int used : {2, 1, 6}) {  // k = 1 and k = every expert too
    SCOPED_TRACE(used);
    RandomGgufShape s = moe_shape();
    s.experts_used = used;
    const Model m = load_gguf(write_moe("moe_oracle.gguf", moe_writer(s, GgmlType::F32, 3 + used)));
    for (const int chunk : {1, 4, 64}) {
      EXPECT_LT(max_relative_error(m, some_tokens(19, s.vocab), chunk, 2), 2e-5) << chunk;
    }
  }
}

TEST(Qwen3Moe, RoutingPicksTheLargestLowerIndexFirst) {
  int chosen[5];
  float weights[5];
  const float ties[5] = {1.0f, 3.0f, 3.0f, 0.0f, 3.0f};
  route_experts(ties, 5, 2, chosen, weights);
  EXPECT_EQ(chosen[0], 1);
  EXPECT_EQ(chosen[1], 2);
  EXPECT_EQ(weights[0], 0.5f);
  EXPECT_EQ(weights[1], 0.5f);
  route_experts(ties, 5, 3, chosen, weights);
  EXPECT_EQ(chosen[2], 4);
  // k = 1: the one expert takes the whole weight.
  route_experts(ties, 5, 1, chosen, weights);
  EXPECT_EQ(chosen[0], 1);
  EXPECT_EQ(weights[0], 1.0f);
  // k = every expert: all of them, largest first, weighted by the full softmax.
  const float logits[5] = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f};
  route_experts(logits, 5, 5, chosen, weights);
  const int order[5] = {2, 4, 0, 3, 1};
  double total = 0;
  for (const float l : logits) total += std::exp(static_cast<double>(l));
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(chosen[r], order[r]);
    EXPECT_NEAR(weights[r], std::exp(static_cast<double>(logits[order[r]])) / total, 1e-7);
  }
  // Renormalised: the chosen two of the five weigh in proportion to their softmax, summing to 1.
  route_experts(logits, 5, 2, chosen, weights);
  EXPECT_NEAR(weights[0] + weights[1], 1.0, 1e-7);
  EXPECT_NEAR(weights[0] / weights[1], std::exp(0.5), 1e-6);
  // A NaN logit ranks below every number.
  const float with_nan[4] = {NAN, -5.0f, 1.0f, NAN};
  route_experts(with_nan, 4, 2, chosen, weights);
  EXPECT_EQ(chosen[0], 2);
  EXPECT_EQ(chosen[1], 1);
  EXPECT_THROW(route_experts(logits, 5, 0, chosen, weights), Error);
  EXPECT_THROW(route_experts(logits, 5, 6, chosen, weights), Error);
}

// Row by row (the server's products), a row's expert mixture has the same bits alone as among
// any other rows, although the step groups rows by expert and multiplies each group at once.
TEST(Qwen3Moe, ExpertStepIsBatchInvariant) {
  RandomGgufShape s = moe_shape();
  s.experts = 8;
  s.experts_used = 3;
  for (const GgmlType type : {GgmlType::Q8_0, GgmlType::F32}) {
    SCOPED_TRACE(type_name(type));
    const Model m = load_gguf(write_moe("moe_invariance.gguf", moe_writer(s, type, 7)));
    ThreadPool pool(2);
    ExpertStep step(m.config, WeightProducts::row_by_row);
    const size_t rows = 23, dim = static_cast<size_t>(s.dim);
    const auto x = random_normal(rows * dim, 11);
    std::vector<float> all(rows * dim);
    step.run(m.layers[0], x.data(), rows, all.data(), pool);
    std::set<int> experts_hit;
    for (size_t r = 0; r < rows; ++r) {
      std::vector<float> alone(dim);
      step.run(m.layers[0], x.data() + r * dim, 1, alone.data(), pool);
      EXPECT_TRUE(same_bits(alone, std::span<const float>(all.data() + r * dim, dim))) << "row " << r;
    }
    // A different mix: rows 5..9 in reverse, row 7 among them; in place (out = in).
    std::vector<float> mix;
    for (size_t r = 10; r-- > 5;) mix.insert(mix.end(), x.begin() + r * dim, x.begin() + (r + 1) * dim);
    step.run(m.layers[0], mix.data(), 5, mix.data(), pool);
    for (size_t i = 0; i < 5; ++i) {
      const size_t r = 9 - i;
      EXPECT_TRUE(same_bits(std::span<const float>(mix.data() + i * dim, dim),
                            std::span<const float>(all.data() + r * dim, dim))) << "row " << r;
    }
    // And it is the mixture: against the float64 oracle (F32 weights compare closely).
    if (type == GgmlType::F32) {
      for (size_t r = 0; r < rows; ++r) {
        const turbokv::test::Vec h(x.begin() + r * dim, x.begin() + (r + 1) * dim);
        const auto want = turbokv::test::moe_ref(m.config, m.layers[0], h);
        double worst = 0, scale = 0;
        for (size_t i = 0; i < dim; ++i) {
          worst = std::max(worst, std::abs(all[r * dim + i] - want[i]));
          scale = std::max(scale, std::abs(want[i]));
        }
        EXPECT_LT(worst / scale, 1e-5) << "row " << r;
      }
    }
  }
}

// The whole decoder through BatchForward: a sequence's logits have the same bits whether it runs
// alone or shares its steps with others (prefill and decode rows mixed).
TEST(Qwen3Moe, BatchForwardOutputDoesNotDependOnTheBatch) {
  RandomGgufShape s = moe_shape();
  s.experts = 8;
  s.experts_used = 2;
  const Model m = load_gguf(write_moe("moe_batch.gguf", moe_writer(s, GgmlType::Q8_0, 9)));
  ThreadPool pool(2);
  BatchForward forward(m, pool);
  struct Seq {
    std::vector<std::unique_ptr<DenseKVCache>> caches;
    std::vector<KVCache*> ptrs;
  };
  auto fresh = [&] {
    Seq q;
    for (int l = 0; l < m.config.n_layers; ++l) {
      q.caches.push_back(std::make_unique<DenseKVCache>(m.config.n_kv_heads, m.config.head_dim, DenseDtype::f32));
      q.ptrs.push_back(q.caches.back().get());
    }
    return q;
  };
  const std::vector<int> a = some_tokens(9, s.vocab), b = {3, 50, 7, 1, 88, 20, 64}, c = {5, 6};
  // Three steps: a's prompt, then two decode tokens; alone, then with b and c alongside.
  const std::vector<std::vector<int>> a_steps = {a, {12}, {40}};
  std::vector<std::vector<float>> alone, together;
  Seq sa = fresh();
  for (const auto& toks : a_steps) {
    const BatchEntry e{toks, sa.ptrs, true};
    forward.run(std::span<const BatchEntry>(&e, 1));
    alone.emplace_back(forward.logits(0).begin(), forward.logits(0).end());
  }
  Seq sa2 = fresh(), sb = fresh(), sc = fresh();
  const std::vector<std::vector<int>> b_steps = {{b[0]}, std::vector<int>(b.begin() + 1, b.end()), {9}};
  for (size_t step = 0; step < a_steps.size(); ++step) {
    const std::vector<BatchEntry> entries = {{b_steps[step], sb.ptrs, true}, {a_steps[step], sa2.ptrs, true},
                                             {c, sc.ptrs, false}};
    forward.run(entries);
    together.emplace_back(forward.logits(1).begin(), forward.logits(1).end());
    sc = fresh();  // c is a new prompt each step
  }
  for (size_t step = 0; step < a_steps.size(); ++step) EXPECT_TRUE(same_bits(alone[step], together[step])) << step;
}

void expect_load_error(const std::string& name, const GgufWriter& w, const std::string& needle) {
  const std::string path = write_moe(name, w);
  try {
    load_gguf(path);
    ADD_FAILURE() << "loaded: " << name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Qwen3Moe, BadMetadataAndMissingTensorsAreNamed) {
  const RandomGgufShape s = moe_shape();
  GgufWriter too_many = moe_writer(s, GgmlType::F32, 4);
  too_many.set_uint32("qwen3moe.expert_used_count", 7);  // of 6
  expect_load_error("moe_k.gguf", too_many, "expert_used_count = 7 outside [1, 6]");
  GgufWriter none_used = moe_writer(s, GgmlType::F32, 4);
  none_used.set_uint32("qwen3moe.expert_used_count", 0);
  expect_load_error("moe_k0.gguf", none_used, "expert_used_count = 0");
  GgufWriter no_experts = moe_writer(s, GgmlType::F32, 4);
  no_experts.set_uint32("qwen3moe.expert_count", 0);
  expect_load_error("moe_e0.gguf", no_experts, "expert_count = 0");
  // A different expert count than the tensors hold: the shape error names the tensor.
  GgufWriter more = moe_writer(s, GgmlType::F32, 4);
  more.set_uint32("qwen3moe.expert_count", 7);
  expect_load_error("moe_e7.gguf", more, "blk.0.ffn_gate_inp.weight has shape [64, 6], expected [64, 7]");
  GgufWriter wide = moe_writer(s, GgmlType::F32, 4);
  wide.set_uint32("qwen3moe.expert_feed_forward_length", 64);
  expect_load_error("moe_ff.gguf", wide, "blk.0.ffn_gate_exps.weight has shape [64, 32, 6], expected [64, 64, 6]");
  expect_load_error("moe_missing.gguf", moe_writer(s, GgmlType::F32, 4, {"blk.1.ffn_down_exps.weight"}),
                    "tensor blk.1.ffn_down_exps.weight is missing");
  expect_load_error("moe_router.gguf", moe_writer(s, GgmlType::F32, 4, {"blk.0.ffn_gate_inp.weight"}),
                    "tensor blk.0.ffn_gate_inp.weight is missing");
  // No expert_count at all.
  GgufWriter w;
  w.set_string("general.architecture", "qwen3moe");
  expect_load_error("moe_nokey.gguf", w, "qwen3moe.");
  // A dense config cannot claim experts, nor qwen3moe go without.
  ModelConfig c;
  c.dim = 8;
  c.hidden_dim = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.vocab_size = 10;
  c.seq_len = 16;
  c.n_experts = 4;
  c.n_experts_used = 2;
  EXPECT_THROW(c.validate(), Error);  // llama with experts
  c.arch = "qwen3moe";
  EXPECT_NO_THROW(c.validate());
  c.n_experts_used = 5;
  EXPECT_THROW(c.validate(), Error);
  c.n_experts = 0;
  c.n_experts_used = 0;
  EXPECT_THROW(c.validate(), Error);
}

TEST(Qwen3Moe, SyntheticShapeIsQwen3_30B_A3B) {
  ModelConfig c = synthetic_model_config("qwen3-30b-a3b-16e");
  EXPECT_EQ(c.arch, "qwen3moe");
  EXPECT_EQ(c.n_experts, 16);
  EXPECT_EQ(c.n_experts_used, 8);
  EXPECT_EQ(c.hidden_dim, 768);
  // With all 128 experts the shape is the published 30.5 billion parameters (F16: 2 bytes each;
  // the F32 router counts double, 25 million).
  c.n_experts = 128;
  EXPECT_NEAR(static_cast<double>(synthetic_weight_bytes(c, GgmlType::F16)) / 2, 30.53e9, 0.1e9);
  // A reduced copy builds and runs: finite logits from a one-token step.
  ModelConfig tiny = synthetic_model_config("qwen3-30b-a3b-16e");
  tiny.n_layers = 2;
  tiny.vocab_size = 512;
  tiny.dim = 256;
  tiny.n_heads = 4;
  tiny.n_kv_heads = 2;
  tiny.head_dim = 64;
  tiny.hidden_dim = 64;
  tiny.bos_id = 1;
  tiny.eos_id = 2;
  ThreadPool pool(2);
  const Model m = make_synthetic_model(tiny, GgmlType::Q8_0, pool, 3);
  EXPECT_EQ(m.layers[0].router.type, GgmlType::F32);
  Forward forward(m, pool, 16);
  std::vector<std::unique_ptr<DenseKVCache>> caches;
  std::vector<KVCache*> ptrs;
  for (int l = 0; l < tiny.n_layers; ++l) {
    caches.push_back(std::make_unique<DenseKVCache>(tiny.n_kv_heads, tiny.head_dim, DenseDtype::f32));
    ptrs.push_back(caches.back().get());
  }
  const int token = 5;
  const auto logits = forward.run(std::span<const int>(&token, 1), ptrs);
  for (const float l : logits) ASSERT_TRUE(std::isfinite(l));
}

}  // namespace
}  // namespace turbokv::engine
