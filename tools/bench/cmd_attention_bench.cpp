// `turbokv attention-bench`: one decode step of attention per layer, side by side on the same
// data: the dense fp16 path, dequantize-then-attend (the Python original's path) and the fused
// TurboQuant path in exact and in int8 arithmetic (AttentionArithmetic), with the machine's
// streaming read bandwidth measured in the same run and the bandwidth floors (bytes each path
// must read / bandwidth).
//
// Enough layers are built that each format's caches exceed twice the last-level cache (the
// packed format gets more layers than fp16), and each timed step walks all of them in order,
// as a decode step does, so the reads come from memory (--layers overrides the count, e.g. 1
// to time the paths on cache-resident data).
// Times are per layer: the median over repeated steps after a warm-up step.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tools/command_registry.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#include "turbokv/synthetic_kv.hpp"
#include "turbokv/timing.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv::tools {
namespace {

struct BenchOptions {
  size_t context = 4096;
  int head_dim = 128;
  int q_heads = 32;
  int kv_heads = 8;
  double key_bits = 4;
  double value_bits = 4;
  std::string key_codec = "mse";
  int threads = 0;
  int queries = 1;
  int repeats = 9;
  int dequant_repeats = 0;  // 0: 3, or 1 at >= 16K tokens
  int layers = 0;           // 0: enough for the fp16 caches to exceed 2 x LLC
  bool json = false;
};

struct Timing {
  double wall_ms = 0;
  double cpu_ms = 0;  // process CPU time / threads
};

// Last-level cache size from sysfs (index3 = L3 on x86); 32 MiB if unreadable.
size_t last_level_cache_bytes() {
  for (const char* path : {"/sys/devices/system/cpu/cpu0/cache/index3/size",
                           "/sys/devices/system/cpu/cpu0/cache/index2/size"}) {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text) || text.empty()) continue;
    size_t value = 0, i = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') value = value * 10 + (text[i++] - '0');
    const char unit = i < text.size() ? text[i] : 'B';
    if (unit == 'K') value <<= 10;
    else if (unit == 'M') value <<= 20;
    else if (unit == 'G') value <<= 30;
    if (value > 0) return value;
  }
  return size_t{32} << 20;
}

// Time of a streaming read of a buffer of `bytes`, split across `threads` threads (median of
// several passes after one warm-up pass); *bytes_read gets the bytes one pass reads.
Timing read_bandwidth_time(size_t bytes, int threads, double* bytes_read) {
  const size_t words = bytes / sizeof(uint64_t);
  std::vector<uint64_t> buffer(words);
  for (size_t i = 0; i < words; ++i) buffer[i] = i * 0x9e3779b97f4a7c15ULL;
  std::vector<uint64_t> sinks(threads);
  auto pass = [&] {
    std::vector<std::thread> workers;
    const double start = monotonic_seconds();
    const double cpu_start = process_cpu_seconds();
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        const size_t begin = words / threads * t;
        const size_t end = t + 1 == threads ? words : words / threads * (t + 1);
        uint64_t a = 0, b = 0, c = 0, d = 0;
        size_t i = begin;
        for (; i + 4 <= end; i += 4) {
          a += buffer[i];
          b ^= buffer[i + 1];
          c += buffer[i + 2];
          d ^= buffer[i + 3];
        }
        sinks[t] = a + b + c + d;
      });
    }
    for (auto& w : workers) w.join();
    return std::make_pair(monotonic_seconds() - start, (process_cpu_seconds() - cpu_start) / threads);
  };
  pass();
  std::vector<double> wall, cpu;
  for (int r = 0; r < 7; ++r) {
    const auto [w, c] = pass();
    wall.push_back(w);
    cpu.push_back(c);
  }
  uint64_t guard = 0;
  for (uint64_t s : sinks) guard += s;
  if (guard == 42) fmt::print(stderr, " ");
  *bytes_read = static_cast<double>(words * sizeof(uint64_t));
  return {median(wall) * 1e3, median(cpu) * 1e3};
}

