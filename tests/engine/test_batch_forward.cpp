// Continuous batching's arithmetic: matmul_rowwise rows are matvec's bit for bit, and a
// sequence's tokens and logits through BatchForward do not depend on the other sequences of
// the step (batch invariance), on the kjv model (head_dim 64) with fp16 and TurboQuant caches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/runtime/batch_forward.hpp"
#include "engine/runtime/forward.hpp"
#include "engine/tensor/matmul_kernels.hpp"
#include "engine/model/model.hpp"
#include "engine/model/gguf.hpp"
#include "engine/model/gguf_convert.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/cpu_features.hpp"
#include "engine/runtime/sampler.hpp"
#include "engine/tensor/tensor_types.hpp"
#include "turbokv/error.hpp"
#include "turbokv/half.hpp"
#include "turbokv/prompt_cache.hpp"
#include "test_util.hpp"

using turbokv::test::random_normal;
using turbokv::test::same_bits;

namespace turbokv::engine {
namespace {

const std::string kModels = TURBOKV_MODELS_DIR;

TEST(MatmulRowwise, EveryRowIsMatvecBitForBit) {
  ThreadPool pool1(1), pool2(2);
  for (const auto& [type, cols] : {std::pair{GgmlType::F32, int64_t{96}}, std::pair{GgmlType::F16, int64_t{96}},
                                    std::pair{GgmlType::Q8_0, int64_t{96}}, std::pair{GgmlType::Q4_0, int64_t{96}},
                                    std::pair{GgmlType::Q5_0, int64_t{96}}, std::pair{GgmlType::Q4_K, int64_t{256}},
                                    std::pair{GgmlType::Q6_K, int64_t{256}}, std::pair{GgmlType::IQ4_XS, int64_t{256}}}) {
    for (const int64_t rows : {1, 37, 130}) {
      const auto dense = random_normal(static_cast<size_t>(rows * cols), 3);
      std::vector<uint8_t> bytes(row_bytes(type, cols) * static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) quantize_row(type, dense.data() + r * cols, cols, bytes.data() + r * row_bytes(type, cols));
      const WeightMatrix w{type, rows, cols, bytes.data()};
      for (const int64_t n : {1, 2, 5, 16}) {
        // Tiny activations too: their Q8_0 block scales are fp16 subnormals.
        auto x = random_normal(static_cast<size_t>(n * cols), 7 + static_cast<uint32_t>(n));
        if (n == 5) {
          for (size_t i = 0; i < x.size() / 2; ++i) x[i] *= 1e-6f;
        }
        // scalar kernels; AVX2; AVX2 with the VNNI Q8_0 kernel where the CPU has it.
        for (const auto& [scalar, vnni] : {std::pair{true, false}, std::pair{false, false}, std::pair{false, true}}) {
          force_scalar_kernels(scalar);
          use_vnni_kernels(vnni);
          std::vector<float> batched(static_cast<size_t>(n * rows), NAN);
          matmul_rowwise(w, x.data(), n, batched.data(), pool2);
          for (int64_t t = 0; t < n; ++t) {
            std::vector<float> alone(static_cast<size_t>(rows), NAN);
            matvec(w, x.data() + t * cols, alone.data(), pool1);
            EXPECT_TRUE(same_bits(alone, std::span<const float>(batched).subspan(t * rows, rows)))
                << type_name(type) << " rows " << rows << " batch " << n << " row " << t << " scalar " << scalar
                << " vnni " << vnni;
          }
        }
        force_scalar_kernels(false);
        use_vnni_kernels(true);
      }
    }
  }
  std::vector<float> y(4);
  const std::vector<uint8_t> bytes(68);
  float x[64] = {};
  EXPECT_THROW(matmul_rowwise({GgmlType::Q8_0, 1, 64, bytes.data()}, x, -1, y.data(), pool1), Error);
}

// The VNNI Q8_0 kernels against the AVX2 one at the integer extremes: weights of -128 (no ggml
// quantizer writes it, a file may hold it), +-127 and 0, activations at +-127 (the largest
// products maddubs must not saturate on), odd block counts, batches not multiples of 4. With
// AVX-512 allowed (its EVEX form and tiles) and not (the VEX form, AVX-VNNI, where present).
TEST(MatmulRowwise, VnniKernelGivesTheAvx2KernelsBits) {
  if (std::string(kernel_isa()) != "avx2") GTEST_SKIP() << "no AVX2 kernels on this machine";
  RecordProperty("vnni_available", detail::vnni_available() ? "yes" : "no");
  RecordProperty("avx_vnni_available", cpu_has_avx_vnni() ? "yes" : "no");
  ThreadPool pool(2);
  std::mt19937 rng(5);
  const int64_t rows = 37, cols = 352;  // 11 blocks of 32
  const size_t stride = row_bytes(GgmlType::Q8_0, cols);
  std::vector<uint8_t> bytes(stride * rows);
  const int8_t extremes[] = {-128, -127, 127, 0, 1, -1};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      uint8_t* block = bytes.data() + r * stride + b * 34;
      const uint16_t scale = float_to_half(0.01f + 0.001f * static_cast<float>(rng() % 100));
      std::memcpy(block, &scale, 2);
      for (int i = 0; i < 32; ++i) {
        const int8_t v = r % 3 == 0 ? extremes[rng() % 6] : static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
        block[2 + i] = static_cast<uint8_t>(v);
      }
    }
  }
  const WeightMatrix w{GgmlType::Q8_0, rows, cols, bytes.data()};
  for (const int64_t n : {4, 9, 13}) {
    // Activations whose Q8_0 codes are mostly +-127: each block has a few large values.
    auto x = random_normal(static_cast<size_t>(n * cols), 11 + static_cast<uint32_t>(n));
    for (size_t i = 0; i < x.size(); i += 3) x[i] = (i % 2 ? 1.0f : -1.0f) * 50.0f;
    std::vector<float> with_vnni(static_cast<size_t>(n * rows)), avx_vnni(with_vnni.size()),
        avx2_only(with_vnni.size());
    use_vnni_kernels(true);
    matmul_rowwise(w, x.data(), n, with_vnni.data(), pool);
    use_avx512_tile_kernel(false);
    use_avx512_matvec_kernel(false);
    matmul_rowwise(w, x.data(), n, avx_vnni.data(), pool);
    use_avx512_tile_kernel(true);
    use_avx512_matvec_kernel(true);
    use_vnni_kernels(false);
    matmul_rowwise(w, x.data(), n, avx2_only.data(), pool);
    use_vnni_kernels(true);
    EXPECT_TRUE(same_bits(with_vnni, avx2_only)) << "batch " << n;
    EXPECT_TRUE(same_bits(avx_vnni, avx2_only)) << "no AVX-512, batch " << n;
    // And both are the product with x's Q8_0 round trip, up to float summation order.
    std::vector<float> reference(static_cast<size_t>(rows)), w_row(static_cast<size_t>(cols));
    std::vector<float> x_used(static_cast<size_t>(cols));
    std::vector<uint8_t> x_q8(row_bytes(GgmlType::Q8_0, cols));
    for (int64_t t = 0; t < n; ++t) {
      quantize_row(GgmlType::Q8_0, x.data() + t * cols, cols, x_q8.data());
      dequantize_row({GgmlType::Q8_0, 1, cols, x_q8.data()}, 0, x_used.data());
      matvec_reference(w, x_used.data(), reference.data());
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(w, r, w_row.data());
        double magnitude = 0;
        for (int64_t i = 0; i < cols; ++i) magnitude += std::fabs(static_cast<double>(w_row[i]) * x_used[i]);
        ASSERT_NEAR(with_vnni[t * rows + r], reference[r], 1e-5 * magnitude + 1e-6) << "batch " << n << " row " << r;
      }
    }
  }
}

