// Sliding-window rings (KVCache::drop_before): a cache that frees the pages no later query can
// see must give bit-identical attention to one that keeps every position (the masking alone),
// for every cache class, windows smaller than, equal to and larger than a page, prompt chunks of
// several sizes and decode steps past several windows; its bytes stay bounded by the window; its
// saved state holds only what it holds and loads back to the same answers; and a request that
// would read a freed position is refused with a clear error, never answered from freed memory.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "turbokv/attention.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prompt_cache.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv {
namespace {

constexpr int kKvHeads = 2, kQHeads = 4, kDim = 64;

std::vector<float> gaussian(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// Every class, paged (the rings) and not (they keep everything: drop_before is a no-op there).
// Pages of 32 tokens unless the name says otherwise.
const std::vector<std::string>& configs() {
  static const std::vector<std::string> names = {
      "dense:page_tokens=32",
      "dense:dtype=f32,page_tokens=32",
      "dense",  // pages of 256: larger than every window below
      "turboquant:bits=4,page_tokens=32",
      "turboquant:key_bits=3,value_bits=2,window=12,sinks=1,exact=f16,page_tokens=32",
      "turboquant:bits=4,window=16,sinks=4,center=1,page_tokens=32",
      "turboquant:key_codec=prod,bits=3,sinks=1,page_tokens=32",
      "turboquant:bits=4,window=32,sinks=1,exact=f16,attention=int8,page_tokens=32",
      "q8_0",
      "kivi4",
      "affine4",
  };
  return names;
}

bool paged(const KVCache& cache) {
  return dynamic_cast<const DenseKVCache*>(&cache) != nullptr ||
         dynamic_cast<const TurboQuantKVCache*>(&cache) != nullptr;
}

size_t page_tokens_of(const KVCache& cache) {
  if (const auto* d = dynamic_cast<const DenseKVCache*>(&cache)) return d->page_tokens();
  if (const auto* t = dynamic_cast<const TurboQuantKVCache*>(&cache)) return t->page_tokens();
  return 0;
}

// Tokens a ring may hold beyond its window: the block rounding of keep_from (64), a partly
// freed page, and a TurboQuant cache's sinks and exact window (never freed).
size_t slack(const KVCache& cache) {
  size_t extra = 64 + page_tokens_of(cache);
  if (const auto* t = dynamic_cast<const TurboQuantKVCache*>(&cache)) extra += t->options().sinks + t->options().window;
  return extra;
}

std::vector<float> attend_chunk(const KVCache& cache, const std::vector<float>& q, int n, size_t window) {
  std::vector<float> out(q.size());
  AttentionOptions options;
  options.window = window;
  options.threads = 2;
  attend(q, kQHeads, n, cache, out, options);
  return out;
}

// Chunk sizes cycling through single decode steps, short chunks and chunks longer than a page.
const std::vector<size_t> kChunks = {1, 7, 33, 1, 1, 64, 5, 100, 1, 2, 31, 1};

TEST(SlidingRing, AttentionIsBitIdenticalToMaskingForEveryClassWindowAndChunk) {
  for (const std::string& name : configs()) {
    for (const size_t window : {size_t{16}, size_t{32}, size_t{100}}) {
      std::mt19937 rng(static_cast<uint32_t>(window * 7 + name.size()));
      auto full = make_kv_cache(name, kKvHeads, kDim);
      auto ring = make_kv_cache(name, kKvHeads, kDim);
      size_t step = 0, max_held = 0;
      while (full->size() < 6 * window + 300) {  // past several windows
        const size_t n = kChunks[step++ % kChunks.size()];
        const auto k = gaussian(kKvHeads * n * kDim, rng), v = gaussian(k.size(), rng);
        full->append(k, v, n);
        ring->append(k, v, n);
        const auto q = gaussian(static_cast<size_t>(kQHeads) * n * kDim, rng);
        const auto want = attend_chunk(*full, q, static_cast<int>(n), window);
        const auto got = attend_chunk(*ring, q, static_cast<int>(n), window);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << name << " window " << window << " at " << ring->size() << " tokens, chunk " << n;
        const size_t keep = sliding_window_keep_from(ring->size(), window);
        const size_t first = ring->drop_before(keep);
        EXPECT_LE(first, keep) << name;
        EXPECT_EQ(first, ring->first_held()) << name;
        max_held = std::max(max_held, ring->size() - first);
      }
      SCOPED_TRACE(name + " window " + std::to_string(window));
      if (!paged(*ring)) {
        EXPECT_EQ(ring->first_held(), 0u);
        EXPECT_EQ(ring->nbytes(), full->nbytes());
        continue;
      }
      // Bounded by the window, not the sequence: at most window + slack positions held, and the
      // bytes fall with them (the full cache holds every position).
      EXPECT_GT(ring->first_held(), 0u);
      EXPECT_LE(max_held, window + slack(*ring));
      EXPECT_LT(ring->nbytes(), full->nbytes());
      if (const auto* dense = dynamic_cast<const DenseKVCache*>(ring.get())) {
        const size_t freed_pages = ring->first_held() / dense->page_tokens();
        EXPECT_EQ(ring->nbytes(), (ring->size() - freed_pages * dense->page_tokens()) * kKvHeads * kDim * 2 *
                                      dense->element_size());
        EXPECT_EQ(dense->allocated_bytes() + freed_pages * 2 * kKvHeads * dense->page_tokens() * kDim *
                                                 dense->element_size(),
                  dynamic_cast<const DenseKVCache*>(full.get())->allocated_bytes());
      }
    }
  }
}

// A cache after 600 tokens of a window-40 ring, and its twin that kept everything.
struct Pair {
  std::unique_ptr<KVCache> full, ring;
};

Pair filled_pair(const std::string& name, size_t window, std::mt19937& rng) {
  Pair p{make_kv_cache(name, kKvHeads, kDim), make_kv_cache(name, kKvHeads, kDim)};
  for (size_t step = 0; p.full->size() < 600; ++step) {
    const size_t n = kChunks[step % kChunks.size()];
    const auto k = gaussian(kKvHeads * n * kDim, rng), v = gaussian(k.size(), rng);
    p.full->append(k, v, n);
    p.ring->append(k, v, n);
    p.ring->drop_before(sliding_window_keep_from(p.ring->size(), window));
  }
  return p;
}

TEST(SlidingRing, FetchGivesHeldPositionsAndZerosForFreedOnes) {
  std::mt19937 rng(3);
  for (const std::string& name : configs()) {
    const Pair p = filled_pair(name, 40, rng);
    const size_t n = p.full->size(), first = p.ring->first_held();
    std::vector<float> fk(kKvHeads * n * kDim), fv(fk.size()), rk(fk.size()), rv(fk.size());
    p.full->fetch(fk, fv);
    p.ring->fetch(rk, rv);
    // TurboQuant sinks stay held below first_held.
    const auto* tq = dynamic_cast<const TurboQuantKVCache*>(p.ring.get());
    const size_t sinks = tq != nullptr ? tq->n_sinks() : 0;
    for (int h = 0; h < kKvHeads; ++h) {
      for (size_t t = 0; t < n; ++t) {
        for (int j = 0; j < kDim; ++j) {
          const size_t i = (h * n + t) * kDim + j;
          const bool held = t >= first || t < sinks;
          ASSERT_EQ(rk[i], held ? fk[i] : 0.0f) << name << " position " << t;
          ASSERT_EQ(rv[i], held ? fv[i] : 0.0f) << name << " position " << t;
        }
      }
    }
  }
}

TEST(SlidingRing, SavedStateHoldsOnlyTheRingAndLoadsToTheSameAnswers) {
  std::mt19937 rng(4);
  for (const std::string& name : configs()) {
    Pair p = filled_pair(name, 40, rng);
    if (!paged(*p.ring)) continue;
    SCOPED_TRACE(name);
    PromptCache saved;
    saved.add_layer(std::move(p.ring));
    const auto bytes = serialize_prompt_cache(saved);
    PromptCache whole;
    whole.add_layer(std::move(p.full));
    EXPECT_LT(bytes.size() * 2, serialize_prompt_cache(whole).size());  // 600 positions vs < 300
    PromptCache loaded = parse_prompt_cache(bytes);
    const KVCache& ring = saved.layer(0);
    KVCache& back = loaded.layer(0);
    EXPECT_EQ(back.size(), ring.size());
    EXPECT_EQ(back.first_held(), ring.first_held());
    EXPECT_EQ(back.nbytes(), ring.nbytes());
    // Continue both with the same tokens: answers bit-identical, and the loaded one keeps sliding.
    for (const size_t n : {size_t{1}, size_t{37}, size_t{1}}) {
      const auto k = gaussian(kKvHeads * n * kDim, rng), v = gaussian(k.size(), rng);
      saved.layer(0).append(k, v, n);
      back.append(k, v, n);
      const auto q = gaussian(static_cast<size_t>(kQHeads) * n * kDim, rng);
      const auto want = attend_chunk(saved.layer(0), q, static_cast<int>(n), 40);
      const auto got = attend_chunk(back, q, static_cast<int>(n), 40);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
      saved.layer(0).drop_before(sliding_window_keep_from(saved.layer(0).size(), 40));
      back.drop_before(sliding_window_keep_from(back.size(), 40));
    }
    // A state whose first_held lies past its tokens is refused by name.
    CacheState state = saved.layer(0).save_state();
    state.metadata["first_held"] = std::to_string(saved.layer(0).size() + 1);
    try {
      load_kv_cache(state);
      ADD_FAILURE() << "a first_held past the tokens loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("first_held"), std::string::npos) << e.what();
    }
    // A truncated file still gives a clear error.
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() - 100));
    EXPECT_THROW(parse_prompt_cache(cut), Error);
  }
}

