// Generation through compressed caches: 8-bit TurboQuant gives the dense cache's greedy tokens
// (on stories260K's head_dim 8 with the BOS sink kept exact);
// 4-bit keeps top-1 agreement high (teacher-forced on the dense greedy text); every cache
// class the registry builds runs through the same forward pass.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "engine/forward.hpp"
#include "engine/model.hpp"
#include "engine/sampler.hpp"
#include "engine/session.hpp"
#include "engine/tokenizer.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prompt_cache.hpp"

using namespace turbokv::engine;

namespace {

const std::string kModels = TURBOKV_MODELS_DIR;

turbokv::PromptCache make_cache(const ModelConfig& c, const std::string& spec) {
  return turbokv::make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, turbokv::parse_cache_config(spec));
}

std::vector<int> greedy_tokens(const Model& m, const Tokenizer& tok, const std::string& spec, const std::string& prompt,
                               int n) {
  turbokv::ThreadPool pool(2);
  Session s(m, make_cache(m.config, spec), pool);
  s.feed(tok.encode(prompt, true));
  Sampler greedy(SamplerOptions{0.0f, 1.0f, 0});
  return s.generate(n, greedy, [&](int id) { return tok.is_end_of_generation(id); });
}

// Fraction of positions where the cache's argmax equals the dense cache's, feeding both the
// same tokens (the dense greedy sequence) one at a time.
double top1_agreement(const Model& m, const std::vector<int>& tokens, const std::string& spec) {
  turbokv::ThreadPool pool(2);
  Session dense(m, make_cache(m.config, "dense"), pool);
  Session other(m, make_cache(m.config, spec), pool);
  int same = 0;
  for (const int t : tokens) {
    const int a = argmax(dense.feed(std::span<const int>(&t, 1)));
    const int b = argmax(other.feed(std::span<const int>(&t, 1)));
    same += a == b;
  }
  return static_cast<double>(same) / static_cast<double>(tokens.size());
}

struct Fixture {
  Model model;
  std::unique_ptr<SentencePieceTokenizer> tok;
};

Fixture load(const std::string& name) {
  Fixture f{load_llama2c(kModels + "/" + name), nullptr};
  f.tok = load_llama2c_tokenizer(kModels + "/tok512.bin", f.model.config.vocab_size);
  return f;
}

}  // namespace

TEST(GenerateKv, EightBitCacheGivesDenseGreedyTokens) {
  // kjv-llama-3M (head_dim 64): 8-bit TurboQuant gives exactly the dense greedy tokens.
  const auto kjv = load("kjv-llama-3M.bin");
  const auto kjv_dense = greedy_tokens(kjv.model, *kjv.tok, "dense", "In the beginning", 100);
  ASSERT_GE(kjv_dense.size(), 40u);
  EXPECT_EQ(greedy_tokens(kjv.model, *kjv.tok, "turboquant:bits=8", "In the beginning", 100), kjv_dense);

  // stories260K (head_dim 8): attention logits reach ~300 there (key norms ~30), so even 8-bit's
  // ~0.6% key error moves them by ~1. Keeping the BOS attention sink exact (sinks=1, 64 bytes
  // per layer) gives exactly the dense tokens; without it the tokens agree up to a near-tie.
  const auto f = load("stories260K.bin");
  const auto dense = greedy_tokens(f.model, *f.tok, "dense", "Once upon a time", 100);
  ASSERT_GE(dense.size(), 40u);
  EXPECT_EQ(greedy_tokens(f.model, *f.tok, "turboquant:bits=8,sinks=1", "Once upon a time", 100), dense);
  const auto plain = greedy_tokens(f.model, *f.tok, "turboquant:bits=8", "Once upon a time", 100);
  size_t prefix = 0;
  while (prefix < plain.size() && prefix < dense.size() && plain[prefix] == dense[prefix]) ++prefix;
  std::printf("[ figure ] stories260K turboquant:bits=8 (no sinks): first %zu greedy tokens equal to dense\n", prefix);
  EXPECT_GE(prefix, 16u);
  auto seq = f.tok->encode("Once upon a time", true);
  seq.insert(seq.end(), dense.begin(), dense.end());
  EXPECT_GE(top1_agreement(f.model, seq, "turboquant:bits=8"), 0.97);
}

TEST(GenerateKv, FourBitTopOneAgreement) {
  // Measured: kjv 0.96 at 4 bits; stories260K (head_dim 8, far below production) 0.73.
  for (const auto& [name, prompt, floor] : {std::tuple{"stories260K.bin", "Once upon a time", 0.65},
                                           std::tuple{"kjv-llama-3M.bin", "In the beginning", 0.90}}) {
    const auto f = load(name);
    auto seq = f.tok->encode(prompt, true);
    const auto out = greedy_tokens(f.model, *f.tok, "dense", prompt, 160);
    seq.insert(seq.end(), out.begin(), out.end());
    for (const char* spec : {"turboquant:bits=4", "turboquant:bits=3", "turboquant:bits=4,key_codec=prod",
                             "turboquant:bits=4,sinks=1"}) {
      const double agree = top1_agreement(f.model, seq, spec);
      std::printf("[ figure ] %s %s: top-1 agreement with dense over %zu positions = %.3f\n", name, spec, seq.size(),
                  agree);
      if (std::string(spec) == "turboquant:bits=4") {
        EXPECT_GE(agree, floor) << name;
      }
    }
  }
}

TEST(GenerateKv, EveryCacheClassRunsThroughTheSameForwardPass) {
  const auto f = load("stories260K.bin");
  for (const char* spec : {"dense:dtype=f32", "turboquant:bits=2,window=8,sinks=2", "turboquant:bits=3,key_codec=prod"}) {
    EXPECT_EQ(greedy_tokens(f.model, *f.tok, spec, "Once upon a time", 20).size(), 20u) << spec;
  }
  // Other registered classes (baselines) with their default options: they either run or refuse
  // the shape with a turbokv::Error (e.g. a quantization group wider than head_dim 8).
  int ran = 0;
  for (const auto& kind : turbokv::registered_cache_classes()) {
    turbokv::CacheConfig config;
    config.kind = kind;
    try {
      turbokv::ThreadPool pool(2);
      Session s(f.model, turbokv::make_prompt_cache(f.model.config.n_layers, f.model.config.n_kv_heads,
                                                    f.model.config.head_dim, config),
                pool);
      s.feed(f.tok->encode("Once upon a time", true));
      Sampler greedy(SamplerOptions{0.0f, 1.0f, 0});
      EXPECT_EQ(s.generate(10, greedy, {}).size(), 10u) << kind;
      ++ran;
    } catch (const turbokv::Error& e) {
      std::printf("[ note ] cache class %s on stories260K: %s\n", kind.c_str(), e.what());
    }
  }
  EXPECT_GE(ran, 2);  // at least dense and turboquant
}
