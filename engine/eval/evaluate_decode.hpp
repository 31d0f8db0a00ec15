// Long-context decode speed (`turbokv decode-bench`, issue 6).
//
// For each context length, every configuration gets one cache per layer filled to that length
// with synthetic keys/values (turbokv/synthetic_kv.hpp: outlier RoPE pairs in keys, near-isotropic
// values; no prefill runs), then single-token decode steps of the model's forward pass are
// timed. The configurations of one context are stepped in turn (A, B, C, A, B, C, ...) so that
// load from other processes on a shared machine falls on all of them alike; a configuration's
// speed is 1 / its median step time. Each step appends its token, so the caches end at
// context + warmup + steps tokens.
//
// Batches (`batches`, default {1}): with a batch of b > 1 every configuration holds b sequences,
// each filled to the context, and a step is one BatchForward step of one token from each (what
// the server runs); its tokens/s is b / the median step time, and step_vs_batch1 the step's time
// over the same configuration's batch-1 step at that context (issue 13: a step of 16 should cost
// at most 6x one sequence's). A batch of 1 runs Forward's decode step, what `generate` runs
// (BatchForward computes the same rows with the same kernels).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "engine/model/model.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {

struct DecodeBenchOptions {
  std::vector<size_t> contexts;
  std::vector<KVConfigSpec> configs;
  std::vector<size_t> batches = {1};  // sequences stepped together
  int steps = 8;      // timed steps per configuration and context
  int warmup = 1;     // untimed steps first
  uint64_t seed = 0x6465636f6465ULL;
  // false: a step's time is wall-clock time. true: the process's CPU time during the step divided
  // by the pool's threads (idle pool threads sleep), i.e. what the step takes on otherwise idle
  // cores: the honest figure on a machine shared with other jobs, where wall time measures the
  // scheduler. Both are always recorded in the rows.
  bool cpu_time = false;
  // Called with a short note of what is happening (filling, stepping) for a progress line.
  std::function<void(const std::string&)> progress;
};

struct DecodeBenchRow {
  std::string config;
  size_t context = 0;
  size_t batch = 1;
  bool applicable = true;
  std::string problem;
  double tokens_per_s = 0;        // batch / median step time (of the clock chosen by cpu_time)
  double ms_per_token_median = 0; // chosen clock, a step / batch
  double ms_per_token_mean = 0;   // chosen clock, a step / batch
  double step_ms_median = 0;      // chosen clock, the whole step
  double wall_ms_median = 0;
  double cpu_ms_median = 0;       // process CPU time / threads
  size_t kv_bytes = 0;            // all layers and sequences, at the context length (before the steps)
  double fill_seconds = 0;        // appending the synthetic keys/values to every layer
  // Relative to dense16 at the same context and batch (0 when dense16 is not in the list).
  double speedup_vs_dense16 = 0;
  double kv_bytes_vs_dense16 = 0;
  // This step's time over the same configuration's batch-1 step at the same context (0 without
  // a batch of 1 in the list).
  double step_vs_batch1 = 0;
};

struct DecodeBenchResult {
  std::string model;
  std::string weights;     // weight type summary
  size_t weight_bytes = 0;
  int threads = 0;
  bool cpu_time = false;
  std::vector<DecodeBenchRow> rows;
};

// Throws turbokv::Error on empty lists, a zero context or batch, or steps < 1.
DecodeBenchResult run_decode_bench(const Model& model, const DecodeBenchOptions& options, ThreadPool& pool);

std::string format_decode_bench_table(const DecodeBenchResult& result);
// {"model":..,"rows":[{"config":..,"context":..,"batch":..,"tokens_per_s":..,"step_ms":..,
//   "kv_bytes":..,"speedup_vs_dense16":..,"step_vs_batch1":..}, ...]} (null numbers for
// not-applicable rows, for the speedup without a dense16 row and the step ratio without a batch
// of 1).
std::string format_decode_bench_json(const DecodeBenchResult& result);

}  // namespace turbokv::engine
