// Quantized GGUF models end to end: kjv-llama-3M converted to every quantized type the engine
// reads, loaded, and run through Forward (batched prefill and single-token decode); its logits
// must match the float64 reference (forward_reference.hpp) computed from the same weights
// dequantized to float. With float activations that is float rounding only; with the default
// Q8_0 activations (AVX2) it is bounded by the activation rounding.
#include <gtest/gtest.h>

#include "skip_policy.hpp"

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/model/gguf.hpp"
#include "engine/model/gguf_convert.hpp"
#include "engine/model/model.hpp"
#include "engine/tensor/tensor_types.hpp"
#include "forward_reference.hpp"

namespace turbokv::engine {
namespace {

const std::string kModels = TURBOKV_MODELS_DIR;
const std::string kCheckpoint = kModels + "/kjv-llama-3M.bin";
const std::string kTokenizer = kModels + "/tok512.bin";

// A copy of m with every matrix decoded to F32: the weights the quantized model really uses.
struct FloatCopy {
  Model model;
  std::vector<std::vector<float>> store;
};

WeightMatrix to_float(const WeightMatrix& w, std::vector<std::vector<float>>& store) {
  auto& v = store.emplace_back(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) dequantize_row(w, r, v.data() + r * w.cols);
  return WeightMatrix{GgmlType::F32, w.rows, w.cols, v.data()};
}

FloatCopy dequantized(const Model& m) {
  FloatCopy f;
  f.store.reserve(2 + 7 * m.layers.size());  // views point into store: no reallocation
  f.model.config = m.config;
  f.model.final_norm = m.final_norm;
  f.model.token_embedding = to_float(m.token_embedding, f.store);
  f.model.output = m.config.tied_embeddings ? f.model.token_embedding : to_float(m.output, f.store);
  for (const LayerWeights& w : m.layers) {
    LayerWeights c = w;
    for (WeightMatrix* mat : {&c.wq, &c.wk, &c.wv, &c.wo, &c.w_gate, &c.w_down, &c.w_up}) {
      *mat = to_float(*mat, f.store);
    }
    f.model.layers.push_back(std::move(c));
  }
  f.model.validate();
  return f;
}

std::vector<int> some_tokens(int n, int vocab) {
  std::vector<int> t{1};  // BOS
  for (int i = 1; i < n; ++i) t.push_back((i * 37 + 11) % vocab);
  return t;
}

class QuantForward : public testing::TestWithParam<std::string> {};

TEST_P(QuantForward, KjvLogitsMatchTheDequantizedReference) {
  if (!std::filesystem::exists(kCheckpoint) || !std::filesystem::exists(kTokenizer)) {
    TURBOKV_SKIP_MISSING() << "kjv-llama-3M.bin / tok512.bin not in " << kModels;
  }
  const std::string path = testing::TempDir() + "turbokv_test_quant_forward_" + GetParam() + ".gguf";
  ConvertOptions options;
  options.type = parse_weight_type(GetParam());
  options.tokenizer_path = kTokenizer;
  const ConvertSummary summary = convert_llama2c_to_gguf(kCheckpoint, path, options);
  // kjv: dim 256, hidden 704: only the four ffn_down matrices (rows of 704) miss 256-value blocks.
  EXPECT_EQ(summary.n_fallback, block_size(options.type) == 256 ? 4 : 0);

  const Model q = load_gguf(path);
  EXPECT_EQ(q.layers[0].wq.type, options.type);
  EXPECT_EQ(q.token_embedding.type, options.type);
  const FloatCopy f = dequantized(q);
  const auto tokens = some_tokens(12, q.config.vocab_size);

  const bool q8_was = q8_activations();
  set_q8_activations(false);
  const double exact = test::max_relative_error(q, tokens, 4, 2, &f.model);
  const Model original = load_llama2c(kCheckpoint);
  const double vs_original = test::max_relative_error(q, tokens, 4, 2, &original);
  RecordProperty("relative_error_vs_f32_model", std::to_string(vs_original));
  set_q8_activations(true);
  const double with_q8 = test::max_relative_error(q, tokens, 5, 2, &f.model);
  set_q8_activations(q8_was);
  RecordProperty("relative_error_float_activations", std::to_string(exact));
  RecordProperty("relative_error_q8_activations", std::to_string(with_q8));
  // Float activations: the engine multiplies the same weights in float instead of double
  // (measured ~1e-6 for every type; test_forward's bound for float models).
  EXPECT_LT(exact, 2e-5) << GetParam();
  // Q8_0 activations (decode steps on AVX2) round x to 8 bits per block of 32 before every
  // matrix. Measured 0.5% to 1.1% of the logits' scale over these types; a wrongly decoded
  // sub-block (sign, scale or bit order) moves logits by their own order, far above 3%.
  EXPECT_LT(with_q8, 3e-2) << GetParam();
  // And the encoders keep the model: largest logit error against the original float model,
  // relative to the logits' scale. Measured (float activations, these 12 tokens): q8_0 0.008;
  // q6_k 0.03; q5_1 0.05, q5_0 0.07, q5_k 0.07; q4_k 0.13, iq4_nl 0.13, iq4_xs 0.14, q4_0 0.17,
  // q4_1 0.18; q3_k 0.24; q2_k 0.41. The bounds are about 1.5x those per group of bit widths; an
  // encoder that packs a field wrongly gives errors of order 1.
  const double bits =
      8.0 * static_cast<double>(block_bytes(options.type)) / static_cast<double>(block_size(options.type));
  const double bound = bits > 8 ? 0.015 : bits > 5.4 ? 0.12 : bits > 4 ? 0.28 : bits > 3 ? 0.36 : 0.6;
  EXPECT_LT(vs_original, bound) << GetParam() << " at " << bits << " bits per weight";
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Types, QuantForward,
                         testing::Values("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k", "q4_k",
                                         "q5_k", "q6_k", "iq4_xs"));

}  // namespace
}  // namespace turbokv::engine
