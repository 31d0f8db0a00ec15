// Fuzzes the saved prompt-cache loader: parse_prompt_cache (the in-memory form of
// load_prompt_cache: safetensors header, metadata, every cache class's from_state) and
// read_prompt_cache_info (what `turbokv cache-info` prints). A cache that loads must then behave:
// fetch, attend, append, trim and a save/load round trip that reproduces the same bytes.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"

namespace {

void exercise(turbokv::KVCache& cache) {
  const size_t heads = static_cast<size_t>(cache.kv_heads());
  const size_t dim = static_cast<size_t>(cache.head_dim());
  const size_t n = cache.size();
  (void)cache.nbytes();
  if (heads * dim * (n + 1) > (size_t{1} << 22)) return;  // keep each input fast
  std::vector<float> k(heads * n * dim), v(heads * n * dim);
  cache.fetch(k, v);
  // Input policy: a cache loaded from a file holds finite values (docs/reliability.md), except
  // a dense cache whose file records the allow_non_finite opt-in.
  const auto* dense = dynamic_cast<const turbokv::DenseKVCache*>(&cache);
  if (dense == nullptr || !dense->allow_non_finite()) {
    for (size_t i = 0; i < k.size(); ++i) {
      if (!std::isfinite(k[i]) || !std::isfinite(v[i])) __builtin_trap();
    }
  }
  if (n > 0) {
    std::vector<float> q(heads * dim, 0.5f), out(heads * dim);
    turbokv::attend(q, static_cast<int>(heads), 1, cache, out, {.threads = 1});
  }
  std::vector<float> nk(heads * dim, 0.25f), nv(heads * dim, -0.5f);
  cache.append(nk, nv, 1);
  if (cache.size() != n + 1) std::abort();
  if (cache.trim(1) != 1 || cache.size() != n) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static turbokv::fuzz::InputFile file("cache");
  try {
    (void)turbokv::read_prompt_cache_info(file.write(data, size));
  } catch (const turbokv::Error&) {
  }
  try {
    turbokv::PromptCache cache = turbokv::parse_prompt_cache(std::span<const uint8_t>(data, size));
    // A file that loads must save and reload to the same bytes (no state lost or invented).
    const std::vector<uint8_t> bytes = turbokv::serialize_prompt_cache(cache);
    const std::vector<uint8_t> again =
        turbokv::serialize_prompt_cache(turbokv::parse_prompt_cache(bytes));
    if (bytes != again) std::abort();
    for (size_t i = 0; i < cache.n_layers(); ++i) exercise(cache.layer(i));
  } catch (const turbokv::Error&) {
  }
  return 0;
}
