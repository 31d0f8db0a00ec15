// `turbokv cache-bench`: memory and speed of one layer's TurboQuantKVCache next to the fp16
// DenseKVCache holding the same tokens: bytes per token, compression vs fp16, append and fetch
// throughput, save/load time. Data: Gaussian keys/values from the project PRNG (the codes' size
// does not depend on the data).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "tools/command_registry.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prng.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv::tools {
namespace {

struct CacheBenchOptions {
  int head_dim = 128;
  int kv_heads = 8;
  size_t tokens = 4096;
  double key_bits = 4;
  double value_bits = 4;
  size_t window = 0;
  size_t sinks = 0;
  std::string key_codec = "mse";
  size_t chunk = 1;
  int reps = 3;
  uint64_t seed = 1;
  bool json = false;
  std::string save;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Measured {
  size_t nbytes = 0;
  double append_s = 0;  // best of reps
  double fetch_s = 0;
  double save_s = 0;
  double load_s = 0;
};

// Appends the tokens in chunks (best of reps), fetches (best of reps), saves and loads (one
// layer per file, best of reps); `make` builds an empty cache.
template <typename Make>
Measured measure(const Make& make, const CacheBenchOptions& opt, const std::vector<float>& keys,
                 const std::vector<float>& values, const std::string& path, bool keep_file) {
  const size_t H = opt.kv_heads, D = opt.head_dim, N = opt.tokens;
  Measured m{0, 1e30, 1e30, 1e30, 1e30};
  std::unique_ptr<KVCache> cache;
  std::vector<float> ck, cv;
  for (int rep = 0; rep < opt.reps; ++rep) {
    cache = make();
    const auto start = Clock::now();
    for (size_t first = 0; first < N; first += opt.chunk) {
      const size_t n = std::min(opt.chunk, N - first);
      // The input is laid out chunk after chunk, each [H][n][D] (see make_input).
      const size_t offset = first * H * D;
      cache->append(std::span<const float>(keys).subspan(offset, n * H * D),
                    std::span<const float>(values).subspan(offset, n * H * D), n);
    }
    m.append_s = std::min(m.append_s, seconds_since(start));
  }
  m.nbytes = cache->nbytes();
  std::vector<float> fk(H * N * D), fv(H * N * D);
  for (int rep = 0; rep < opt.reps; ++rep) {
    const auto start = Clock::now();
    cache->fetch(fk, fv);
    m.fetch_s = std::min(m.fetch_s, seconds_since(start));
  }
  PromptCache prompt;
  prompt.add_layer(std::move(cache));
  for (int rep = 0; rep < opt.reps; ++rep) {
    auto start = Clock::now();
    save_prompt_cache(path, prompt);
    m.save_s = std::min(m.save_s, seconds_since(start));
    start = Clock::now();
    const PromptCache loaded = load_prompt_cache(path);
    m.load_s = std::min(m.load_s, seconds_since(start));
    if (loaded.size() != N) throw Error("cache-bench: the loaded cache lost tokens");
  }
  if (!keep_file) std::remove(path.c_str());
  return m;
}

// Keys and values for every chunk, each chunk [H][n][D], chunks back to back.
void make_input(const CacheBenchOptions& opt, std::vector<float>* keys, std::vector<float>* values) {
  const size_t H = opt.kv_heads, D = opt.head_dim, N = opt.tokens;
  SplitMix64 rng(opt.seed);
  keys->resize(H * N * D);
  values->resize(H * N * D);
  for (float& x : *keys) x = static_cast<float>(rng.normal());
  for (float& x : *values) x = static_cast<float>(rng.normal());
}

int run_cache_bench(const CacheBenchOptions& opt) {
  if (opt.head_dim < 2 || opt.kv_heads < 1 || opt.tokens < 1 || opt.chunk < 1 || opt.reps < 1) {
    throw Error("cache-bench: --head-dim >= 2, --kv-heads, --tokens, --chunk, --reps >= 1");
  }
  if (static_cast<double>(opt.tokens) * opt.kv_heads * opt.head_dim > 2e9) {
    throw Error("cache-bench: tokens * kv_heads * head_dim must stay below 2e9 floats");
  }
  TurboQuantCacheOptions tq;
  tq.key_bits = opt.key_bits;
  tq.value_bits = opt.value_bits;
  tq.window = opt.window;
  tq.sinks = opt.sinks;
  tq.key_codec = parse_codec_kind(opt.key_codec);
  std::vector<float> keys, values;
  make_input(opt, &keys, &values);

  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string tmp = fmt::format("{}/turbokv_cache_bench_{}", dir, ::getpid());
  const Measured t = measure(
      [&] { return std::make_unique<TurboQuantKVCache>(opt.kv_heads, opt.head_dim, tq); }, opt,
      keys, values, opt.save.empty() ? tmp + "_tq.safetensors" : opt.save, !opt.save.empty());
  const Measured d = measure(
      [&] { return std::make_unique<DenseKVCache>(opt.kv_heads, opt.head_dim, DenseDtype::f16); },
      opt, keys, values, tmp + "_fp16.safetensors", false);

  const double N = static_cast<double>(opt.tokens);
  const double bytes_per_token = t.nbytes / N;
  const double fp16_bytes_per_token = 2.0 * 2 * opt.kv_heads * opt.head_dim;
  if (opt.json) {
    const nlohmann::json out = {{"head_dim", opt.head_dim},
                                {"kv_heads", opt.kv_heads},
                                {"tokens", opt.tokens},
                                {"key_bits", opt.key_bits},
                                {"value_bits", opt.value_bits},
                                {"bytes_per_token", bytes_per_token},
                                {"fp16_bytes_per_token", fp16_bytes_per_token},
                                {"compression_vs_fp16", fp16_bytes_per_token / bytes_per_token},
                                {"append_tokens_per_s", N / t.append_s},
                                {"fetch_tokens_per_s", N / t.fetch_s},
                                {"save_ms", t.save_s * 1e3},
                                {"load_ms", t.load_s * 1e3}};
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print(
      "cache-bench: head_dim {}, kv_heads {}, {} tokens appended {} at a time, K {} bits ({}) / V "
      "{} bits, window {}, sinks {}; best of {}\n",
      opt.head_dim, opt.kv_heads, opt.tokens, opt.chunk, opt.key_bits, opt.key_codec,
      opt.value_bits, opt.window, opt.sinks, opt.reps);
  fmt::print("{:<12} {:>12} {:>10} {:>14} {:>14} {:>10} {:>10}\n", "cache", "bytes/token",
             "x_fp16", "append tok/s", "fetch tok/s", "save ms", "load ms");
  auto row = [&](const char* name, const Measured& m) {
    fmt::print("{:<12} {:>12.1f} {:>10.3f} {:>14.0f} {:>14.0f} {:>10.2f} {:>10.2f}\n", name,
               m.nbytes / N, fp16_bytes_per_token / (m.nbytes / N), N / m.append_s,
               N / m.fetch_s, m.save_s * 1e3, m.load_s * 1e3);
  };
  row("turboquant", t);
  row("dense fp16", d);
  if (!opt.save.empty()) fmt::print("saved the turboquant cache to {}\n", opt.save);
  return 0;
}

const CommandRegistration registration{"cache-bench", [](CLI::App& app) {
  auto opt = std::make_shared<CacheBenchOptions>();
  app.description("Bytes per token, compression vs fp16, append/fetch throughput and save/load "
                  "time of a TurboQuant KV cache (one layer)");
  app.add_option("--head-dim", opt->head_dim, "Head dimension")->capture_default_str();
  app.add_option("--kv-heads", opt->kv_heads, "Key/value heads")->capture_default_str();
  app.add_option("--tokens", opt->tokens, "Tokens in the cache")->capture_default_str();
  app.add_option("--key-bits", opt->key_bits, "Key bits (1-8, half widths allowed)")
      ->capture_default_str();
  app.add_option("--value-bits", opt->value_bits, "Value bits (1-8, half widths allowed)")
      ->capture_default_str();
  app.add_option("--kv-window,--window", opt->window, "Newest tokens kept exact")->capture_default_str();
  app.add_option("--kv-sinks,--sinks", opt->sinks, "First tokens kept exact")->capture_default_str();
  app.add_option("--kv-codec,--key-codec", opt->key_codec, "Key codec: mse or prod")->capture_default_str();
  app.add_option("--chunk", opt->chunk, "Tokens per append call (1 = decode steps)")
      ->capture_default_str();
  app.add_option("--reps", opt->reps, "Repetitions (best time is reported)")->capture_default_str();
  app.add_option("--seed", opt->seed, "Data seed")->capture_default_str();
  app.add_flag("--json", opt->json, "Print one JSON object instead of the table");
  app.add_option("--save", opt->save, "Also write the TurboQuant cache built to this file");
  return [opt] { return run_cache_bench(*opt); };
}};

}  // namespace
}  // namespace turbokv::tools
