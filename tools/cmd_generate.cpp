// `turbokv generate`: text generation with a Llama-family model and any KV cache.
//
//   turbokv generate --prompt "In the beginning" --kv-bits 4
//
// Streams the text, then prints prompt and decode speed and the KV cache's bytes next to what
// an fp16 cache would hold for the same tokens.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "command_registry.hpp"
#include "engine/model.hpp"
#include "engine/sampler.hpp"
#include "engine/session.hpp"
#include "engine/tokenizer_factory.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prompt_cache.hpp"

namespace turbokv::tools {
namespace {

struct GenerateArgs {
  std::string model = "kjv-llama-3M.bin";
  std::string tokenizer;
  std::string prompt;
  int steps = 128;
  float temperature = 0.0f;
  float top_p = 0.9f;
  uint64_t seed = 42;
  std::optional<double> kv_bits, key_bits, value_bits;
  std::string kv_codec = "mse";
  // Unset: 32 with a TurboQuant cache. The newest tokens exact is the strongest single lever for
  // quality (on kjv-llama-3M, 4-bit greedy text then follows the dense cache's instead of looping
  // after a few tokens); it costs 32 * 2 * head_dim floats per kv head and layer, whatever the
  // context length.
  std::optional<size_t> kv_window;
  // Unset: 1 with a TurboQuant cache. Keeping the BOS token exact costs 2*head_dim floats per kv
  // head and layer; at head_dim 8 (stories260K) its key norm is large enough that even 8-bit
  // codes move its logit by ~1 and flip near-ties (see the issue 5 note in docs/benchmarks.md).
  std::optional<size_t> kv_sinks;
  std::string cache_spec;
  std::string save_cache, load_cache;
  int threads = 0;
  int chunk = 64;
  bool json = false;
  bool quiet = false;
};

std::string models_dir() {
  if (const char* env = std::getenv("TURBOKV_MODELS_DIR"); env != nullptr && *env != '\0') return env;
  return TURBOKV_MODELS_DIR;
}

// A path as given if it exists (or contains a '/'); else the same name in the models folder.
std::string resolve_model(const std::string& name) {
  if (std::filesystem::exists(name) || name.find('/') != std::string::npos) return name;
  const auto in_models = std::filesystem::path(models_dir()) / name;
  if (std::filesystem::exists(in_models)) return in_models.string();
  throw Error(fmt::format("model '{}' not found (nor in {}; set TURBOKV_MODELS_DIR or give a path; see "
                          "README for where to get the models)", name, models_dir()));
}

CacheConfig cache_config(const GenerateArgs& a) {
  const bool any_bits = a.kv_bits || a.key_bits || a.value_bits;
  if (!a.cache_spec.empty()) {
    if (any_bits) throw Error("--cache cannot be combined with --kv-bits/--key-bits/--value-bits");
    return parse_cache_config(a.cache_spec);
  }
  CacheConfig config;
  if (!any_bits) {
    if (a.kv_window || a.kv_sinks) throw Error("--kv-window/--kv-sinks need --kv-bits (the dense cache keeps everything)");
    return config;  // dense fp16
  }
  if (a.kv_bits && (a.key_bits || a.value_bits)) throw Error("give either --kv-bits or --key-bits with --value-bits");
  if (!a.kv_bits && !(a.key_bits && a.value_bits)) throw Error("--key-bits and --value-bits go together");
  config.kind = "turboquant";
  config.tq.key_bits = a.kv_bits ? *a.kv_bits : *a.key_bits;
  config.tq.value_bits = a.kv_bits ? *a.kv_bits : *a.value_bits;
  config.tq.key_codec = parse_codec_kind(a.kv_codec);
  config.tq.window = a.kv_window.value_or(32);
  config.tq.sinks = a.kv_sinks.value_or(1);
  return config;
}

// "dense f16", "turboquant k4/v4 mse", ... (the full option string is in --json as cache_config).
std::string short_label(const CacheConfig& config) {
  if (config.kind == "dense") return "dense " + dense_dtype_name(config.dense_dtype);
  if (config.kind != "turboquant") return format_cache_config(config);
  std::string label = fmt::format("turboquant k{}/v{} {}", config.tq.key_bits, config.tq.value_bits,
                                  codec_kind_name(config.tq.key_codec));
  if (config.tq.sinks > 0) label += fmt::format(" sinks {}", config.tq.sinks);
  if (config.tq.window > 0) label += fmt::format(" window {}", config.tq.window);
  return label;
}

// What to print for a piece: raw bytes (UTF-8 split over byte tokens reassembles), minus
// control characters other than whitespace, as llama2.c's safe_printf does.
std::string printable(const std::string& piece) {
  if (piece.size() == 1) {
    const auto c = static_cast<unsigned char>(piece[0]);
    if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') return "";
  }
  return piece;
}

int run_generate(const GenerateArgs& a) {
  using Clock = std::chrono::steady_clock;
  const auto model_path = resolve_model(a.model);
  const engine::Model model = engine::load_model(model_path);
  const auto tok = engine::load_tokenizer_for_model(model, a.tokenizer);
  if (a.steps < 0) throw Error(fmt::format("-n must be >= 0, got {}", a.steps));
  engine::Sampler sampler(engine::SamplerOptions{a.temperature, a.top_p, a.seed});
  ThreadPool pool(a.threads);
  const auto& c = model.config;

  // Every sequence starts with BOS. A loaded cache must hold a prefix of the prompt's tokens.
  const auto prompt_ids = tok->encode(a.prompt, true);
  std::optional<engine::Session> session;
  std::string cache_kind;
  std::vector<int> to_feed;
  if (!a.load_cache.empty()) {
    if (a.kv_bits || a.key_bits || a.value_bits || !a.cache_spec.empty()) {
      throw Error("--load-cache takes the cache (and its kind) from the file; drop --kv-bits/--cache");
    }
    session.emplace(engine::Session::load(model, a.load_cache, pool, a.chunk));
    const auto& held = session->tokens();
    const bool continues = a.prompt.empty() ||
                           (held.size() <= prompt_ids.size() && std::equal(held.begin(), held.end(), prompt_ids.begin()));
    if (!continues) {
      throw Error(fmt::format("--load-cache: the cache holds {} tokens that are not the start of the prompt's {} tokens "
                              "(give the same prompt, a longer one, or none)", held.size(), prompt_ids.size()));
    }
    if (!a.prompt.empty()) to_feed.assign(prompt_ids.begin() + static_cast<long>(held.size()), prompt_ids.end());
    cache_kind = session->cache().layer(0).class_name() + " (loaded)";
  } else {
    const CacheConfig config = cache_config(a);
    session.emplace(model, make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, config), pool, a.chunk);
    to_feed = prompt_ids;
    cache_kind = short_label(config);
  }
  if (static_cast<int>(session->position() + to_feed.size()) > c.seq_len) {
    throw Error(fmt::format("the prompt needs {} positions, the model's context is {}", session->position() + to_feed.size(),
                            c.seq_len));
  }