struct Kjv {
  Model model = load_model(kModels + "/kjv-llama-3M.bin");
  PromptCache cache(const std::string& spec) const {
    const auto& c = model.config;
    return make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, parse_cache_config(spec));
  }
};

std::vector<KVCache*> layers(PromptCache& cache) {
  std::vector<KVCache*> out;
  for (size_t l = 0; l < cache.n_layers(); ++l) out.push_back(&cache.layer(l));
  return out;
}

// One sequence driven as the server drives it: its prompt cut at fixed positions (multiples of
// `chunk`), then greedy decode steps.
struct Sequence {
  std::vector<int> prompt;
  PromptCache cache;
  std::vector<KVCache*> caches;
  size_t fed = 0;
  std::vector<int> generated;
  std::vector<float> last_logits;
  int max_new = 0;

  bool done() const { return static_cast<int>(generated.size()) >= max_new; }
  // The entries this sequence adds to a step: all prompt chunks left (up to max_chunks), else one
  // decode token.
  void add_entries(std::vector<BatchEntry>& out, size_t chunk, size_t max_chunks) {
    if (fed < prompt.size()) {
      for (size_t k = 0; k < max_chunks && fed < prompt.size(); ++k) {
        const size_t end = std::min(prompt.size(), (fed / chunk + 1) * chunk);
        out.push_back({std::span<const int>(prompt).subspan(fed, end - fed), caches, end == prompt.size()});
        fed = end;
      }
    } else {
      out.push_back({std::span<const int>(&generated.back(), 1), caches, true});
    }
  }
  void take_logits(std::span<const float> logits) {
    last_logits.assign(logits.begin(), logits.end());
    generated.push_back(argmax(logits));
  }
};

