// `turbokv eval --model PATH [--tokenizer PATH] --text FILE [--ctx N] [--max-tokens N] --kv LIST
// [--json]`: teacher-forced comparison of KV-cache configurations with the dense fp32 cache
// (issue 6; the method is described in engine/eval/evaluate.hpp).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "engine/eval/evaluate.hpp"
#include "engine/model/model_files.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "tools/command_registry.hpp"
#include "turbokv/error.hpp"

namespace turbokv::tools {
namespace {

struct EvalArgs {
  std::string model, tokenizer, text, kv;
  int ctx = 0;
  size_t max_tokens = 0;
  int threads = 0;
  bool json = false;
  bool no_progress = false;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("eval: cannot open text file '{}'", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(fmt::format("eval: error reading '{}'", path));
  return ss.str();
}

// A one-line progress bar on stderr, redrawn at most ~10 times a second (every step when
// stderr is not a terminal would flood logs, so then only every 10%).
class ProgressBar {
 public:
  ProgressBar() : tty_(isatty(fileno(stderr)) != 0), start_(std::chrono::steady_clock::now()) {}
  void update(size_t done, size_t total, const std::string& what) {
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const int percent = total ? static_cast<int>(100 * done / total) : 100;
    if (tty_) {
      if (done != total && now - last_ < std::chrono::milliseconds(100)) return;
    } else if (percent / 10 == last_percent_ / 10 && done != total) {
      return;
    }
    last_ = now;
    last_percent_ = percent;
    constexpr int width = 30;
    const int filled = total ? static_cast<int>(width * done / total) : width;
    const double eta = done ? elapsed * static_cast<double>(total - done) / static_cast<double>(done) : 0.0;
    fmt::print(stderr, "{}[{}{}] {:3d}% {}/{} runs, {:.0f}s, eta {:.0f}s  {:<24}{}", tty_ ? "\r" : "",
               std::string(static_cast<size_t>(filled), '#'), std::string(static_cast<size_t>(width - filled), '.'),
               percent, done, total, elapsed, eta, what, tty_ && done != total ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_{};
  int last_percent_ = -100;
};

const CommandRegistration registration{"eval", [](CLI::App& app) {
  app.description(
      "Teacher-force a text and compare KV-cache configurations with the dense fp32 cache "
      "(logit cosine, top-1 agreement, perplexity, KL, bits/value)");
  auto args = std::make_shared<EvalArgs>();
  app.add_option("--model", args->model, "model file (llama2.c .bin or GGUF)")->required();
  app.add_option("--tokenizer", args->tokenizer,
                 "tokenizer file (default: the GGUF's own, or tok512.bin next to a llama2.c model)");
  app.add_option("--text", args->text, "text file, tokenized line by line")->required();
  app.add_option("--ctx", args->ctx, "positions per window, BOS included (default: the model's seq_len)")
      ->check(CLI::Range(2, 1 << 20));
  app.add_option("--max-tokens", args->max_tokens, "evaluate only the first N text tokens (0: all)");
  app.add_option("--kv", args->kv, "comma-separated configurations, e.g. dense16,tq4,tq3,q4_0h,kivi2")
      ->required();
  app.add_option("--threads", args->threads, "worker threads (0: all cores)")->check(CLI::Range(0, 1024));
  app.add_flag("--json", args->json, "print one JSON object on stdout");
  app.add_flag("--no-progress", args->no_progress, "no progress bar on stderr");
  return [args] {
    const auto specs = parse_kv_config_list(args->kv);
    engine::Model model = engine::load_model(engine::find_model_file(args->model));
    const std::string rope = engine::select_rope_factors(model.config, args->ctx > 0 ? args->ctx : model.config.seq_len);
    if (!rope.empty()) fmt::print(stderr, "eval: {}\n", rope);
    const auto tokenizer = engine::load_tokenizer_for_model(model, args->tokenizer);
    const std::string text = read_text_file(args->text);
    const std::vector<int> tokens = engine::tokenize_lines(*tokenizer, text);
    engine::EvalOptions options;
    options.ctx = args->ctx;
    options.max_tokens = args->max_tokens;
    auto bar = std::make_shared<ProgressBar>();
    if (!args->no_progress) {
      options.progress = [bar](size_t done, size_t total, const std::string& what) { bar->update(done, total, what); };
    }
    ThreadPool pool(args->threads);
    const engine::EvalResult result = engine::evaluate_kv_configs(model, tokens, specs, options, pool);
    if (args->json) {
      fmt::print("{}\n", engine::format_eval_json(result));
    } else {
      fmt::print("{}", engine::format_eval_table(result));
    }
    return 0;
  };
}};

}  // namespace
}  // namespace turbokv::tools
