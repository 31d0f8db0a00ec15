// The C++ side of python/bench/overhead.py: the calls turbokv's Python `update_and_fetch` and
// `attention` make, timed without Python. One decode step into a TurboQuant cache of --tokens
// tokens: append one token then fetch the whole cache into buffers allocated once (the C++
// caller's best case), and fused attention of one query block. Prints one JSON line of medians.
//   turbokv_decode_step_cpp TOKENS KV_HEADS Q_HEADS HEAD_DIM BITS REPS THREADS
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "turbokv/attention.hpp"
#include "turbokv/prng.hpp"
#include "turbokv/timing.hpp"
#include "turbokv/turboquant_cache.hpp"

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: %s TOKENS KV_HEADS Q_HEADS HEAD_DIM BITS REPS THREADS\n", argv[0]);
    return 2;
  }
  const size_t tokens = std::strtoul(argv[1], nullptr, 10);
  const int kv_heads = std::atoi(argv[2]), q_heads = std::atoi(argv[3]), head_dim = std::atoi(argv[4]);
  const double bits = std::atof(argv[5]);
  const int reps = std::atoi(argv[6]);
  turbokv::AttentionOptions attention_options;
  attention_options.threads = std::atoi(argv[7]);
  try {
    turbokv::SplitMix64 rng(7);
    auto fill = [&](std::vector<float>& x) { for (auto& e : x) e = static_cast<float>(rng.normal()); };
    const size_t row = static_cast<size_t>(kv_heads) * head_dim;
    std::vector<float> k(row * (tokens - 1)), v(k.size()), k1(row), v1(row), q(static_cast<size_t>(q_heads) * head_dim),
        out(q.size());
    fill(k), fill(v), fill(k1), fill(v1), fill(q);
    turbokv::TurboQuantCacheOptions options;
    options.key_bits = options.value_bits = bits;
    turbokv::TurboQuantKVCache cache(kv_heads, head_dim, options);
    cache.append(k, v, tokens - 1);
    std::vector<float> all_k(row * tokens), all_v(all_k.size());
    // Wall time, and this thread's CPU time (what a loaded machine does not inflate; with one
    // attention thread all the work is on this thread).
    std::vector<double> step_s, attend_s, step_cpu, attend_cpu;
    for (int r = 0; r < reps; ++r) {
      const double t0 = turbokv::monotonic_seconds(), c0 = turbokv::thread_cpu_seconds();
      cache.append(k1, v1, 1);
      cache.fetch(all_k, all_v);
      const double t1 = turbokv::monotonic_seconds(), c1 = turbokv::thread_cpu_seconds();
      turbokv::attend(q, q_heads, 1, cache, out, attention_options);
      const double t2 = turbokv::monotonic_seconds(), c2 = turbokv::thread_cpu_seconds();
      cache.trim(1);
      step_s.push_back(t1 - t0);
      attend_s.push_back(t2 - t1);
      step_cpu.push_back(c1 - c0);
      attend_cpu.push_back(c2 - c1);
    }
    std::printf("{\"update_and_fetch_ms\": %.4f, \"attention_ms\": %.4f, \"update_and_fetch_cpu_ms\": %.4f, "
                "\"attention_cpu_ms\": %.4f}\n",
                1e3 * turbokv::median(step_s), 1e3 * turbokv::median(attend_s), 1e3 * turbokv::median(step_cpu),
                1e3 * turbokv::median(attend_cpu));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
