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

#include "engine/model/model.hpp"
#include "engine/model/model_files.hpp"
#include "engine/runtime/sampler.hpp"
#include "engine/runtime/session.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "tools/command_registry.hpp"
#include "tools/model/kv_flags.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prompt_cache.hpp"

namespace turbokv::tools {
namespace {

struct GenerateArgs {
  std::string model = engine::kDefaultModel;
  std::string tokenizer;
  std::string prompt;
  int steps = 128;
  float temperature = 0.0f;
  float top_p = 0.9f;
  uint64_t seed = 42;
  std::shared_ptr<KvFlags> kv = std::make_shared<KvFlags>();
  std::string save_cache, load_cache;
  int threads = 0;
  int chunk = 64;
  bool json = false;
  bool quiet = false;
};

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
  const auto model_path = engine::find_model_file(a.model);
  engine::Model model = engine::load_model(model_path);
  // A session runs up to the model's context, so LongRoPE takes that context's set.
  const std::string rope = engine::select_rope_factors(model.config, model.config.seq_len);
  if (!rope.empty() && !a.quiet) fmt::print(stderr, "generate: {}\n", rope);
  const auto tok = engine::load_tokenizer_for_model(model, a.tokenizer);
  if (a.steps < 0) throw Error(fmt::format("-n must be >= 0, got {}", a.steps));
  engine::Sampler sampler(engine::SamplerOptions{a.temperature, a.top_p, a.seed});
  ThreadPool pool(a.threads);
  const auto& c = model.config;

  // Every sequence starts with BOS. A loaded cache must hold a prefix of the prompt's tokens.
  const auto prompt_ids = tok->encode(a.prompt, true);
  std::optional<engine::Session> session;
  std::string cache_kind, cache_config;  // a label for people; the canonical string (parse_kv_config reads it)
  std::vector<int> to_feed;
  if (!a.load_cache.empty()) {
    if (a.kv->kv_bits || a.kv->key_bits || a.kv->value_bits || a.kv->exact || !a.kv->cache.empty()) {
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
    const CacheConfig config = kv_request_config(*a.kv, std::nullopt);
    session.emplace(model, make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, config, c.layer_windows()), pool,
                    a.chunk);
    to_feed = prompt_ids;
    cache_kind = kv_cache_label(config);
    cache_config = format_cache_config(config);
  }
  // A prompt must leave room for at least one generated token (as in `serve`): one that fills
  // the context is an error, never a silent empty answer or a truncation.
  if (static_cast<int>(session->position() + to_feed.size()) >= c.seq_len) {
    throw Error(fmt::format("the prompt needs {} positions; the model's context is {} (the prompt and at least one "
                            "generated token must fit)", session->position() + to_feed.size(), c.seq_len));
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
  if (steps < a.steps && static_cast<int>(generated.size()) == steps && !a.json) {
    std::fprintf(stderr, "\n(generation stopped at the end of the model's context, %d positions, after %d tokens)\n",
                 c.seq_len, steps);
  }

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
                     {"cache_config", cache_config},
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
    // A model can emit any bytes: invalid UTF-8 becomes U+FFFD (as the server answers) rather than
    // an exception from the JSON writer.
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
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
  app.add_option("--model", a->model, "llama2.c .bin or .gguf; " "a bare name is looked up in the checkout's models/, the installed share/turbokv/models/, then TURBOKV_MODELS_DIR")
      ->capture_default_str();
  app.add_option("--tokenizer", a->tokenizer, "tokenizer.bin (default: tok512.bin next to a .bin model; GGUF: its own)");
  app.add_option("--prompt", a->prompt, "prompt text");
  app.add_option("-n,--steps", a->steps, "tokens to generate")->capture_default_str();
  app.add_option("--temp", a->temperature, "temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-p", a->top_p, "nucleus sampling threshold (1: off)")->capture_default_str();
  app.add_option("--seed", a->seed, "sampling seed")->capture_default_str();
  add_kv_flags(app, a->kv, "dense fp16 cache");
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
