// Differential fuzzing of saved prompt caches (issue 17): a few known caches are saved, the
// fuzzer damages one (cache_roundtrip_input.hpp), and the damaged file must either be refused
// with turbokv::Error or load to a cache whose re-saved bytes equal the original file's. A
// damaged file that loads to anything else is a silently wrong answer: the target aborts.
// (fuzz_cache checks the loader does not crash on arbitrary bytes; this one checks it does not
// lie on nearly-valid ones, where the checksums of format version 2 must catch the damage.)
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "cache_roundtrip_input.hpp"
#include "turbokv/baseline_caches.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace {

void fill(turbokv::KVCache& cache, size_t tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t n = static_cast<size_t>(cache.kv_heads()) * tokens * static_cast<size_t>(cache.head_dim());
  std::vector<float> k(n), v(n);
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  cache.append(k, v, tokens);
}

// Small (a few KiB each) so a run executes many inputs; together they cover every cache class,
// the TurboQuant options that change decoding, and engine-style user metadata.
std::vector<uint8_t> make_original(size_t which) {
  turbokv::PromptCache pc;
  if (which == 0) {
    for (auto dtype : {turbokv::DenseDtype::f16, turbokv::DenseDtype::f32}) {
      auto c = std::make_unique<turbokv::DenseKVCache>(2, 8, dtype, 4);
      fill(*c, 5, 1);
      pc.add_layer(std::move(c));
    }
    pc.metadata()["model"] = "fuzz";
  } else if (which == 1 || which == 2) {
    turbokv::TurboQuantCacheOptions o;
    o.page_tokens = 4;
    o.window = 2;
    o.sinks = 1;
    if (which == 2) {
      o.key_codec = turbokv::TurboQuantCodecKind::prod;
      o.key_bits = 3.5;
      o.value_bits = 2;
      o.center = true;
      o.norm_correction = false;
    } else {
      o.key_bits = o.value_bits = 3;
    }
    auto c = std::make_unique<turbokv::TurboQuantKVCache>(2, 16, o);
    fill(*c, 9, 2);
    pc.add_layer(std::move(c));
    pc.metadata()["engine.tokens"] = "[1,2,3,4,5,6,7,8,9]";
    pc.metadata()["engine.model_shape"] = "1,2,16,32";
  } else if (which == 3) {
    auto q4 = std::make_unique<turbokv::BlockQuantKVCache>(
        1, 32, turbokv::BlockQuantOptions{turbokv::BlockQuantFormat::q4_0, true});
    fill(*q4, 3, 3);
    pc.add_layer(std::move(q4));
    auto kivi = std::make_unique<turbokv::KiviKVCache>(1, 32, turbokv::KiviOptions{2, 8, 8});
    fill(*kivi, 11, 4);
    pc.add_layer(std::move(kivi));
    auto affine = std::make_unique<turbokv::AffineKVCache>(1, 32, turbokv::AffineOptions{4, 32});
    fill(*affine, 2, 5);
    pc.add_layer(std::move(affine));
  }  // 4: no layers, no metadata
  return turbokv::serialize_prompt_cache(pc);
}

const std::vector<uint8_t>& original(size_t which) {
  static const auto originals = [] {
    std::vector<std::vector<uint8_t>> out;
    for (size_t i = 0; i < turbokv::fuzz::kCacheOriginals; ++i) out.push_back(make_original(i));
    return out;
  }();
  return originals[which];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto damage = turbokv::fuzz::CacheDamage::parse(data, size);
  const std::vector<uint8_t>& good = original(damage.original);
  std::vector<uint8_t> bytes = good;
  damage.apply(bytes);
  try {
    const turbokv::PromptCache cache = turbokv::parse_prompt_cache(std::span<const uint8_t>(bytes));
    if (turbokv::serialize_prompt_cache(cache) != good) std::abort();  // loaded, but not what was saved
  } catch (const turbokv::Error&) {
    // refused: the right answer for damage
  }
  return 0;
}
