// GGUF models in the engine: stories260K converted to GGUF gives the llama2.c checkpoint's
// greedy tokens (F32 exactly; F16 / Q8_0 agreement reported), and random-weight GGUF files
// with Llama 3 and Qwen 2 / Qwen 3 shapes (written here with GgufWriter) load with the right
// config, map every tensor to the right bytes, and generate through dense and 4-bit caches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <vector>


#include <nlohmann/json.hpp>

#include "engine/eval/evaluate.hpp"
#include "engine/tokenizer/bpe_tokenizer.hpp"
#include "forward_reference.hpp"
#include "random_gguf.hpp"
#include "skip_policy.hpp"
#include "engine/model/gguf.hpp"
#include "engine/model/gguf_convert.hpp"
#include "engine/model/model.hpp"
#include "engine/runtime/sampler.hpp"
#include "engine/runtime/session.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "test_util.hpp"
#include "turbokv/error.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/prompt_cache.hpp"
#include "turbokv/turboquant_cache.hpp"
#include "engine/runtime/forward.hpp"

using namespace turbokv::engine;
namespace fs = std::filesystem;

namespace {

const std::string kModels = TURBOKV_MODELS_DIR;

fs::path temp_dir() { return turbokv::test::scratch_dir("test_generate_gguf"); }

turbokv::PromptCache make_cache(const ModelConfig& c, const std::string& spec) {
  return turbokv::make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, turbokv::parse_cache_config(spec));
}

// Prompt + greedy continuation (n tokens at most).
std::vector<int> greedy_sequence(const Model& m, const Tokenizer& tok, const std::string& prompt, int n,
                                 const std::string& cache = "dense") {
  turbokv::ThreadPool pool(2);
  Session s(m, make_cache(m.config, cache), pool);
  auto seq = tok.encode(prompt, true);
  s.feed(seq);
  Sampler greedy(SamplerOptions{0.0f, 1.0f, 0});
  const auto out = s.generate(n, greedy, [&](int id) { return tok.is_end_of_generation(id); });
  seq.insert(seq.end(), out.begin(), out.end());
  return seq;
}

// Teacher-forced top-1 agreement of two models over `tokens`.
double top1_agreement(const Model& a, const Model& b, const std::vector<int>& tokens) {
  turbokv::ThreadPool pool(2);
  Session sa(a, make_cache(a.config, "dense"), pool), sb(b, make_cache(b.config, "dense"), pool);
  int same = 0;
  for (const int t : tokens) {
    same += argmax(sa.feed(std::span<const int>(&t, 1))) == argmax(sb.feed(std::span<const int>(&t, 1)));
  }
  return static_cast<double>(same) / static_cast<double>(tokens.size());
}

// ---- random-weight GGUF models (tests/random_gguf.hpp) ----------------------------------------

using Shape = turbokv::test::RandomGgufShape;
using Written = turbokv::test::RandomGguf;
using turbokv::test::is_gemma;
constexpr int kBpeVocab = turbokv::test::kRandomGgufVocab;

// In this process's folder unless `name` is a path.
Written write_gguf(const Shape& s, const std::string& name, uint32_t seed) {
  return turbokv::test::write_random_gguf(s, name.find('/') != std::string::npos ? name : (temp_dir() / name).string(), seed);
}

void expect_row_equals(const WeightMatrix& m, int64_t row, const std::vector<float>& source, const std::string& what) {
  std::vector<float> got(static_cast<size_t>(m.cols));
  dequantize_row(m, row, got.data());
  for (int64_t i = 0; i < m.cols; ++i) {
    ASSERT_EQ(got[static_cast<size_t>(i)], source[static_cast<size_t>(row * m.cols + i)]) << what << " row " << row;
  }
}

