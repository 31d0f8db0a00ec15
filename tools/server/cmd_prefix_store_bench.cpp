// `turbokv prefix-store-bench`: what the shared prefix store (serve --prefix-store) buys and
// costs, with two replicas' schedulers in one process over a real Redis.
//
//   redis-server --port 6399 --save '' --appendonly no &
//   turbokv prefix-store-bench --model /tmp/llama32-1b-q8_0.gguf --prompt-tokens 2048 --extend-context
//       --prefix-store redis://127.0.0.1:6399
//
// For each prompt (random token ids, seeded): replica A computes it (time to first token, the
// bytes it writes to the store); a fresh replica B finds it in the store (time to first token,
// tokens restored; its first token must equal A's); a replica C whose store is down (nothing
// listens at --down-store) computes it (time to first token; the request must succeed). Bytes
// per prompt are compared with dense fp16 values of the same prefix (a dense value's size does
// not depend on the cached numbers, so it is measured by encoding a dense cache of that many
// tokens). Time to first token is measured from submit() (which includes the store lookup) to
// the first token, without HTTP. Prints a table, or one JSON object with --json.
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model/model.hpp"
#include "engine/model/model_files.hpp"
#include "engine/model/synthetic_model.hpp"
#include "engine/tokenizer/synthetic_tokenizer.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "server/prefix/prefix_store_redis.hpp"
#include "server/prefix/prefix_value.hpp"
#include "server/scheduling/scheduler.hpp"
#include "server/prefix/shared_prefixes.hpp"
#include "tools/command_registry.hpp"
#include "tools/model/kv_flags.hpp"
#include "turbokv/error.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::tools {
namespace {

struct BenchArgs {
  std::string model = "kjv-llama-3M.bin";
  std::string tokenizer;
  std::string store;
  std::string down_store = "redis://127.0.0.1:1";
  std::string cache = "turboquant:bits=4,window=32,sinks=1,exact=f16";
  size_t prompt_tokens = 2048;
  int prompts = 1;
  int threads = 0;
  size_t page_tokens = 32;
  int timeout_ms = 50;
  bool json_out = false;
  bool extend_context = false;
};

struct Run {
  double ttft = 0;
  std::string text;  // the generated token's text: equal on every replica
  size_t store_tokens = 0;
  bool ok = false;
  std::string error;
};

// Submits one greedy request for one token and waits for it.
Run run_one(server::Scheduler& s, const std::vector<int>& prompt) {
  server::GenerationRequest g;
  g.prompt = prompt;
  g.max_tokens = 1;
  g.ignore_eos = true;
  g.sampling.temperature = 0;
  auto h = std::make_shared<server::RequestHandle>();
  Run r;
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  if (s.submit(std::move(g), h, &why) != server::Scheduler::Admission::accepted) {
    r.error = why;
    return r;
  }
  server::StreamEvent ev;
  for (;;) {
    if (!h->wait_next(ev, std::chrono::seconds(3600))) {
      r.error = "timeout";
      return r;
    }
    if (ev.kind == server::StreamEvent::Kind::failed) {
      r.error = ev.error;
      return r;
    }
    if (ev.kind == server::StreamEvent::Kind::text) r.text += ev.text;
    if (ev.kind == server::StreamEvent::Kind::finished) {
      r.ttft = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      r.store_tokens = ev.usage.store_tokens;
      r.ok = true;
      return r;
    }
  }
}

int run_bench(const BenchArgs& a) {
  if (a.store.empty()) throw Error("prefix-store-bench: --prefix-store redis://HOST:PORT is required");
  engine::Model model;
  std::unique_ptr<engine::Tokenizer> tokenizer;
  if (a.model.rfind("synthetic:", 0) == 0) {
    ThreadPool pool(a.threads);
    model = engine::make_synthetic_model(a.model.substr(10), engine::parse_synthetic_weight_type("q8_0"), pool);
    tokenizer = std::make_unique<engine::SyntheticTokenizer>(model.config.vocab_size);
  } else {
    model = engine::load_model(engine::find_model_file(a.model));
    tokenizer = engine::load_tokenizer_for_model(model, a.tokenizer);
  }
  if (a.prompt_tokens + 8 > static_cast<size_t>(model.config.seq_len)) {
    if (!a.extend_context) {
      throw Error(fmt::format("--prompt-tokens {} does not fit the model's context of {} (--extend-context to run past it)",
                              a.prompt_tokens, model.config.seq_len));
    }
    // A random-weight file records a short context (the test writer's 512; Llama 3.2 itself has
    // 131072): nothing in the forward pass depends on it but this bound.
    if (!a.json_out) {
      fmt::print("note: context extended from the file's {} to {} tokens\n", model.config.seq_len, a.prompt_tokens + 8);
    }
    model.config.seq_len = static_cast<int>(a.prompt_tokens + 8);
  }
  const auto& c = model.config;
  server::SchedulerOptions so;
  so.cache = parse_kv_config(a.cache).config;
  so.kv_budget = size_t{8} << 30;
  so.parallel = 1;
  so.ctx = static_cast<int>(a.prompt_tokens + 8);
  so.threads = a.threads;
  so.page_tokens = a.page_tokens;
  so.prefix_cache = false;  // each replica starts cold: only the store can help
  server::RedisStoreOptions ro;
  ro.timeout_ms = a.timeout_ms;
  auto store = std::make_shared<server::RedisPrefixStore>(server::parse_redis_url(a.store), ro);
  auto down = std::make_shared<server::RedisPrefixStore>(server::parse_redis_url(a.down_store), ro);

  std::mt19937 rng(20261201);
  // Ids past the special ones, so no prompt token ends generation or means BOS.
  std::uniform_int_distribution<int> id(std::min(c.vocab_size - 1, 259), c.vocab_size - 1);
  nlohmann::json rows = nlohmann::json::array();
  double worst_speedup = 1e30, worst_ratio = 1e30;
  int failed = 0;
  for (int p = 0; p < a.prompts; ++p) {
    std::vector<int> prompt(a.prompt_tokens);
    prompt[0] = c.bos_id;
    for (size_t i = 1; i < prompt.size(); ++i) prompt[i] = id(rng);

    Run computed, restored, down_run;
    uint64_t bytes = 0;
    size_t value_tokens = 0;
    {
      so.prefix_store = store;
      server::Scheduler replica_a(model, *tokenizer, so);
      const uint64_t before = store->counters().write_bytes_total;
      computed = run_one(replica_a, prompt);
      store->flush(60000);
      bytes = store->counters().write_bytes_total - before;
    }
    {
      server::Scheduler replica_b(model, *tokenizer, so);
      restored = run_one(replica_b, prompt);
    }
    {
      so.prefix_store = down;
      server::Scheduler replica_c(model, *tokenizer, so);
      down_run = run_one(replica_c, prompt);
    }
    // Dense fp16 values of the same prefix.
    value_tokens = (prompt.size() - 1) / a.page_tokens * a.page_tokens;
    PromptCache dense = make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, parse_cache_config("dense"));
    {
      const std::vector<float> zeros(static_cast<size_t>(c.n_kv_heads * c.head_dim) * value_tokens, 0.0f);
      for (size_t l = 0; l < dense.n_layers(); ++l) dense.layer(l).append(zeros, zeros, value_tokens);
    }
    const server::PrefixIdentity id_dense{1, 2, static_cast<uint32_t>(a.page_tokens)};
    const size_t dense_bytes =
        server::encode_prefix_value(id_dense, std::span<const int>(prompt.data(), value_tokens), dense).size();
    for (const Run* r : {&computed, &restored, &down_run}) failed += r->ok ? 0 : 1;
    const bool same = computed.text == restored.text && computed.text == down_run.text;
    if (!same) ++failed;
    const double speedup = restored.ttft > 0 ? computed.ttft / restored.ttft : 0;
    const double ratio = bytes > 0 ? static_cast<double>(dense_bytes) / static_cast<double>(bytes) : 0;
    worst_speedup = std::min(worst_speedup, speedup);
    worst_ratio = std::min(worst_ratio, ratio);
    rows.push_back({{"prompt_tokens", prompt.size()},
                    {"ttft_computed_s", computed.ttft},
                    {"ttft_from_store_s", restored.ttft},
                    {"ttft_store_down_s", down_run.ttft},
                    {"speedup", speedup},
                    {"tokens_from_store", restored.store_tokens},
                    {"store_bytes", bytes},
                    {"dense_fp16_bytes", dense_bytes},
                    {"bytes_ratio", ratio},
                    {"bytes_per_token_per_layer", static_cast<double>(bytes) / static_cast<double>(value_tokens) / c.n_layers},
                    {"same_output", same},
                    {"errors", nlohmann::json::array({computed.error, restored.error, down_run.error})}});
  }
  if (a.json_out) {
    nlohmann::json out = {{"model", a.model}, {"cache", a.cache}, {"page_tokens", a.page_tokens}, {"rows", rows},
                          {"worst_speedup", worst_speedup}, {"worst_bytes_ratio", worst_ratio}, {"failed_requests", failed}};
    fmt::print("{}\n", out.dump());
    return failed == 0 ? 0 : 1;
  }
  fmt::print("prefix-store-bench: {}, cache {}, blocks of {} tokens, store {}\n", a.model, a.cache, a.page_tokens, a.store);
  fmt::print("| prompt tokens | TTFT computed (s) | TTFT from store (s) | speed-up | tokens from store | TTFT store down (s) | "
             "bytes in store | dense fp16 bytes | fewer bytes | bytes/token/layer |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& r : rows) {
    fmt::print("| {} | {:.2f} | {:.3f} | {:.1f}x | {} | {:.2f} | {} | {} | {:.2f}x | {:.1f} |\n", r["prompt_tokens"].get<size_t>(),
               r["ttft_computed_s"].get<double>(), r["ttft_from_store_s"].get<double>(), r["speedup"].get<double>(),
               r["tokens_from_store"].get<size_t>(), r["ttft_store_down_s"].get<double>(), r["store_bytes"].get<uint64_t>(),
               r["dense_fp16_bytes"].get<size_t>(), r["bytes_ratio"].get<double>(), r["bytes_per_token_per_layer"].get<double>());
  }
  fmt::print("failed or differing requests: {} (every replica must answer, with the same token)\n", failed);
  return failed == 0 ? 0 : 1;
}

