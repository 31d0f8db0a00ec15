// Uses the installed public headers of both libraries: a 4-bit TurboQuant cache, fused
// attention over it, and an engine call; prints the version so the test can compare it.
#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/runtime/sampler.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/turboquant_cache.hpp"
#include "turbokv/version.hpp"

int main() {
  const int kv_heads = 2, head_dim = 64, tokens = 100;
  turbokv::TurboQuantKVCache cache(kv_heads, head_dim, turbokv::TurboQuantCacheOptions{});
  std::vector<float> k(kv_heads * tokens * head_dim), v(k.size()), q(4 * head_dim), out(q.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = std::sin(0.37f * static_cast<float>(i));
    v[i] = std::cos(0.11f * static_cast<float>(i));
  }
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.05f * static_cast<float>(i));
  cache.append(k, v, tokens);
  turbokv::attend(q, 4, 1, cache, out);
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f};
  const int best = turbokv::engine::argmax(logits);
  bool finite = true;
  for (float x : out) finite = finite && std::isfinite(x);
  std::printf("turbokv %s: %zu tokens in %zu bytes, argmax %d, attention %s\n", turbokv::version(), cache.size(),
              cache.nbytes(), best, finite ? "finite" : "NOT FINITE");
  return cache.size() == static_cast<size_t>(tokens) && best == 1 && finite ? 0 : 1;
}