// Loads, checks the F32 tensors map to their source values, and generates with two caches.
void load_and_run(const Shape& s, const Written& w) {
  const Model m = load_model(w.path);
  EXPECT_EQ(m.format, "gguf");
  EXPECT_EQ(m.config.arch, s.arch);
  EXPECT_EQ(m.config.head_dim, s.head_dim);
  EXPECT_EQ(m.config.n_kv_heads, s.kv_heads);
  EXPECT_EQ(m.config.vocab_size, kBpeVocab);
  EXPECT_EQ(m.config.rope_neox, s.arch != "llama" && s.arch != "granite");
  EXPECT_EQ(m.config.qkv_bias, s.arch == "qwen2");
  EXPECT_EQ(m.config.qk_norm, s.arch == "qwen3" || s.arch == "gemma3" || s.arch == "olmo2");
  EXPECT_EQ(m.config.tied_embeddings, s.tied);
  EXPECT_EQ(m.config.rope_freq_factors.empty(), !s.rope_freqs && s.arch != "gemma3");
  if (s.rope_freqs) {
    EXPECT_EQ(m.config.rope_freq_factors, w.values.at("rope_freqs.weight"));
  }
  if (s.type == GgmlType::F32 && s.arch != "phi3") {  // (phi3's fused tensors: its own test)
    const int last = s.layers - 1;
    const std::string b = "blk." + std::to_string(last) + ".";
    expect_row_equals(m.layers[last].wk, 3, w.values.at(b + "attn_k.weight"), "wk");
    expect_row_equals(m.layers[last].wo, s.dim - 1, w.values.at(b + "attn_output.weight"), "wo");
    expect_row_equals(m.layers[0].w_down, 1, w.values.at("blk.0.ffn_down.weight"), "w_down");
    expect_row_equals(m.output, 7, w.values.at(s.tied ? "token_embd.weight" : "output.weight"), "output");
    if (s.arch != "olmo2") {
      EXPECT_EQ(m.layers[last].ffn_norm, w.values.at(b + "ffn_norm.weight"));
    }
    if (s.arch == "qwen2") {
      EXPECT_EQ(m.layers[0].bk, w.values.at("blk.0.attn_k.bias"));
    }
    if (s.arch == "qwen3") {
      EXPECT_EQ(m.layers[0].q_norm, w.values.at("blk.0.attn_q_norm.weight"));
    }
    if (is_gemma(s.arch)) {
      EXPECT_EQ(m.layers[last].attn_post_norm, w.values.at(b + "post_attention_norm.weight"));
      EXPECT_EQ(m.layers[0].ffn_post_norm, w.values.at("blk.0.post_ffw_norm.weight"));
    }
  }
  const auto tok = load_tokenizer_for_model(m);
  EXPECT_EQ(tok->vocab_size(), kBpeVocab);
  const std::string prompt = "the thin thing";
  EXPECT_EQ(tok->decode_all(tok->encode(prompt, true)), prompt);
  if (s.type == GgmlType::F32) {
    // The engine's logits on the loaded file against the float64 textbook forward pass of
    // tests/forward_reference.hpp (qwen2's q/k/v biases, qwen3's per-head q/k norms and NeoX
    // RoPE, Llama 3's rope_freqs factors, each from the equations), over 17 positions: prefill
    // in chunks, then decode steps.
    const auto tokens = tok->encode("the thin thing in the thin inn", true);
    ASSERT_GE(tokens.size(), 12u);
    EXPECT_LT(turbokv::test::max_relative_error(m, tokens, 5, 2), 2e-5) << s.arch;
  }
  for (const char* cache : {"dense", "turboquant:bits=4"}) {
    const auto seq = greedy_sequence(m, *tok, prompt, 12, cache);
    EXPECT_GE(seq.size(), tok->encode(prompt, true).size() + 1) << cache;
    for (const int t : seq) EXPECT_LT(t, kBpeVocab);
  }
}

}  // namespace

TEST(GenerateGguf, Stories260KConvertedGivesSameTokens) {
  const Model bin = load_llama2c(kModels + "/stories260K.bin");
  const auto bin_tok = load_tokenizer_for_model(bin);
  const auto reference = greedy_sequence(bin, *bin_tok, "Once upon a time", 100);
  for (const char* type : {"f32", "f16", "q8_0"}) {
    const auto path = (temp_dir() / (std::string("stories260K-") + type + ".gguf")).string();
    ConvertOptions options;
    options.type = parse_weight_type(type);
    options.tokenizer_path = kModels + "/tok512.bin";
    convert_llama2c_to_gguf(kModels + "/stories260K.bin", path, options);
    const Model gguf = load_model(path);
    const auto tok = load_tokenizer_for_model(gguf);  // the SentencePiece vocabulary in the file
    EXPECT_EQ(tok->encode("Once upon a time", true), bin_tok->encode("Once upon a time", true)) << type;
    const auto seq = greedy_sequence(gguf, *tok, "Once upon a time", 100);
    if (std::string(type) == "f32") {
      EXPECT_EQ(seq, reference);
      EXPECT_EQ(tok->decode_all(seq), bin_tok->decode_all(reference));
    }
    size_t prefix = 0;
    while (prefix < seq.size() && prefix < reference.size() && seq[prefix] == reference[prefix]) ++prefix;
    const double agree = top1_agreement(bin, gguf, reference);
    std::printf("[ figure ] stories260K GGUF %s: greedy tokens equal for the first %zu of %zu; teacher-forced top-1 "
                "agreement with the .bin %.3f\n", type, prefix, reference.size(), agree);
    EXPECT_GE(agree, std::string(type) == "q8_0" ? 0.8 : 0.95) << type;
  }
}