const CommandRegistration registration{"prefix-store-bench", [](CLI::App& app) {
  app.description("Two replicas over a Redis prefix store: time to first token computed vs restored, bytes per prompt");
  auto a = std::make_shared<BenchArgs>();
  app.add_option("--model", a->model, "llama2.c .bin or .gguf, or synthetic:SHAPE")->capture_default_str();
  app.add_option("--tokenizer", a->tokenizer, "tokenizer.bin for a llama2.c model");
  app.add_option("--prefix-store", a->store, "redis://HOST:PORT[/DB] of a running Redis")->required();
  app.add_option("--down-store", a->down_store, "a Redis URL where nothing answers (the store-down replica)")
      ->capture_default_str();
  app.add_option("--cache", a->cache, "cache configuration (serve's default)")->capture_default_str();
  app.add_option("--prompt-tokens", a->prompt_tokens, "tokens per prompt")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  app.add_option("--prompts", a->prompts, "prompts (each computed twice: ~70 s per 2K on 2 cores)")
      ->capture_default_str()->check(CLI::Range(1, 100));
  app.add_option("--kv-page-tokens", a->page_tokens, "page and block size")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--prefix-store-timeout", a->timeout_ms, "ms per Redis call")->capture_default_str();
  app.add_option("--threads", a->threads, "threads (0: all cores)")->capture_default_str();
  app.add_flag("--extend-context", a->extend_context,
               "run prompts longer than the model file's context (random-weight files record a short one)");
  app.add_flag("--json", a->json_out, "print one JSON object");
  return [a] { return run_bench(*a); };
}};

}  // namespace
}  // namespace turbokv::tools