TEST(SlidingRing, AttentionThatWouldReadFreedPositionsIsRefused) {
  std::mt19937 rng(5);
  for (const std::string& name : {std::string("dense:page_tokens=32"), std::string("turboquant:bits=4,page_tokens=32")}) {
    SCOPED_TRACE(name);
    Pair p = filled_pair(name, 40, rng);
    KVCache& ring = *p.ring;
    ASSERT_GT(ring.first_held(), 0u);
    const auto q = gaussian(static_cast<size_t>(kQHeads) * kDim, rng);
    std::vector<float> out(q.size());
    auto refused = [&](const AttentionOptions& o) {
      try {
        attend(q, kQHeads, 1, ring, out, o);
        return false;
      } catch (const Error& e) {
        return std::string(e.what()).find("no longer holds") != std::string::npos;
      }
    };
    AttentionOptions o;
    EXPECT_TRUE(refused(o));  // no window: every position is read
    o.window = 40;
    EXPECT_FALSE(refused(o));
    o.window = 400;  // a wider window than the ring was kept for
    EXPECT_TRUE(refused(o));
    // Trimming back into the freed positions and appending again does not resurrect them.
    const size_t first = ring.first_held();
    ring.trim(ring.size() - first + 10);
    EXPECT_LE(ring.first_held(), ring.size());
    const auto k = gaussian(kKvHeads * 20 * kDim, rng), v = gaussian(k.size(), rng);
    ring.append(k, v, 20);
    o.window = 40;
    EXPECT_TRUE(refused(o));
  }
}

}  // namespace
}  // namespace turbokv