TEST(GenerateGguf, RandomLlama3ShapedModelLoadsAndRuns) {
  // Llama 3.2 in miniature: 4 query heads on 2 KV heads, head_dim 32 (dim 128),
  // untied output, rope_freqs factors, Q8_0 matrices and (separately) F32 to check the mapping.
  for (const GgmlType type : {GgmlType::F32, GgmlType::Q8_0}) {
    const Shape s{"llama", 128, 256, 2, 4, 2, 32, false, true, type};
    load_and_run(s, write_gguf(s, std::string("llama3-") + type_name(type) + ".gguf", 11));
  }
}

TEST(GenerateGguf, RandomQwen3ShapedModelLoadsAndRuns) {
  // Qwen3: head_dim 32 with dim 64 (q_dim 128 != dim), per-head q/k norms, tied embeddings,
  // NeoX RoPE, no BOS token.
  for (const GgmlType type : {GgmlType::F32, GgmlType::Q8_0}) {
    const Shape s{"qwen3", 64, 192, 2, 4, 2, 32, true, false, type};
    load_and_run(s, write_gguf(s, std::string("qwen3-") + type_name(type) + ".gguf", 12));
  }
}

TEST(GenerateGguf, RandomQwen2ShapedModelLoadsAndRuns) {
  const Shape s{"qwen2", 64, 160, 2, 4, 1, 16, false, false, GgmlType::F32};
  load_and_run(s, write_gguf(s, "qwen2.gguf", 13));
}

namespace {

// Teacher-forced mean KL(dense || TurboQuant) over `n` random tokens, serve's default cache
// (4-bit TurboQuant, its exact window and sink; sliding layers as `sliding` says, dense f16 by
// default) against the dense f32 cache.
double default_cache_kl(const Model& m, int n, uint32_t seed, const std::string& sliding = "dense") {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> id(0, 255);
  auto tq = turbokv::kv_request_config(turbokv::KvRequest{}, 4.0);
  tq.sliding = sliding;
  turbokv::ThreadPool pool(2);
  const auto dense32 = turbokv::parse_kv_config("dense32").config;
  const ModelConfig& c = m.config;
  Session dense(m, turbokv::make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, dense32), pool);
  Session quant(m, turbokv::make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, tq, c.layer_windows()), pool);
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const int t = id(rng);
    const auto p = dense.feed(std::span<const int>(&t, 1));
    const std::vector<float> p_logits(p.begin(), p.end());
    total += kl_divergence(p_logits, quant.feed(std::span<const int>(&t, 1)));
  }
  return total / n;
}

// 40 random tokens against the float64 reference, and the default cache's KL reported.
void check_against_reference(const Model& m, const std::string& what) {
  std::mt19937 rng(5);
  std::vector<int> tokens(40);
  for (int& t : tokens) t = static_cast<int>(rng() % 256);
  EXPECT_LT(turbokv::test::max_relative_error(m, tokens, 7, 2), 2e-5) << what;
  const double kl = default_cache_kl(m, 300, 9);
  std::printf("[ figure ] %s random-weight GGUF (dim %d, %d layers, head_dim %d): mean KL(dense || serve's default "
              "4-bit TurboQuant cache) over 300 teacher-forced random tokens = %.3g\n",
              what.c_str(), m.config.dim, m.config.n_layers, m.config.head_dim, kl);
  EXPECT_LT(kl, 0.05) << what;
  if (m.config.sliding_window > 0) {
    const double same = default_cache_kl(m, 300, 9, "same");
    std::printf("[ figure ] %s: the same KL with the sliding layers compressed too (sliding=same) = %.3g\n",
                what.c_str(), same);
    EXPECT_LT(same, 0.05) << what;
  }
}