// Runs the sequences to completion, `join_at[i]` = the step in which sequence i starts; each
// step takes up to max_chunks prompt chunks per sequence.
void run_all(BatchForward& forward, std::vector<Sequence*> seqs, const std::vector<int>& join_at, size_t chunk,
             size_t max_chunks) {
  for (int step = 0;; ++step) {
    std::vector<BatchEntry> entries;
    std::vector<Sequence*> owner;
    bool pending = false;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i]->done()) continue;
      pending = true;
      if (step < join_at[i]) continue;
      const size_t before = entries.size();
      seqs[i]->add_entries(entries, chunk, max_chunks);
      for (size_t k = before; k < entries.size(); ++k) owner.push_back(seqs[i]);
    }
    if (!pending) return;
    if (entries.empty()) continue;
    forward.run(entries);
    for (size_t e = 0; e < entries.size(); ++e) {
      if (entries[e].want_logits) owner[e]->take_logits(forward.logits(e));
    }
  }
}

TEST(BatchForward, OutputDoesNotDependOnTheBatch) {
  const Kjv kjv;
  ThreadPool pool(2);
  BatchForward forward(kjv.model, pool);
  const std::vector<std::vector<int>> prompts = {
      {1, 400, 21, 33, 87, 5, 19, 200, 7, 7, 90, 300, 12, 40, 41, 42, 43, 44, 45, 46, 47, 48},
      {1, 55, 66, 77, 88, 99, 111},
      {1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320,
       321, 322, 323, 324, 325, 326, 327, 328, 329, 330, 331, 332, 333, 334, 335, 336, 337, 338, 339, 340}};
  for (const std::string spec : {"turboquant:bits=4,window=32,sinks=1,page_tokens=16", "dense:page_tokens=16",
                                 "turboquant:key_bits=3,value_bits=2,page_tokens=16"}) {
    SCOPED_TRACE(spec);
    auto make = [&](size_t i, int max_new) {
      Sequence s;
      s.prompt = prompts[i];
      s.cache = kjv.cache(spec);
      s.caches = layers(s.cache);
      s.max_new = max_new;
      return s;
    };
    // Each sequence alone, one prompt chunk per step.
    std::vector<Sequence> solo;
    for (size_t i = 0; i < prompts.size(); ++i) solo.push_back(make(i, 40));
    for (auto& s : solo) run_all(forward, {&s}, {0}, 16, 1);
    // All together, joining at different steps (so each meets the others in prefill and in
    // decode, at different positions of the batch), several prompt chunks per step.
    for (const auto& [join, max_chunks] : {std::pair{std::vector<int>{0, 0, 0}, size_t{1}},
                                           std::pair{std::vector<int>{3, 0, 9}, size_t{3}}}) {
      std::vector<Sequence> together;
      for (size_t i = 0; i < prompts.size(); ++i) together.push_back(make(i, 40));
      std::vector<Sequence*> order = {&together[2], &together[0], &together[1]};
      run_all(forward, order, {join[2], join[0], join[1]}, 16, max_chunks);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(together[i].generated, solo[i].generated) << "sequence " << i;
        EXPECT_TRUE(same_bits(together[i].last_logits, solo[i].last_logits)) << "sequence " << i;
        EXPECT_EQ(together[i].cache.nbytes(), solo[i].cache.nbytes());
      }
    }
    // The greedy tokens are not degenerate (the model continues the prompt, not one token).
    std::set<int> distinct(solo[0].generated.begin(), solo[0].generated.end());
    EXPECT_GT(distinct.size(), 3u);
  }
}