namespace turbokv {
namespace {

// sliding=auto (the default) keeps narrow windows' rings exact and compresses wide ones like the
// global layers: a model whose every layer slides over 2-4K positions (Mistral, Phi-3) would
// otherwise hold no compressed layer at all below that many tokens.
TEST(SlidingRing, AutoKeepsNarrowWindowsDenseAndCompressesWideOnes) {
  const CacheConfig tq = parse_cache_config("turboquant:bits=4,window=32,sinks=1");
  EXPECT_EQ(tq.sliding, "auto");
  EXPECT_EQ(layer_cache_config(tq, 0, 4, 0).kind, "turboquant") << "a global layer";
  EXPECT_EQ(layer_cache_config(tq, 0, 4, 512).kind, "dense") << "Gemma 3's window";
  EXPECT_EQ(layer_cache_config(tq, 0, 4, kDenseRingMaxWindow).kind, "dense");
  EXPECT_EQ(layer_cache_config(tq, 0, 4, kDenseRingMaxWindow + 1).kind, "turboquant");
  EXPECT_EQ(layer_cache_config(tq, 0, 4, 4096).kind, "turboquant") << "Mistral's and Gemma 2's window";
  const CacheConfig dense = parse_cache_config("turboquant:bits=4,sliding=dense");
  EXPECT_EQ(layer_cache_config(dense, 0, 4, 4096).kind, "dense");
  const CacheConfig same = parse_cache_config("turboquant:bits=4,sliding=same");
  EXPECT_EQ(layer_cache_config(same, 0, 4, 512).kind, "turboquant");
  // The default is not written out; the others are, and read back.
  EXPECT_EQ(format_cache_config(tq).find("sliding"), std::string::npos);
  EXPECT_EQ(parse_cache_config(format_cache_config(dense)).sliding, "dense");
  EXPECT_THROW(parse_cache_config("turboquant:bits=4,sliding=ring"), Error);
}

}  // namespace
}  // namespace turbokv