// Gemma: the loaded file's config as llama.cpp reads it, the engine against the float64
// reference (which applies the sliding windows, so a window ignored fails it), and the default
// TurboQuant cache's KL against dense reported.
void check_gemma(const Shape& s, const Written& w) {
  load_and_run(s, w);
  const Model m = load_model(w.path);
  const ModelConfig& c = m.config;
  EXPECT_FLOAT_EQ(c.embedding_scale, std::sqrt(static_cast<float>(s.dim)));
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / std::sqrt(static_cast<float>(s.head_dim)));
  EXPECT_TRUE(c.post_norms);
  EXPECT_TRUE(c.gelu_ffn);
  EXPECT_EQ(c.sliding_window, s.window);
  if (s.arch == "gemma2") {
    EXPECT_EQ(c.attn_softcap, 5.0f);
    EXPECT_EQ(c.final_softcap, 3.0f);
    for (int l = 0; l < s.layers; ++l) EXPECT_EQ(c.layer_slides(l), l % 2 == 0) << l;
  } else {
    EXPECT_EQ(c.attn_softcap, 0.0f);
    EXPECT_EQ(c.final_softcap, 0.0f);
    EXPECT_EQ(c.rope_theta_local, 10000.0f);
    EXPECT_EQ(c.rope_theta, 1000000.0f);
    EXPECT_EQ(c.rope_freq_factors, std::vector<float>(static_cast<size_t>(s.head_dim / 2), 8.0f));
    for (int l = 0; l < s.layers; ++l) EXPECT_EQ(c.layer_slides(l), l % 6 != 5) << l;
  }
  // 40 tokens, ten times the window: chunked prefill (chunks of 7) and decode steps.
  check_against_reference(m, s.arch);
  // With the window widened past the sequence the logits must change (so the reference check
  // would catch a window the engine ignored).
  Model wide = load_model(w.path);
  wide.config.sliding_window = 1000;
  std::vector<int> tokens(40);
  for (int i = 0; i < 40; ++i) tokens[static_cast<size_t>(i)] = (i * 37) % 256;
  EXPECT_GT(turbokv::test::max_relative_error(wide, tokens, 7, 2, &m), 1e-3) << s.arch;
}

}  // namespace

TEST(GenerateGguf, RandomGemma2ShapedModelMatchesReference) {
  // Gemma 2: even layers slide (window 4), logit soft-caps 5 and 3, GeGLU, post-norms, tied
  // embeddings scaled by sqrt(dim); head_dim 32 with dim 64.
  for (const GgmlType type : {GgmlType::F32, GgmlType::Q8_0}) {
    Shape s{"gemma2", 64, 160, 2, 4, 2, 32, true, false, type};
    s.window = 4;
    const Written w = write_gguf(s, std::string("gemma2-") + type_name(type) + ".gguf", 14);
    if (type == GgmlType::F32) {
      check_gemma(s, w);
    } else {
      load_and_run(s, w);
    }
  }
}

TEST(GenerateGguf, RandomGemma3ShapedModelMatchesReference) {
  // Gemma 3: six layers, five sliding (window 4, RoPE base 10,000) and one global (base 10^6,
  // linear scaling 8), per-head q/k norms, head_dim 256 with two query heads on one kv head.
  Shape s{"gemma3", 128, 256, 6, 2, 1, 256, true, false, GgmlType::F32};
  s.window = 4;
  check_gemma(s, write_gguf(s, "gemma3.gguf", 15));
}