// A decode row through BatchForward is exactly Forward's one-token step (both use matvec's
// arithmetic), so the server's decode matches `generate`'s.
TEST(BatchForward, DecodeRowEqualsForwardStep) {
  const Kjv kjv;
  ThreadPool pool(2);
  Forward single(kjv.model, pool);
  BatchForward batch(kjv.model, pool);
  const std::vector<int> tokens = {1, 400, 21, 33, 87, 5, 19, 200, 7};
  PromptCache a = kjv.cache("turboquant:bits=4,window=4,sinks=1"), b = kjv.cache("turboquant:bits=4,window=4,sinks=1");
  auto la = layers(a), lb = layers(b);
  for (const int t : tokens) {
    const auto want = single.run(std::span<const int>(&t, 1), la);
    const BatchEntry entry{std::span<const int>(&t, 1), lb, true};
    batch.run(std::span<const BatchEntry>(&entry, 1));
    ASSERT_TRUE(same_bits(want, batch.logits(0))) << "token " << t;
  }
}

// all_logits (the server scoring a prompt): every row of a chunk has logits; the last row is bit
// for bit what want_logits alone gives, whatever else is in the step, and every row is the
// logits Forward's teacher-forced prefill gives at that position (Forward multiplies a chunk in
// float, so within float tolerance).
TEST(BatchForward, AllLogitsGivesEveryRowOfAChunk) {
  const Kjv kjv;
  ThreadPool pool(2);
  BatchForward batch(kjv.model, pool);
  Forward single(kjv.model, pool, 16);
  const std::vector<int> prompt = {1, 400, 21, 33, 87, 5, 19, 200, 7, 7, 90, 300, 12, 40, 41, 42, 43, 44, 45, 46};
  const std::vector<int> other = {1, 55, 66, 77};
  const size_t vocab = static_cast<size_t>(kjv.model.config.vocab_size);
  for (const std::string spec : {"dense:page_tokens=16", "turboquant:bits=4,window=32,sinks=1,page_tokens=16"}) {
    SCOPED_TRACE(spec);
    PromptCache ref = kjv.cache(spec), all = kjv.cache(spec), last = kjv.cache(spec), o = kjv.cache(spec);
    auto lref = layers(ref), lall = layers(all), llast = layers(last), lo = layers(o);
    std::vector<float> want(prompt.size() * vocab);
    single.run_all_logits(prompt, lref, want);
    // The prompt in two chunks (16 + 4) as the server cuts it; the other sequence shares the steps.
    std::vector<float> got;
    for (const auto& [begin, end] : {std::pair<size_t, size_t>{0, 16}, {16, prompt.size()}}) {
      const auto chunk = std::span<const int>(prompt).subspan(begin, end - begin);
      const std::vector<BatchEntry> entries = {{std::span<const int>(other).subspan(0, 2), lo, true},
                                               {chunk, lall, false, true}};
      batch.run(entries);
      const auto rows = batch.all_logits(1);
      ASSERT_EQ(rows.size(), chunk.size() * vocab);
      EXPECT_TRUE(same_bits(batch.logits(1), rows.subspan(rows.size() - vocab)));
      got.insert(got.end(), rows.begin(), rows.end());
      const BatchEntry alone{chunk, llast, true};
      batch.run(std::span<const BatchEntry>(&alone, 1));
      EXPECT_TRUE(same_bits(batch.logits(0), rows.subspan(rows.size() - vocab)));
      EXPECT_EQ(batch.all_logits(0).size(), vocab);  // want_logits alone keeps the last row only
    }
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    EXPECT_LT(worst, 5e-4);  // measured: 5.5e-5 dense, 5e-6 TurboQuant
  }
}