  std::string text;
  auto emit = [&](int prev, int id) {
    const std::string piece = printable(tok->decode(prev, id));
    text += piece;
    if (!a.json && !a.quiet) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
  };
  // Echo the prompt (the part held by a loaded cache too), then the continuation.
  {
    const auto& held = session->tokens();
    std::vector<int> shown(held.begin(), held.end());
    shown.insert(shown.end(), to_feed.begin(), to_feed.end());
    for (size_t i = 1; i < shown.size(); ++i) emit(shown[i - 1], shown[i]);
  }

  const auto t0 = Clock::now();
  if (!to_feed.empty()) session->feed(to_feed);
  const auto t1 = Clock::now();
  if (!a.save_cache.empty()) session->save(a.save_cache);
  const size_t prompt_tokens = session->position();
  int prev = session->tokens().back();
  // Room left in the model's context (the last sampled token needs no position).
  const int room = c.seq_len - static_cast<int>(session->position()) + 1;
  const int steps = std::min(a.steps, std::max(room, 0));
  const auto t2 = Clock::now();
  const auto generated = session->generate(steps, sampler, [&](int id) { return tok->is_end_of_generation(id); },
                                           [&](int id) {
                                             if (!tok->is_end_of_generation(id)) emit(prev, id);
                                             prev = id;
                                           });
  const auto t3 = Clock::now();

  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t3 - t2).count();
  // Decode steps: each sampled token but the last was fed back through the model.
  const size_t decode_steps = generated.empty() ? 0 : generated.size() - 1;
  const size_t held = session->cache().size();
  const size_t cache_bytes = session->cache().nbytes();
  const size_t fp16_bytes = engine::fp16_cache_bytes(c, held);
  const double prompt_tps = prefill_s > 0 ? static_cast<double>(to_feed.size()) / prefill_s : 0.0;
  const double decode_tps = decode_s > 0 ? static_cast<double>(decode_steps) / decode_s : 0.0;
  if (a.json) {
    nlohmann::json j{{"model", model_path},
                     {"cache", cache_kind},
                     {"text", text},
                     {"prompt_tokens", prompt_tokens},
                     {"prompt_tokens_computed", to_feed.size()},
                     {"generated_tokens", generated.size()},
                     {"tokens", session->tokens()},
                     {"prompt_tokens_per_s", prompt_tps},
                     {"decode_tokens_per_s", decode_tps},
                     {"cache_tokens", held},
                     {"cache_bytes", cache_bytes},
                     {"fp16_cache_bytes", fp16_bytes},
                     {"threads", pool.size()}};
    fmt::print("{}\n", j.dump());
    return 0;
  }
  if (!a.quiet) fmt::print("\n");
  fmt::print("---\nmodel {} ({}, {} layers, dim {}, heads {}/{} x {}, weights {})\n", model_path, c.arch, c.n_layers,
             c.dim, c.n_heads, c.n_kv_heads, c.head_dim, model.weight_type_summary());
  fmt::print("prompt: {} tokens ({} computed) in {:.3f} s, {:.1f} tokens/s\n", prompt_tokens, to_feed.size(), prefill_s,
             prompt_tps);
  fmt::print("decode: {} tokens in {:.3f} s, {:.1f} tokens/s ({} threads)\n", decode_steps, decode_s, decode_tps,
             pool.size());
  fmt::print("kv cache [{}]: {} tokens, {} bytes vs {} bytes at fp16 ({:.2f}x smaller)\n", cache_kind, held,
             cache_bytes, fp16_bytes, cache_bytes > 0 ? static_cast<double>(fp16_bytes) / cache_bytes : 0.0);
  if (!a.save_cache.empty()) fmt::print("prompt cache saved to {}\n", a.save_cache);
  return 0;
}