namespace {

// The same classes with drop_before() a no-op: they keep every position, so attention relies on
// the window mask alone (what every layer did before the sliding-window rings).
class KeepAllDense : public turbokv::DenseKVCache {
 public:
  using DenseKVCache::DenseKVCache;
  size_t drop_before(size_t) override { return 0; }
};
class KeepAllTurboQuant : public turbokv::TurboQuantKVCache {
 public:
  using TurboQuantKVCache::TurboQuantKVCache;
  size_t drop_before(size_t) override { return 0; }
};

// Teacher-forced logits of `tokens` (the first `prompt` as chunks of 7, then decode steps)
// through caches made by `make`, every position's logits in one vector.
template <typename Make>
std::vector<float> ring_logits(const Model& m, const std::vector<int>& tokens, size_t prompt, Make make,
                               std::vector<std::unique_ptr<turbokv::KVCache>>& caches) {
  turbokv::ThreadPool pool(2);
  Forward forward(m, pool, 7);
  std::vector<turbokv::KVCache*> ptrs;
  for (int l = 0; l < m.config.n_layers; ++l) {
    caches.push_back(make());
    ptrs.push_back(caches.back().get());
  }
  const size_t vocab = static_cast<size_t>(m.config.vocab_size);
  std::vector<float> all(tokens.size() * vocab);
  forward.run_all_logits(std::span<const int>(tokens.data(), prompt), ptrs, std::span<float>(all.data(), prompt * vocab));
  for (size_t t = prompt; t < tokens.size(); ++t) {
    const auto logits = forward.run(std::span<const int>(&tokens[t], 1), ptrs);
    std::copy(logits.begin(), logits.end(), all.begin() + static_cast<long>(t * vocab));
  }
  return all;
}

}  // namespace

TEST(GenerateGguf, SlidingLayersKeepOnlyTheirWindowWithBitIdenticalLogits) {
  // Gemma 3's shape (five sliding layers, one global), window 20, pages of 16 tokens, 400
  // tokens (a 150-token prompt in chunks of 7, then decode steps): the engine frees the sliding
  // layers' old pages as they slide; logits equal, bit for bit, those of caches that keep every
  // position, for the dense and the TurboQuant cache; sliding layers hold at most the window plus
  // a block (64) and a page, the global layer everything.
  Shape s{"gemma3", 128, 256, 6, 2, 1, 256, true, false, GgmlType::F32};
  s.window = 20;
  const Model m = load_model(write_random_gguf(s, "gemma3-ring.gguf", 15).path);
  std::mt19937 rng(8);
  std::vector<int> tokens(400);
  for (int& t : tokens) t = static_cast<int>(rng() % 256);
  const ModelConfig& c = m.config;
  turbokv::TurboQuantCacheOptions tq;
  tq.page_tokens = 16;
  tq.window = 8;
  tq.sinks = 1;
  tq.exact_dtype = turbokv::DenseDtype::f16;
  for (const bool quantized : {false, true}) {
    SCOPED_TRACE(quantized ? "turboquant" : "dense");
    std::vector<std::unique_ptr<turbokv::KVCache>> ring_caches, all_caches;
    auto ring = ring_logits(m, tokens, 150, [&]() -> std::unique_ptr<turbokv::KVCache> {
      if (quantized) return std::make_unique<turbokv::TurboQuantKVCache>(c.n_kv_heads, c.head_dim, tq);
      return std::make_unique<turbokv::DenseKVCache>(c.n_kv_heads, c.head_dim, turbokv::DenseDtype::f16, 16);
    }, ring_caches);
    auto all = ring_logits(m, tokens, 150, [&]() -> std::unique_ptr<turbokv::KVCache> {
      if (quantized) return std::make_unique<KeepAllTurboQuant>(c.n_kv_heads, c.head_dim, tq);
      return std::make_unique<KeepAllDense>(c.n_kv_heads, c.head_dim, turbokv::DenseDtype::f16, 16);
    }, all_caches);
    ASSERT_EQ(0, std::memcmp(ring.data(), all.data(), ring.size() * sizeof(float)));
    for (int l = 0; l < c.n_layers; ++l) {
      const turbokv::KVCache& cache = *ring_caches[static_cast<size_t>(l)];
      EXPECT_EQ(cache.size(), tokens.size()) << l;
      if (c.layer_slides(l)) {
        EXPECT_LE(cache.size() - cache.first_held(), static_cast<size_t>(s.window) + 64 + 16) << l;
        EXPECT_LT(cache.nbytes() * 3, all_caches[static_cast<size_t>(l)]->nbytes()) << l;
      } else {
        EXPECT_EQ(cache.first_held(), 0u) << l;
        EXPECT_EQ(cache.nbytes(), all_caches[static_cast<size_t>(l)]->nbytes()) << l;
      }
    }
  }
}

