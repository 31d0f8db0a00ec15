// `turbokv serve`: the OpenAI-compatible server (server/), continuous batching under one KV
// memory budget, TurboQuant 4-bit caches by default.
//
//   turbokv serve --model kjv-llama-3M.bin --port 8080 --kv-budget 512MiB
//
// Prints "listening on http://HOST:PORT" once bound (before the model loads; /health answers
// 503 until it has). SIGTERM or SIGINT: stop admitting, let in-flight requests finish (up to
// --shutdown-grace seconds), cancel the rest, exit 0.
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <algorithm>
#include <memory>
#include <pthread.h>

#include "engine/model/gguf.hpp"
#include "engine/model/model.hpp"
#include "engine/model/model_files.hpp"
#include "engine/model/synthetic_model.hpp"
#include "engine/tokenizer/synthetic_tokenizer.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "server/http/api_server.hpp"
#include "server/prefix/prefix_store_disk.hpp"
#include "server/prefix/prefix_store_redis.hpp"
#include "server/scheduling/scheduler.hpp"
#include "tools/command_registry.hpp"
#include "tools/model/kv_flags.hpp"
#include "turbokv/error.hpp"

namespace turbokv::tools {
namespace {

struct ServeArgs {
  std::string model = engine::kDefaultModel;
  std::string tokenizer;
  std::string alias;
  std::string chat_template_file;  // a Jinja chat template instead of the model's
  std::string synthetic_weights = "q8_0";
  std::shared_ptr<KvFlags> kv = std::make_shared<KvFlags>();
  server::HttpOptions http;
  std::string kv_budget = "512MiB";
  int parallel = 16;
  int max_queue = 64;
  int ctx = 0;
  int threads = 0;
  size_t page_tokens = 32;  // see SchedulerOptions::page_tokens
  size_t step_tokens = 128;
  size_t chunk_tokens = server::SchedulerOptions{}.chunk_tokens;
  double max_step_ms = server::SchedulerOptions{}.max_step_ms;
  bool log_steps = false;
  bool no_prefix_cache = false;
  std::string prefix_store;
  server::RedisStoreOptions redis;
  std::string prefix_disk;
  std::string prefix_disk_budget = "8GiB";
  double shutdown_grace = 30;
};

// The text of a special token named by a GGUF id key (tokenizer.ggml.bos_token_id, ...): the chat
// template's bos_token / eos_token. Empty when the file lacks either.
std::string gguf_token_text(const engine::GgufFile& gguf, const std::string& id_key) {
  const int64_t id = gguf.get_int_or(id_key, -1);
  if (id < 0 || !gguf.has("tokenizer.ggml.tokens") || static_cast<uint64_t>(id) >= gguf.array_size("tokenizer.ggml.tokens")) {
    return "";
  }
  return gguf.get_string_array("tokenizer.ggml.tokens")[static_cast<size_t>(id)];
}

int run_serve(const ServeArgs& a) {
  // Signals are taken by sigwait() below, so every thread must block them (threads inherit it).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that vanishes mid-write is an error return, not a kill

  server::SchedulerOptions so;
  so.cache = kv_request_config(*a.kv, 4.0);
  so.kv_budget = server::parse_byte_size(a.kv_budget);
  so.parallel = a.parallel;
  so.max_queue = a.max_queue;
  so.ctx = a.ctx;
  so.threads = a.threads;
  so.page_tokens = a.page_tokens;
  so.step_tokens = a.step_tokens;
  so.chunk_tokens = a.chunk_tokens;
  so.max_step_ms = a.max_step_ms;
  so.log_steps = a.log_steps;
  so.prefix_cache = !a.no_prefix_cache;
  if (!a.prefix_store.empty()) {
    so.prefix_store = std::make_shared<server::RedisPrefixStore>(server::parse_redis_url(a.prefix_store), a.redis);
  }
  if (!a.prefix_disk.empty()) {
    server::DiskStoreOptions disk;
    disk.budget_bytes = server::parse_byte_size(a.prefix_disk_budget);
    so.prefix_disk = std::make_shared<server::DiskPrefixStore>(a.prefix_disk, disk);
  }

  server::ApiServer api(a.http);
  const int port = api.listen();
  std::printf("listening on http://%s:%d\n", a.http.host.c_str(), port);
  std::fflush(stdout);

  // Load the model while /health says 503.
  engine::Model model;
  std::unique_ptr<engine::Tokenizer> tokenizer;
  server::ChatTemplate chat_template;
  std::string model_id = a.alias;
  if (a.model.rfind("synthetic:", 0) == 0) {
    ThreadPool pool(a.threads);
    const std::string shape = a.model.substr(10);
    model = engine::make_synthetic_model(shape, engine::parse_synthetic_weight_type(a.synthetic_weights), pool);
    tokenizer = std::make_unique<engine::SyntheticTokenizer>(model.config.vocab_size);
    if (model_id.empty()) model_id = a.model + ":" + a.synthetic_weights;
  } else {
    const std::string path = engine::find_model_file(a.model);
    model = engine::load_model(path);
    tokenizer = engine::load_tokenizer_for_model(model, a.tokenizer);
    std::string jinja, bos, eos;
    if (model.format == "gguf") {
      const auto gguf = engine::GgufFile::open(path);
      jinja = gguf.get_string_or("tokenizer.chat_template", "");
      bos = gguf_token_text(gguf, "tokenizer.ggml.bos_token_id");
      eos = gguf_token_text(gguf, "tokenizer.ggml.eos_token_id");
    }
    if (!a.chat_template_file.empty()) {
      std::ifstream f(a.chat_template_file, std::ios::binary);
      if (!f) throw Error("serve: cannot read --chat-template-file " + a.chat_template_file);
      jinja.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    if (model.format == "gguf" || !a.chat_template_file.empty()) {
      chat_template = server::ChatTemplate::from_gguf(jinja, bos, eos);
      if (!chat_template.is_jinja()) {
        std::fprintf(stderr, "serve: %s; chat uses the %s format instead (README, \"Chat templates\")\n",
                     chat_template.fallback_reason().c_str(), chat_template.describe().c_str());
      }
    }
    if (model_id.empty()) model_id = std::filesystem::path(path).filename().string();
  }
  const std::string rope = engine::select_rope_factors(model.config, server::Scheduler::context_for(model, so.ctx));
  if (!rope.empty()) std::printf("%s\n", rope.c_str());
  server::Scheduler scheduler(model, *tokenizer, so);
  api.attach({model_id, &model, tokenizer.get(), chat_template, &scheduler});
  const size_t fp16_seq = scheduler.footprint().fp16_bytes(static_cast<size_t>(scheduler.context()));
  std::printf("model %s: %d layers, %d kv heads x %d, context %d, weights %s; chat %s, tool calls %s\n",
              model_id.c_str(), model.config.n_layers, model.config.n_kv_heads, model.config.head_dim,
              scheduler.context(), model.weight_type_summary().c_str(), chat_template.describe().c_str(),
              server::tool_call_format_name(chat_template.tool_format()));
  std::printf("kv cache %s, pages of %zu tokens; budget %zu bytes = %.1f full-context sequences (fp16: %.1f)\n",
              kv_cache_label(so.cache).c_str(), so.page_tokens, so.kv_budget,
              static_cast<double>(so.kv_budget) / static_cast<double>(scheduler.reservation(static_cast<size_t>(scheduler.context()))),
              static_cast<double>(so.kv_budget) / static_cast<double>(fp16_seq));
  if (so.prefix_disk) {
    std::printf("prefix disk %s, blocks of %zu tokens\n", so.prefix_disk->describe().c_str(), so.page_tokens);
  }
  if (so.prefix_store) {
    std::printf("prefix store %s, blocks of %zu tokens\n", so.prefix_store->describe().c_str(), so.page_tokens);
  }
  std::printf("ready\n");
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "serve: %s, finishing in-flight requests (up to %.0f s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
               a.shutdown_grace);
  api.shutdown(std::chrono::milliseconds(static_cast<long long>(a.shutdown_grace * 1000)));
  std::fprintf(stderr, "serve: stopped\n");
  return 0;
}

const CommandRegistration registration{"serve", [](CLI::App& app) {
  app.description("OpenAI-compatible HTTP server: continuous batching, one KV budget, prefix reuse, TurboQuant caches");
  auto a = std::make_shared<ServeArgs>();
  app.add_option("--model", a->model,
                 "llama2.c .bin or .gguf, or synthetic:SHAPE (random weights, e.g. synthetic:llama-3.2-1b); " "a bare name is looked up in the checkout's models/, the installed share/turbokv/models/, then TURBOKV_MODELS_DIR")
      ->capture_default_str();
  app.add_option("--weights", a->synthetic_weights, "weight type of a synthetic model (f32, f16, q8_0, q4_0)")
      ->capture_default_str();
  app.add_option("--tokenizer", a->tokenizer, "tokenizer.bin (default: tok512.bin next to a .bin model; GGUF: its own)");
  app.add_option("--alias", a->alias, "model id the API lists and accepts (default: the file name)");
  app.add_option("--chat-template-file", a->chat_template_file,
                 "Jinja chat template to use instead of the model's tokenizer.chat_template (bos_token and "
                 "eos_token: the GGUF's; empty for llama2.c models)");
  app.add_option("--host", a->http.host, "address to listen on")->capture_default_str();
  app.add_option("--port", a->http.port, "port (0: any free port, printed at start)")->capture_default_str()->check(CLI::Range(0, 65535));
  app.add_option("--api-key", a->http.api_key, "require Authorization: Bearer KEY on /v1/* and /metrics");
  app.add_flag("--metrics-public", a->http.metrics_public, "with --api-key: /metrics answers without the key");
  add_kv_flags(app, a->kv, "TurboQuant 4-bit, window 32 and sinks 1 stored in fp16");
  app.add_option("--kv-budget", a->kv_budget, "bytes all sequences' KV caches (and stored prefixes) may hold, e.g. 512MiB")
      ->capture_default_str();
  app.add_option("--parallel", a->parallel, "sequences running at once at most")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--max-queue", a->max_queue, "requests waiting at most (more: 429)")->capture_default_str()->check(CLI::Range(0, 100000));
  app.add_option("--ctx", a->ctx, "context per sequence (0: the model's)")->capture_default_str()->check(CLI::Range(0, 1 << 24));
  app.add_option("--threads", a->threads, "threads (0: all cores)")->capture_default_str()->check(CLI::Range(0, 1024));
  app.add_option("--kv-page-tokens", a->page_tokens, "KV page size in tokens")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--chunk-tokens", a->chunk_tokens, "prompt chunk size in tokens: prompts are cut at its multiples; divides "
                 "--kv-page-tokens (0: half the page)")->capture_default_str()->check(CLI::Range(0, 4096));
  app.add_option("--max-step-ms", a->max_step_ms, "target step time while sequences stream: prompt chunks fill what "
                 "the decode rows leave of it, at least one chunk per step (0: fill up to --step-tokens)")
      ->capture_default_str()->check(CLI::Range(0.0, 1e6));
  app.add_flag("--log-steps", a->log_steps, "print each step's rows, prompt budget and time to stderr");
  app.add_option("--step-tokens", a->step_tokens, "token rows per batched step at most")->capture_default_str()->check(CLI::Range(1, 65536));
  app.add_flag("--no-prefix-cache", a->no_prefix_cache, "do not keep computed prompt prefixes for reuse");
  app.add_option("--prefix-store", a->prefix_store,
                 "share computed prompt prefixes with other replicas through Redis: redis://[:PASSWORD@]HOST:PORT[/DB]");
  app.add_option("--prefix-disk", a->prefix_disk,
                 "keep evicted prompt prefixes and finished turns on local disk, in this directory (LMDB; survives "
                 "restarts; one server per directory)");
  app.add_option("--prefix-disk-budget", a->prefix_disk_budget,
                 "bytes of prefixes --prefix-disk keeps (least recently used dropped first), e.g. 20GiB")
      ->capture_default_str();
  app.add_option("--prefix-store-timeout", a->redis.timeout_ms, "milliseconds per Redis call (then: compute)")
      ->capture_default_str()->check(CLI::Range(1, 60000));
  app.add_option("--prefix-store-ttl", a->redis.ttl_seconds, "seconds a stored prefix lives (0: until Redis evicts it)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 30));
  // The HTTP front end's limits (docs/reliability.md, "HTTP limits").
  server::HttpLimits& l = a->http.limits;
  app.add_option("--max-body", l.max_body_bytes, "largest request body in bytes (more: 413, or the connection closed)")
      ->capture_default_str();
  app.add_option("--max-header-bytes", l.max_header_bytes, "request line and headers in bytes at most (more: 431)")
      ->capture_default_str()->check(CLI::Range(size_t{1024}, size_t{1} << 20));
  app.add_option("--max-headers", l.max_headers, "header fields per request at most (more: 431)")
      ->capture_default_str()->check(CLI::Range(size_t{8}, size_t{10000}));
  app.add_option("--max-connections", l.max_connections, "open connections at most (more wait in the listen queue)")
      ->capture_default_str()->check(CLI::Range(1u, 100000u));
  app.add_option("--http-threads", l.threads, "threads serving HTTP connections (event-driven: not one per client)")
      ->capture_default_str()->check(CLI::Range(1u, 64u));
  app.add_option_function<double>(
         "--header-timeout", [&l](double s) { l.header_timeout = std::chrono::milliseconds(static_cast<long long>(s * 1000)); },
         "seconds a request's line and headers may take to arrive (and a kept-alive connection may idle) [10]")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option_function<double>(
         "--body-timeout", [&l](double s) { l.body_timeout = std::chrono::milliseconds(static_cast<long long>(s * 1000)); },
         "seconds a request body may take to arrive [30]")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--shutdown-grace", a->shutdown_grace, "seconds in-flight requests get to finish on SIGTERM")->capture_default_str();
  return [a] { return run_serve(*a); };
}};

}  // namespace
}  // namespace turbokv::tools