const CommandRegistration registration{"generate", [](CLI::App& app) {
  app.description("Generate text with a Llama-family model (llama2.c .bin or GGUF) and a TurboQuant or dense KV cache");
  auto a = std::make_shared<GenerateArgs>();
  app.add_option("--model", a->model, "llama2.c .bin or .gguf; a bare name is looked up in TURBOKV_MODELS_DIR")
      ->capture_default_str();
  app.add_option("--tokenizer", a->tokenizer, "tokenizer.bin (default: tok512.bin next to a .bin model; GGUF: its own)");
  app.add_option("--prompt", a->prompt, "prompt text");
  app.add_option("-n,--steps", a->steps, "tokens to generate")->capture_default_str();
  app.add_option("--temp", a->temperature, "temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-p", a->top_p, "nucleus sampling threshold (1: off)")->capture_default_str();
  app.add_option("--seed", a->seed, "sampling seed")->capture_default_str();
  auto* kv_bits = app.add_option_function<double>("--kv-bits", [a](double b) { a->kv_bits = b; },
                                                    "TurboQuant bits for keys and values (default: dense fp16 cache)");
  auto* key_bits = app.add_option_function<double>("--key-bits", [a](double b) { a->key_bits = b; }, "TurboQuant key bits");
  auto* value_bits = app.add_option_function<double>("--value-bits", [a](double b) { a->value_bits = b; },
                                                      "TurboQuant value bits");
  kv_bits->excludes(key_bits)->excludes(value_bits);
  app.add_option("--kv-codec", a->kv_codec, "key codec: mse or prod")->check(CLI::IsMember({"mse", "prod"}))->capture_default_str();
  app.add_option_function<size_t>("--kv-window", [a](size_t n) { a->kv_window = n; },
                                  "newest tokens kept exact (default with --kv-bits: 32)");
  app.add_option_function<size_t>("--kv-sinks", [a](size_t n) { a->kv_sinks = n; },
                                  "first tokens kept exact (default with --kv-bits: 1, the BOS token)");
  app.add_option("--cache", a->cache_spec, "any cache class, e.g. dense:dtype=f32, turboquant:bits=3,window=32, q8_0");
  app.add_option("--save-cache", a->save_cache, "save the prompt cache after the prompt");
  app.add_option("--load-cache", a->load_cache, "continue from a saved prompt cache");
  app.add_option("--threads", a->threads, "threads (0: all cores)")->capture_default_str();
  app.add_option("--chunk", a->chunk, "prefill chunk (tokens per batched step)")->capture_default_str();
  app.add_flag("--json", a->json, "print one JSON object (text, tokens, speeds, bytes) instead of streaming");
  app.add_flag("--quiet", a->quiet, "print only the statistics");
  return [a] { return run_generate(*a); };
}};

}  // namespace
}  // namespace turbokv::tools