TEST(GenerateGguf, RandomOlmo2ShapedModelMatchesReference) {
  // OLMo 2: no pre-norms, post-norms, q/k norms over the whole q (128) and k (64) projections.
  const Shape s{"olmo2", 64, 160, 2, 4, 2, 32, false, false, GgmlType::F32};
  const Written w = write_gguf(s, "olmo2.gguf", 17);
  load_and_run(s, w);
  const Model m = load_model(w.path);
  EXPECT_FALSE(m.config.pre_norms);
  EXPECT_TRUE(m.config.post_norms && m.config.qk_norm_whole);
  EXPECT_EQ(m.layers[1].k_norm, w.values.at("blk.1.attn_k_norm.weight"));
  check_against_reference(m, "olmo2");
}

TEST(GenerateGguf, RandomGraniteShapedModelMatchesReference) {
  // Granite: Llama's layout (adjacent-pair RoPE) with embedding, residual, attention and logit
  // multipliers from the metadata.
  const Shape s{"granite", 64, 160, 2, 4, 2, 16, true, false, GgmlType::F32};
  const Written w = write_gguf(s, "granite.gguf", 18);
  load_and_run(s, w);
  const Model m = load_model(w.path);
  EXPECT_EQ(m.config.embedding_scale, 12.0f);
  EXPECT_EQ(m.config.residual_scale, 0.22f);
  EXPECT_EQ(m.config.logit_scale, 8.0f);
  EXPECT_EQ(m.config.attention_scale, 0.015625f);
  check_against_reference(m, "granite");
}

TEST(GenerateGguf, RandomPhi3ShapedModelMatchesReference) {
  // Phi-3: q/k/v in one attn_qkv tensor, gate and up in one ffn_up tensor (gate rows first),
  // NeoX RoPE, every layer sliding (window 5 here; 2047 in Phi-3-mini-4k).
  Shape s{"phi3", 64, 160, 2, 4, 2, 16, false, false, GgmlType::F32};
  s.window = 5;
  const Written w = write_gguf(s, "phi3.gguf", 19);
  load_and_run(s, w);
  const Model m = load_model(w.path);
  EXPECT_TRUE(m.config.rope_neox);
  EXPECT_EQ(m.config.sliding_window, 5);
  EXPECT_TRUE(m.config.layer_slides(0) && m.config.layer_slides(1));
  const int q_dim = 4 * 16, kv_dim = 2 * 16;
  expect_row_equals(m.layers[1].wq, 2, w.values.at("blk.1.attn_qkv.weight"), "wq");
  // Row r of wk is row q_dim + r of the fused matrix; of wv, q_dim + kv_dim + r.
  std::vector<float> fused = w.values.at("blk.1.attn_qkv.weight");
  fused.erase(fused.begin(), fused.begin() + static_cast<ptrdiff_t>(q_dim) * s.dim);
  expect_row_equals(m.layers[1].wk, 3, fused, "wk");
  fused.erase(fused.begin(), fused.begin() + static_cast<ptrdiff_t>(kv_dim) * s.dim);
  expect_row_equals(m.layers[1].wv, kv_dim - 1, fused, "wv");
  std::vector<float> gate_up = w.values.at("blk.0.ffn_up.weight");
  expect_row_equals(m.layers[0].w_gate, 7, gate_up, "w_gate");
  gate_up.erase(gate_up.begin(), gate_up.begin() + static_cast<ptrdiff_t>(s.hidden) * s.dim);
  expect_row_equals(m.layers[0].w_up, 7, gate_up, "w_up");
  check_against_reference(m, "phi3");
}

TEST(GenerateGguf, SlidingWindowArchitecturesWithoutTheirWindowAreRefusedByName) {
  // gemma3 needs attention.sliding_window (llama.cpp requires it); a phi3 file without it and
  // without one of the shapes llama.cpp knows a default for has none either.
  for (const char* arch : {"gemma3", "phi3"}) {
    const Shape s{arch, 64, 160, 2, 4, 2, 16, true, false, GgmlType::F32};
    const Written w = write_gguf(s, std::string(arch) + "-nowindow.gguf", 20);
    try {
      load_model(w.path);
      ADD_FAILURE() << arch << " loaded without its sliding window";
    } catch (const turbokv::Error& e) {
      EXPECT_NE(std::string(e.what()).find("sliding_window"), std::string::npos) << e.what();
    }
  }
}