// The 1-minute load average (/proc/loadavg), recorded because other processes on a small
// machine distort timings; -1 if unreadable.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double value = -1.0;
  in >> value;
  return in ? value : -1.0;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

int run_bench(const BenchOptions& o) {
  if (o.context < 1 || o.head_dim < 2 || o.q_heads < 1 || o.kv_heads < 1 || o.queries < 1 ||
      o.repeats < 1) {
    throw Error("attention-bench: context, head-dim, heads, queries and repeats must be positive");
  }
  if (o.layers < 0 || o.layers > 4096) throw Error("attention-bench: --layers must be 0..4096");
  if (o.q_heads % o.kv_heads != 0) {
    throw Error(fmt::format("attention-bench: --q-heads {} is not a multiple of --kv-heads {}",
                            o.q_heads, o.kv_heads));
  }
  if (static_cast<size_t>(o.queries) > o.context) {
    throw Error("attention-bench: --queries must not exceed --context");
  }
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  TurboQuantCacheOptions tq;
  tq.key_bits = o.key_bits;
  tq.value_bits = o.value_bits;
  tq.key_codec = parse_codec_kind(o.key_codec);

  const size_t llc = last_level_cache_bytes();
  const size_t fp16_layer_bytes = o.context * o.kv_heads * static_cast<size_t>(o.head_dim) * 2 * 2;
  // --layers 1 with a small context keeps both caches in the LLC: the paths' compute cost alone.
  const int layers = o.layers > 0 ? o.layers : static_cast<int>(2 * llc / fp16_layer_bytes + 1);

  // Caches of synthetic model-like tokens (turbokv/synthetic_kv.hpp), one seed per layer.
  std::vector<std::unique_ptr<DenseKVCache>> dense;
  std::vector<std::unique_ptr<TurboQuantKVCache>> packed;
  std::vector<SyntheticKV> data;
  for (int layer = 0; layer < layers; ++layer) {
    SyntheticKVOptions so;
    so.kv_heads = o.kv_heads;
    so.q_heads = o.q_heads;
    so.head_dim = o.head_dim;
    so.n_tokens = o.context;
    so.n_queries = o.queries;
    so.seed = 0x617474656e74ULL + static_cast<uint64_t>(layer);
    data.push_back(make_synthetic_kv(so));
    dense.push_back(std::make_unique<DenseKVCache>(o.kv_heads, o.head_dim, DenseDtype::f16));
    dense.back()->append(data.back().keys, data.back().values, o.context);
  }
  // The packed caches get as many layers as their own bytes need to exceed 2 x LLC (cycling
  // through the synthetic layers), so they too are read from memory, not from the LLC.
  auto add_packed_layer = [&] {
    const SyntheticKV& kv = data[packed.size() % data.size()];
    packed.push_back(std::make_unique<TurboQuantKVCache>(o.kv_heads, o.head_dim, tq));
    packed.back()->append(kv.keys, kv.values, o.context);
  };
  add_packed_layer();
  const size_t packed_layer_bytes = packed[0]->nbytes();
  const int packed_layers = o.layers > 0 ? o.layers : static_cast<int>(2 * llc / packed_layer_bytes + 1);
  while (static_cast<int>(packed.size()) < packed_layers) add_packed_layer();
  auto packed_queries = [&](int layer) -> const std::vector<float>& { return data[layer % data.size()].queries; };
  const std::vector<float>& keys0 = data[0].keys;
  const std::vector<float>& values0 = data[0].values;

  double stream_bytes = 0;
  const Timing stream = read_bandwidth_time(std::max<size_t>(4 * llc, size_t{256} << 20), threads, &stream_bytes);
  const double bandwidth = stream_bytes / (stream.wall_ms * 1e-3);
  const double bandwidth_cpu = stream_bytes / (stream.cpu_ms * 1e-3);

  AttentionOptions options;
  options.threads = threads;
  options.arithmetic = AttentionArithmetic::exact;
  AttentionOptions int8_options = options;
  int8_options.arithmetic = AttentionArithmetic::int8;
  const size_t out_size = static_cast<size_t>(o.q_heads) * o.queries * o.head_dim;
  std::vector<float> out(out_size);
  // One decode step over every layer; returns seconds per layer.
  auto step = [&](int path) {
    const double start = monotonic_seconds();
    const double cpu_start = process_cpu_seconds();
    const int walked = path == 0 ? layers : (path == 1 ? 1 : packed_layers);
    for (int layer = 0; layer < walked; ++layer) {
      if (path == 0) attend(data[layer].queries, o.q_heads, o.queries, *dense[layer], out, options);
      if (path == 1) attend_dequantized(packed_queries(layer), o.q_heads, o.queries, *packed[layer], out, options);
      if (path == 2) attend(packed_queries(layer), o.q_heads, o.queries, *packed[layer], out, options);
      if (path == 3) attend(packed_queries(layer), o.q_heads, o.queries, *packed[layer], out, int8_options);
    }
    const double cpu_threads = path == 1 ? 1.0 : threads;  // the dequantize path is serial
    return Timing{(monotonic_seconds() - start) / walked * 1e3,
                  (process_cpu_seconds() - cpu_start) / cpu_threads / walked * 1e3};
  };
  auto time_path = [&](int path, int repeats) {
    step(path);  // warm-up
    std::vector<double> wall, cpu;
    for (int r = 0; r < repeats; ++r) {
      const Timing t = step(path);
      wall.push_back(t.wall_ms);
      cpu.push_back(t.cpu_ms);
    }
    return Timing{median(wall), median(cpu)};
  };
  const int dequant_repeats = o.dequant_repeats > 0 ? o.dequant_repeats : (o.context >= 16384 ? 1 : 3);
  // Interleave fp16 and fused timing so slow drifts of a shared machine hit both alike.
  const Timing fp16_a = time_path(0, (o.repeats + 1) / 2);
  const Timing fused_a = time_path(2, (o.repeats + 1) / 2);
  const Timing int8_a = time_path(3, (o.repeats + 1) / 2);
  const Timing fp16_b = time_path(0, o.repeats / 2 + 1);
  const Timing fused_b = time_path(2, o.repeats / 2 + 1);
  const Timing int8_b = time_path(3, o.repeats / 2 + 1);
  const double int8_ms = std::min(int8_a.wall_ms, int8_b.wall_ms);
  const double int8_cpu_ms = std::min(int8_a.cpu_ms, int8_b.cpu_ms);
  const Timing dequant = time_path(1, dequant_repeats);
  const double fp16_ms = std::min(fp16_a.wall_ms, fp16_b.wall_ms);
  const double fused_ms = std::min(fused_a.wall_ms, fused_b.wall_ms);
  const double dequant_ms = dequant.wall_ms;
  const double fp16_cpu_ms = std::min(fp16_a.cpu_ms, fp16_b.cpu_ms);
  const double fused_cpu_ms = std::min(fused_a.cpu_ms, fused_b.cpu_ms);
  const double dequant_cpu_ms = dequant.cpu_ms;

  // Accuracy on layer 0 against float64 attention over the original vectors.
  const std::vector<float>& queries0 = data[0].queries;
  std::vector<float> exact(out_size), fp16_out(out_size), fused_out(out_size), int8_out(out_size);
  attend_reference(queries0, o.q_heads, o.queries, keys0, values0, o.kv_heads, o.context,
                   o.head_dim, exact);
  attend(queries0, o.q_heads, o.queries, *dense[0], fp16_out, options);
  attend(queries0, o.q_heads, o.queries, *packed[0], fused_out, options);
  attend(queries0, o.q_heads, o.queries, *packed[0], int8_out, int8_options);
  const double rel_error_fp16 = rel_l2(fp16_out, exact);
  const double rel_error_fused = rel_l2(fused_out, exact);
  const double rel_error_int8 = rel_l2(int8_out, exact);
  // The fused path must reproduce dequantize-then-attend (same codes) up to float rounding.
  std::vector<float> dequant_out(out_size);
  attend_dequantized(queries0, o.q_heads, o.queries, *packed[0], dequant_out, options);
  const double rel_error_dequant = rel_l2(dequant_out, exact);
  const double fused_vs_dequant = rel_l2(fused_out, dequant_out);

  const double fp16_bytes = static_cast<double>(dense[0]->nbytes());
  const double fused_bytes = static_cast<double>(packed[0]->nbytes());
  const double fp16_floor_ms = fp16_bytes / bandwidth * 1e3;
  const double fused_floor_ms = fused_bytes / bandwidth * 1e3;
  const double fp16_floor_cpu_ms = fp16_bytes / bandwidth_cpu * 1e3;
  const double fused_floor_cpu_ms = fused_bytes / bandwidth_cpu * 1e3;

  if (o.json) {
    nlohmann::json j;
    j["context"] = o.context;
    j["head_dim"] = o.head_dim;
    j["q_heads"] = o.q_heads;
    j["kv_heads"] = o.kv_heads;
    j["key_bits"] = o.key_bits;
    j["value_bits"] = o.value_bits;
    j["key_codec"] = o.key_codec;
    j["threads"] = threads;
    j["queries"] = o.queries;
    j["layers"] = layers;
    j["packed_layers"] = packed_layers;
    j["llc_bytes"] = llc;
    j["bandwidth_gb_s"] = bandwidth / 1e9;
    j["fp16_bytes_per_layer"] = fp16_bytes;
    j["fused_bytes_per_layer"] = fused_bytes;
    j["fp16_ms"] = fp16_ms;
    j["dequant_ms"] = dequant_ms;
    j["fused_ms"] = fused_ms;
    j["fp16_floor_ms"] = fp16_floor_ms;
    j["fused_floor_ms"] = fused_floor_ms;
    j["speedup_vs_fp16"] = fp16_ms / fused_ms;
    j["speedup_vs_dequant"] = dequant_ms / fused_ms;
    j["int8_ms"] = int8_ms;
    j["int8_speedup_vs_fp16"] = fp16_ms / int8_ms;
    j["rel_error_int8"] = rel_error_int8;
    j["cpu"] = {{"bandwidth_gb_s", bandwidth_cpu / 1e9},      {"fp16_ms", fp16_cpu_ms},
                {"dequant_ms", dequant_cpu_ms},                {"fused_ms", fused_cpu_ms},
                {"fp16_floor_ms", fp16_floor_cpu_ms},          {"fused_floor_ms", fused_floor_cpu_ms},
                {"speedup_vs_fp16", fp16_cpu_ms / fused_cpu_ms}, {"speedup_vs_dequant", dequant_cpu_ms / fused_cpu_ms},
                {"int8_ms", int8_cpu_ms},                      {"int8_speedup_vs_fp16", fp16_cpu_ms / int8_cpu_ms}};
    j["rel_error_fused"] = rel_error_fused;
    j["rel_error_fp16"] = rel_error_fp16;
    j["rel_error_dequant"] = rel_error_dequant;
    j["fused_vs_dequant"] = fused_vs_dequant;
    j["load_average"] = load_average();
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print("attention-bench: context {} head_dim {} heads {}/{} key {} {} bits, value {} bits, "
             "{} queries, {} threads\n",
             o.context, o.head_dim, o.q_heads, o.kv_heads, o.key_codec, o.key_bits, o.value_bits,
             o.queries, threads);
  fmt::print("{} fp16 layers ({:.1f} MiB, {} 2 x LLC), {} packed layers ({:.1f} MiB), LLC {:.0f} MiB; "
             "read bandwidth {:.1f} GB/s\n",
             layers, layers * fp16_bytes / 1048576.0, layers * fp16_bytes > 2.0 * llc ? ">" : "<=",
             packed_layers, packed_layers * fused_bytes / 1048576.0, llc / 1048576.0, bandwidth / 1e9);
  fmt::print("{:<22} {:>10} {:>10} {:>12} {:>10} {:>12}\n", "path", "ms/layer", "floor ms",
             "MiB/layer", "vs fp16", "rel error");
  fmt::print("{:<22} {:>10.3f} {:>10.3f} {:>12.2f} {:>10.2f} {:>12.2e}\n", "fp16 dense", fp16_ms,
             fp16_floor_ms, fp16_bytes / 1048576.0, 1.0, rel_error_fp16);
  fmt::print("{:<22} {:>10.3f} {:>10} {:>12.2f} {:>10.2f} {:>12.2e}\n", "dequantize+attend", dequant_ms,
             "-", fused_bytes / 1048576.0, fp16_ms / dequant_ms, rel_error_dequant);
  fmt::print("{:<22} {:>10.3f} {:>10.3f} {:>12.2f} {:>10.2f} {:>12.2e}\n", "fused turboquant",
             fused_ms, fused_floor_ms, fused_bytes / 1048576.0, fp16_ms / fused_ms, rel_error_fused);
  fmt::print("{:<22} {:>10.3f} {:>10.3f} {:>12.2f} {:>10.2f} {:>12.2e}\n", "fused int8", int8_ms,
             fused_floor_ms, fused_bytes / 1048576.0, fp16_ms / int8_ms, rel_error_int8);
  fmt::print("CPU time / threads (what an otherwise idle machine would take): bandwidth {:.1f} GB/s; "
             "fp16 {:.3f} ms (floor {:.3f}), dequantize {:.3f} ms, fused {:.3f} ms (floor {:.3f}), "
             "fused vs fp16 {:.2f}x, int8 {:.3f} ms ({:.2f}x)\n",
             bandwidth_cpu / 1e9, fp16_cpu_ms, fp16_floor_cpu_ms, dequant_cpu_ms, fused_cpu_ms,
             fused_floor_cpu_ms, fp16_cpu_ms / fused_cpu_ms, int8_cpu_ms, fp16_cpu_ms / int8_cpu_ms);
  fmt::print("fused vs dequantize+attend: rel L2 {:.2e}; load average during run {:.2f}\n",
             fused_vs_dequant, load_average());
  return 0;
}

const CommandRegistration registration{"attention-bench", [](CLI::App& app) {
  app.description("Time one decode step of attention: fp16, dequantize-then-attend, fused TurboQuant");
  auto o = std::make_shared<BenchOptions>();
  app.add_option("--context", o->context, "Tokens in each layer's cache")->capture_default_str();
  app.add_option("--head-dim", o->head_dim, "Head dimension")->capture_default_str();
  app.add_option("--q-heads", o->q_heads, "Query heads")->capture_default_str();
  app.add_option("--kv-heads", o->kv_heads, "Key/value heads")->capture_default_str();
  app.add_option("--key-bits", o->key_bits, "TurboQuant key bits (1-8, half widths allowed)")->capture_default_str();
  app.add_option("--value-bits", o->value_bits, "TurboQuant value bits")->capture_default_str();
  app.add_option("--kv-codec,--key-codec", o->key_codec, "Key codec: mse or prod")->capture_default_str();
  app.add_option("--threads", o->threads, "Threads (0: all cores)")->capture_default_str();
  app.add_option("--queries", o->queries, "Queries per head (1: decode)")->capture_default_str();
  app.add_option("--repeats", o->repeats, "Timed steps for the fp16 and fused paths")->capture_default_str();
  app.add_option("--dequant-repeats", o->dequant_repeats, "Timed steps for the dequantize path (0: auto)");
  app.add_option("--layers", o->layers,
                 "Layers to build and walk (0: enough for the fp16 caches to exceed 2 x LLC; 1 at a "
                 "small context: cache-resident, compute cost only)")->capture_default_str();
  app.add_flag("--json", o->json, "Print one JSON object");
  return [o] { return run_bench(*o); };
}};

}  // namespace
}  // namespace turbokv::tools