TEST(BatchForward, BadEntriesAreRefusedBeforeAnyCacheChanges) {
  const Kjv kjv;
  ThreadPool pool(1);
  BatchForward forward(kjv.model, pool);
  PromptCache a = kjv.cache("dense"), b = kjv.cache("dense:dtype=f32");
  auto la = layers(a), lb = layers(b);
  const std::vector<int> good = {1, 2, 3}, bad = {1, 99999};
  const std::vector<BatchEntry> entries = {{good, la, true}, {bad, lb, true}};
  EXPECT_THROW(forward.run(entries), Error);
  EXPECT_EQ(a.size(), 0u);
  const std::vector<BatchEntry> empty_entry = {{good, la, true}, {std::span<const int>(), lb, false}};
  EXPECT_THROW(forward.run(empty_entry), Error);
  std::vector<KVCache*> short_list(la.begin(), la.end() - 1);
  const std::vector<BatchEntry> wrong_layers = {{good, short_list, true}};
  EXPECT_THROW(forward.run(wrong_layers), Error);
  EXPECT_EQ(a.size(), 0u);
  forward.run(std::vector<BatchEntry>{{good, la, false}});
  EXPECT_EQ(a.size(), 3u);
  EXPECT_THROW(forward.logits(0), Error);  // not asked for
}

}  // namespace
}  // namespace turbokv::engine

namespace turbokv::engine {
namespace {

// The server's prefix reuse: a prompt computed whole gives the bits of the same prompt computed
// from a stored prefix (every layer saved and loaded at a page boundary, as PrefixCache and the
// disk and Redis tiers keep it) plus the rest, on the f32 kjv model and its Q8_0 conversion, with
// serve's default cache (int8 attention: a loaded cache used to attend exactly, so a restored
// prefix answered differently) and others.
TEST(BatchForward, RestoredPrefixGivesTheBitsOfComputingIt) {
  ConvertOptions convert;
  convert.type = GgmlType::Q8_0;
  const std::string q8_path = ::testing::TempDir() + "/batch_forward_kjv_q8_0.gguf";
  convert_llama2c_to_gguf(kModels + "/kjv-llama-3M.bin", q8_path, convert);
  std::vector<int> prompt;
  std::mt19937 rng(5);
  for (int i = 0; i < 98; ++i) prompt.push_back(1 + static_cast<int>(rng() % 500));
  const size_t chunk = 16, restored = 48;
  for (const bool q8 : {false, true}) {
    const Model model = q8 ? load_gguf(q8_path) : load_model(kModels + "/kjv-llama-3M.bin");
    ThreadPool pool(2);
    BatchForward forward(model, pool);
    KvRequest serve_default;
    for (const CacheConfig& config :
         {kv_request_config(serve_default, 4.0), parse_cache_config("turboquant:bits=4,page_tokens=16,attention=int8"),
          parse_cache_config("turboquant:bits=4,window=32,sinks=1,page_tokens=16"),
          parse_cache_config("dense:page_tokens=16")}) {
      CacheConfig paged = config;
      paged.tq.page_tokens = paged.dense_page_tokens = chunk;
      SCOPED_TRACE(format_cache_config(paged) + (q8 ? ", Q8_0 weights" : ", f32 weights"));
      // The prompt in chunks of 16, one step each, from `from` (a cache holding `from` tokens).
      auto finish = [&](PromptCache& cache, size_t from) {
        std::vector<float> last;
        const std::vector<KVCache*> caches = layers(cache);
        for (size_t fed = from; fed < prompt.size();) {
          const size_t end = std::min(prompt.size(), fed + chunk);
          const BatchEntry entry{std::span<const int>(prompt).subspan(fed, end - fed), caches,
                                 end == prompt.size()};
          forward.run(std::span<const BatchEntry>(&entry, 1));
          fed = end;
          if (entry.want_logits) last.assign(forward.logits(0).begin(), forward.logits(0).end());
        }
        return last;
      };
      const auto& c = model.config;
      PromptCache whole = make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, paged);
      const std::vector<float> want = finish(whole, 0);
      PromptCache stored = make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, paged);
      std::vector<int> head(prompt.begin(), prompt.begin() + restored);
      std::swap(prompt, head);
      finish(stored, 0);
      std::swap(prompt, head);
      PromptCache loaded;
      for (size_t l = 0; l < stored.n_layers(); ++l) loaded.add_layer(load_kv_cache(stored.layer(l).save_state()));
      ASSERT_EQ(loaded.size(), restored);
      EXPECT_TRUE(same_bits(want, finish(loaded, restored)));
    }
  }
  std::remove(q8_path.c_str());
}

}  // namespace
}  // namespace turbokv::engine