TEST(GenerateGguf, MistralSlidingWindowIsHonoured) {
  // A llama file with attention.sliding_window (Mistral): every layer slides.
  Shape s{"llama", 64, 160, 2, 4, 2, 16, false, false, GgmlType::F32};
  s.window = 3;
  const Model windowed = load_model(write_gguf(s, "mistral.gguf", 16).path);
  EXPECT_EQ(windowed.config.sliding_window, 3);
  for (int l = 0; l < s.layers; ++l) EXPECT_TRUE(windowed.config.layer_slides(l)) << l;
  Model plain = load_model(windowed.path);
  plain.config.sliding_window = 0;
  std::mt19937 rng(6);
  std::vector<int> tokens(20);
  for (int& t : tokens) t = static_cast<int>(rng() % 256);
  EXPECT_LT(turbokv::test::max_relative_error(windowed, tokens, 4, 2), 2e-5);
  EXPECT_GT(turbokv::test::max_relative_error(plain, tokens, 4, 2, &windowed), 1e-3);
}

TEST(GenerateGguf, MissingTensorOrBadMetadataIsNamed) {
  const Shape s{"llama", 64, 128, 1, 4, 2, 16, true, false, GgmlType::F32};
  const auto w = write_gguf(s, "good.gguf", 14);
  EXPECT_NO_THROW(load_model(w.path));
  // Same model with the architecture renamed: refused by name.
  GgufWriter bad;
  bad.set_string("general.architecture", "mamba");
  bad.write((temp_dir() / "arch.gguf").string());
  try {
    load_model((temp_dir() / "arch.gguf").string());
    FAIL() << "no error";
  } catch (const turbokv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("mamba"), std::string::npos) << e.what();
  }
  GgufWriter missing;
  missing.set_string("general.architecture", "llama");
  missing.set_uint32("llama.embedding_length", 64);
  missing.write((temp_dir() / "missing.gguf").string());
  try {
    load_model((temp_dir() / "missing.gguf").string());
    FAIL() << "no error";
  } catch (const turbokv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("feed_forward_length"), std::string::npos) << e.what();
  }
}

// Not a test: writes the random-weight Llama-3.2-1B-shaped Q8_0 GGUF the benchmarks in
// docs/benchmarks.md use (1.3 GB; never committed). Run with
//   TURBOKV_RANDOM_GGUF=/tmp/llama32-1b-q8_0.gguf test_generate_gguf
//     --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_WriteLlama32*'
TEST(GenerateGguf, DISABLED_WriteLlama32_1BShapedQ8_0) {
  const char* path = std::getenv("TURBOKV_RANDOM_GGUF");
  ASSERT_NE(path, nullptr) << "set TURBOKV_RANDOM_GGUF to the output path";
  // Llama 3.2 1B: dim 2048, FFN 8192, 16 layers, 32 query heads on 8 KV heads of 64, vocab
  // 128256, tied embeddings, Llama 3 rope factors.
  Shape s{"llama", 2048, 8192, 16, 32, 8, 64, true, true, GgmlType::Q8_0};
  s.vocab = 128256;
  s.keep_values = false;
  const auto w = write_gguf(s, path, 2024);
  const Model m = load_model(w.path);
  EXPECT_EQ(m.config.n_layers, 16);
  std::printf("wrote %s: %zu bytes of weights\n", path, m.weight_bytes());
}

// `generate --json` on a model whose greedy text is not valid UTF-8 (this random Llama's emits a
// lone 0xBF byte): the text carries U+FFFD, as the server's answers do. Before, the JSON writer
// threw and generate failed with "internal error: invalid UTF-8 byte".
TEST(GenerateGguf, JsonOutputOfInvalidUtf8IsReplacedNotAnError) {
  const std::string tool = TURBOKV_TOOL_PATH;
  if (tool.empty() || !fs::exists(tool)) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  const Written w = write_gguf(turbokv::test::served_shape("llama"), "llama-utf8.gguf", 27);
  const std::string cmd = tool + " generate --model " + w.path + " --prompt 'the thin thing' -n 8 --json 2>&1";
  const turbokv::test::CommandOutput run = turbokv::test::run_command(cmd);
  ASSERT_EQ(run.status, 0) << run.text;
  const std::string& out = run.text;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["generated_tokens"], 8);
  EXPECT_NE(j["text"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos) << out;  // U+FFFD
}
