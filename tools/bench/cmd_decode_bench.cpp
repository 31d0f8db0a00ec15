// `turbokv decode-bench (--model PATH | --synthetic NAME) [--weights f32|f16|q8_0|q4_k|...] --context LIST
// --kv LIST [--batch LIST] [--steps N] [--json]`: decode speed at long contexts with caches filled by synthetic
// keys/values (issue 6; the method is described in engine/eval/evaluate_decode.hpp).
#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <vector>

#include "engine/eval/evaluate_decode.hpp"
#include "engine/model/model_files.hpp"
#include "engine/model/synthetic_model.hpp"
#include "tools/command_registry.hpp"
#include "turbokv/error.hpp"

namespace turbokv::tools {
namespace {

struct DecodeBenchArgs {
  std::string model, synthetic, weights = "q8_0", contexts, kv;
  std::vector<size_t> batches = {1};
  int steps = 8;
  int warmup = 1;
  int threads = 0;
  bool json = false;
  bool cpu_time = false;
  bool quiet = false;
};

// "4096,32768" or with a K suffix ("4K,32K" = 4096, 32768).
std::vector<size_t> parse_contexts(const std::string& list) {
  std::vector<size_t> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    std::string item = list.substr(start, end - start);
    if (!item.empty()) {
      size_t mult = 1;
      if (item.back() == 'K' || item.back() == 'k') {
        mult = 1024;
        item.pop_back();
      }
      size_t v = 0;
      const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
      if (ec != std::errc() || p != item.data() + item.size() || v == 0 || v > (size_t{1} << 24) / mult) {
        throw Error(fmt::format("decode-bench: bad context length '{}' in '{}'", list.substr(start, end - start), list));
      }
      out.push_back(v * mult);
    }
    start = end + 1;
  }
  if (out.empty()) throw Error(fmt::format("decode-bench: no context length in '{}'", list));
  return out;
}

const CommandRegistration registration{"decode-bench", [](CLI::App& app) {
  app.description("Decode tokens/s and KV bytes at long contexts, caches filled with synthetic keys/values");
  auto args = std::make_shared<DecodeBenchArgs>();
  auto* model = app.add_option("--model", args->model, "model file (llama2.c .bin or GGUF)");
  auto* synthetic = app.add_option("--synthetic", args->synthetic,
                                   "random-weight model with a real shape: llama-3.2-1b, llama-3.1-8b, qwen3-0.6b, "
                                   "qwen3-30b-a3b-16e, gemma3-1b, gemma3-4b, phi-4-mini");
  model->excludes(synthetic);
  app.add_option("--weights", args->weights,
                 "weight type of a synthetic model: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, "
                 "q4_k, q5_k, q6_k, iq4_xs (default q8_0)");
  app.add_option("--context", args->contexts, "comma-separated context lengths, e.g. 4096,32768 or 4K,32K")->required();
  app.add_option("--kv", args->kv, "comma-separated configurations, e.g. dense16,tq4,tq3")->required();
  app.add_option("--batch", args->batches,
                 "comma-separated batch sizes: sequences stepped together (BatchForward, as the server), e.g. 1,16 "
                 "(default 1)")
      ->delimiter(',')
      ->check(CLI::Range(size_t{1}, size_t{4096}));
  app.add_option("--steps", args->steps, "timed decode steps per configuration and context (default 8)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--warmup", args->warmup, "untimed steps first (default 1)")->check(CLI::Range(0, 1000));
  app.add_option("--threads", args->threads, "worker threads (0: all cores)")->check(CLI::Range(0, 1024));
  app.add_flag("--cpu-time", args->cpu_time,
               "time steps by process CPU time / threads instead of wall clock (a machine shared with other jobs)");
  app.add_flag("--json", args->json, "print one JSON object on stdout");
  app.add_flag("--quiet", args->quiet, "no progress lines on stderr");
  return [args] {
    if (args->model.empty() == args->synthetic.empty()) {
      throw Error("decode-bench: give exactly one of --model PATH or --synthetic NAME");
    }
    engine::DecodeBenchOptions options;
    options.contexts = parse_contexts(args->contexts);
    options.configs = parse_kv_config_list(args->kv);
    options.batches = args->batches;
    options.steps = args->steps;
    options.warmup = args->warmup;
    options.cpu_time = args->cpu_time;
    if (!args->quiet) {
      options.progress = [](const std::string& s) {
        fmt::print(stderr, "decode-bench: {}\n", s);
        std::fflush(stderr);
      };
    }
    ThreadPool pool(args->threads);
    engine::Model m;
    if (!args->synthetic.empty()) {
      const auto type = engine::parse_synthetic_weight_type(args->weights);
      if (!args->quiet) fmt::print(stderr, "decode-bench: building {} with random {} weights\n", args->synthetic, args->weights);
      m = engine::make_synthetic_model(args->synthetic, type, pool);
    } else {
      m = engine::load_model(engine::find_model_file(args->model));
    }
    const engine::DecodeBenchResult result = engine::run_decode_bench(m, options, pool);
    if (args->json) {
      fmt::print("{}\n", engine::format_decode_bench_json(result));
    } else {
      fmt::print("{}", engine::format_decode_bench_table(result));
    }
    return 0;
  };
}};

}  // namespace
}  // namespace turbokv::tools
