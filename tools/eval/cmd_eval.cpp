// `turbokv eval --model PATH [--tokenizer PATH] (--text FILE | --ids FILE) [--ctx N] [--max-tokens N]
// [--windows fresh|llama-perplexity] [--logits-out FILE] --kv LIST [--json]`: teacher-forced
// comparison of KV-cache configurations with the dense fp32 cache (issue 6; the method is
// described in engine/eval/evaluate.hpp). --ids, --windows llama-perplexity and --logits-out
// compute llama-perplexity's quantity on llama.cpp's own token ids and write the per-token
// distributions in its file format (issue 27, scripts/compare-llamacpp.sh).
#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <memory>
#include <span>
#include <vector>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "engine/eval/evaluate.hpp"
#include "engine/eval/llama_logits_file.hpp"
#include "engine/model/model_files.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "tools/command_registry.hpp"
#include "turbokv/error.hpp"

namespace turbokv::tools {
namespace {

struct EvalArgs {
  std::string model, tokenizer, text, ids, kv, windows = "fresh", logits_out;
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

// Whitespace-separated decimal token ids (as scripts/compare_llamacpp.py writes llama.cpp's).
std::vector<int> read_token_ids(const std::string& path) {
  std::istringstream in(read_text_file(path));
  std::vector<int> ids;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    int id = -1;
    try {
      id = std::stoi(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0) {
      throw Error(fmt::format("eval: '{}' in '{}' is not a token id", word, path));
    }
    ids.push_back(id);
  }
  return ids;
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
  auto* text = app.add_option("--text", args->text, "text file, tokenized line by line");
  auto* ids = app.add_option("--ids", args->ids, "token ids (whitespace-separated) to use as they are, not a text");
  text->excludes(ids);
  ids->excludes(text);
  app.add_option("--ctx", args->ctx, "positions per window, BOS included (default: the model's seq_len)")
      ->check(CLI::Range(2, 1 << 20));
  app.add_option("--max-tokens", args->max_tokens, "evaluate only the first N text tokens (0: all)");
  app.add_option("--windows", args->windows,
                 "fresh: windows of BOS + ctx-1 text tokens, all scored; llama-perplexity: llama-perplexity's "
                 "chunks of ctx tokens (first replaced by BOS), the second half scored")
      ->check(CLI::IsMember({"fresh", "llama-perplexity"}));
  app.add_option("--logits-out", args->logits_out,
                 "write the dense fp32 reference's distributions at the scored positions in llama-perplexity's "
                 "--kl-divergence-base format (needs --windows llama-perplexity)");
  app.add_option("--kv", args->kv, "comma-separated configurations, e.g. dense16,tq4,tq3,q4_0h,kivi2")
      ->required();
  app.add_option("--threads", args->threads, "worker threads (0: all cores)")->check(CLI::Range(0, 1024));
  app.add_flag("--json", args->json, "print one JSON object on stdout");
  app.add_flag("--no-progress", args->no_progress, "no progress bar on stderr");
  return [args] {
    if (args->text.empty() == args->ids.empty()) throw Error("eval: give --text or --ids");
    const auto specs = parse_kv_config_list(args->kv);
    engine::Model model = engine::load_model(engine::find_model_file(args->model));
    const std::string rope = engine::select_rope_factors(model.config, args->ctx > 0 ? args->ctx : model.config.seq_len);
    if (!rope.empty()) fmt::print(stderr, "eval: {}\n", rope);
    std::vector<int> tokens;
    if (!args->ids.empty()) {
      tokens = read_token_ids(args->ids);
    } else {
      const auto tokenizer = engine::load_tokenizer_for_model(model, args->tokenizer);
      tokens = engine::tokenize_lines(*tokenizer, read_text_file(args->text));
    }
    engine::EvalOptions options;
    options.ctx = args->ctx;
    options.max_tokens = args->max_tokens;
    options.protocol = engine::parse_window_protocol(args->windows);
    std::unique_ptr<engine::LlamaLogitsWriter> logits_out;
    if (!args->logits_out.empty()) {
      if (options.protocol != engine::WindowProtocol::llama_perplexity) {
        throw Error("eval: --logits-out writes llama-perplexity's format: it needs --windows llama-perplexity");
      }
      const int ctx = args->ctx > 0 ? args->ctx : model.config.seq_len;
      std::span<const int> used = tokens;
      if (args->max_tokens > 0 && used.size() > args->max_tokens) used = used.first(args->max_tokens);
      logits_out = std::make_unique<engine::LlamaLogitsWriter>(args->logits_out, ctx, model.config.vocab_size, used);
      options.reference_logits = [w = logits_out.get()](std::span<const float> logits) { w->add(logits); };
    }
    auto bar = std::make_shared<ProgressBar>();
    if (!args->no_progress) {
      options.progress = [bar](size_t done, size_t total, const std::string& what) { bar->update(done, total, what); };
    }
    ThreadPool pool(args->threads);
    const engine::EvalResult result = engine::evaluate_kv_configs(model, tokens, specs, options, pool);
    if (logits_out) logits_out->finish();
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
