// `turbokv prefix-disk-bench`: what the disk tier (serve --prefix-disk) buys a chat workload with
// many more conversations than the KV budget holds.
//
//   turbokv prefix-disk-bench --model synthetic:llama-3.2-1b --conversations 24 --turns 3
//       --first-tokens 384 --turn-tokens 64 --answer-tokens 16 --resident 4
//
// Each conversation starts with --first-tokens random token ids; each turn the user adds
// --turn-tokens and the model answers --answer-tokens (greedy, end-of-text ignored); the next
// turn's prompt is the previous prompt, the answer's token ids and the new user tokens. Turns go
// in rounds: every conversation's first turn, then every second turn, ..., each round in a random
// (seeded) order, one request at a time, so a user returns after every other user has had a
// turn. The KV budget holds --resident conversations at their full length, so by the time a user
// returns, the in-process prefix cache has evicted their prefix. The workload runs twice through
// the server's scheduler (no HTTP): with the prefix cache only, and with the prefix cache and a
// fresh disk tier; time to first token (submit() to the first token, the disk lookup included)
// of every returning turn is compared (p50, p99), and every generated token must be the same in
// both runs. Bytes per token of the values on disk are read from the store and compared with
// dense fp16 K and V. Prints a table, or one JSON object with --json.
//
// With --idle N, conversations 0..N-1 go idle after their first turn and take their later turns
// only after every other conversation has finished; with --prefix-disk-budget below what the
// workload writes, the disk must choose what to keep, and the idle conversations' returning
// turns back (their second, counted apart) show whether their prefixes outlasted the others'
// older turns.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "engine/model/model.hpp"
#include "engine/model/model_files.hpp"
#include "engine/model/synthetic_model.hpp"
#include "engine/tokenizer/synthetic_tokenizer.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "server/http/api_server.hpp"  // parse_byte_size
#include "server/prefix/prefix_store_disk.hpp"
#include "server/prefix/prefix_value.hpp"
#include "server/prefix/shared_prefixes.hpp"
#include "server/scheduling/scheduler.hpp"
#include "tools/command_registry.hpp"
#include "turbokv/error.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::tools {
namespace {

struct BenchArgs {
  std::string model = "kjv-llama-3M.bin";
  std::string weights = "q8_0";
  std::string cache = "turboquant:bits=4,window=32,sinks=1,exact=f16";
  std::string disk;  // empty: a fresh directory under /tmp, removed at the end
  std::string disk_budget = "64GiB";
  int idle = 0;
  int conversations = 24;
  int turns = 3;
  size_t first_tokens = 384;
  size_t turn_tokens = 64;
  int answer_tokens = 16;
  int resident = 4;
  size_t page_tokens = 32;
  int threads = 0;
  unsigned seed = 20261202;
  bool json_out = false;
};

struct Turn {
  double ttft = 0;
  std::vector<int> answer;  // generated ids
  size_t cached = 0, disk = 0;
  std::string error;
};

Turn run_turn(server::Scheduler& s, const std::vector<int>& prompt, int answer_tokens) {
  server::GenerationRequest g;
  g.prompt = prompt;
  g.max_tokens = answer_tokens;
  g.ignore_eos = true;
  g.logprobs = 0;  // each event names its token id
  g.sampling.temperature = 0;
  auto h = std::make_shared<server::RequestHandle>();
  Turn t;
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  if (s.submit(std::move(g), h, &why) != server::Scheduler::Admission::accepted) {
    t.error = why;
    return t;
  }
  server::StreamEvent ev;
  while (h->wait_next(ev, std::chrono::seconds(3600))) {
    if (ev.kind == server::StreamEvent::Kind::failed) {
      t.error = ev.error;
      return t;
    }
    for (const auto& lp : ev.logprobs) {
      if (t.answer.empty()) t.ttft = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      t.answer.push_back(lp.token);
    }
    if (ev.kind == server::StreamEvent::Kind::finished) {
      t.cached = ev.usage.cached_tokens;
      t.disk = ev.usage.disk_tokens;
      return t;
    }
  }
  t.error = "timeout";
  return t;
}

struct Round {
  int turn = 0;                    // the turn each conversation of the round takes
  std::vector<int> conversations;  // in the order they come
};

struct Workload {
  std::vector<std::vector<std::vector<int>>> user;  // [conversation][turn]: the user's new tokens
  std::vector<Round> rounds;                        // in order; the idle conversations' later turns last
};

Workload make_workload(const BenchArgs& a, const engine::ModelConfig& c) {
  std::mt19937 rng(a.seed);
  // Ids past the special ones, so no prompt token means BOS or end of text.
  std::uniform_int_distribution<int> id(std::min(c.vocab_size - 1, 259), c.vocab_size - 1);
  Workload w;
  for (int v = 0; v < a.conversations; ++v) {
    w.user.emplace_back();
    for (int t = 0; t < a.turns; ++t) {
      std::vector<int> tokens(t == 0 ? a.first_tokens : a.turn_tokens);
      for (auto& x : tokens) x = id(rng);
      if (t == 0) tokens[0] = c.bos_id;
      w.user.back().push_back(std::move(tokens));
    }
  }
  for (int t = 0; t < a.turns; ++t) {
    Round round{t, {}};
    for (int v = t == 0 ? 0 : a.idle; v < a.conversations; ++v) round.conversations.push_back(v);
    std::shuffle(round.conversations.begin(), round.conversations.end(), rng);
    w.rounds.push_back(std::move(round));
  }
  for (int t = 1; t < a.turns && a.idle > 0; ++t) {
    Round round{t, {}};
    for (int v = 0; v < a.idle; ++v) round.conversations.push_back(v);
    w.rounds.push_back(std::move(round));
  }
  return w;
}

struct RunResult {
  std::vector<std::vector<Turn>> turns;          // [conversation][turn]
  std::vector<std::vector<int>> history;         // each conversation's tokens at the end
  std::vector<double> returning_ttft;            // every turn after the first
  size_t returning_cached = 0, returning_disk = 0, returning_prompt = 0;
  size_t idle_disk = 0, idle_prompt = 0;         // the idle conversations' first turn back
  int errors = 0;
  server::SchedulerMetrics metrics;
};

RunResult run_workload(server::Scheduler& s, const Workload& w, const BenchArgs& a) {
  RunResult r;
  r.turns.assign(static_cast<size_t>(a.conversations), std::vector<Turn>(static_cast<size_t>(a.turns)));
  r.history.assign(static_cast<size_t>(a.conversations), {});
  for (const Round& round : w.rounds) {
    const int t = round.turn;
    for (const int v : round.conversations) {
      auto& history = r.history[static_cast<size_t>(v)];
      const auto& user = w.user[static_cast<size_t>(v)][static_cast<size_t>(t)];
      history.insert(history.end(), user.begin(), user.end());
      Turn turn = run_turn(s, history, a.answer_tokens);
      if (!turn.error.empty()) ++r.errors;
      history.insert(history.end(), turn.answer.begin(), turn.answer.end());
      if (t > 0) {
        r.returning_ttft.push_back(turn.ttft);
        r.returning_cached += turn.cached;
        r.returning_disk += turn.disk;
        r.returning_prompt += history.size() - turn.answer.size();
        if (v < a.idle && t == 1) {  // back after the others' turns
          r.idle_disk += turn.disk;
          r.idle_prompt += history.size() - turn.answer.size();
        }
      }
      r.turns[static_cast<size_t>(v)][static_cast<size_t>(t)] = std::move(turn);
    }
  }
  r.metrics = s.metrics();
  return r;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

// Bytes per token of the values the disk holds for the conversations' longest stored prefixes
// (read back from the store: the header's token count and the value's size).
struct DiskBytes {
  double per_token = 0;
  size_t values = 0;
};
DiskBytes measure_disk(server::DiskPrefixStore& disk, const engine::Model& model, const server::SchedulerOptions& so,
                       const std::vector<std::vector<int>>& histories) {
  CacheConfig config = so.cache;
  config.tq.page_tokens = config.dense_page_tokens = so.page_tokens;
  auto shared = std::shared_ptr<server::PrefixStore>(&disk, [](server::PrefixStore*) {});
  server::SharedPrefixes tier(shared, model, config, so.page_tokens, "disk");
  size_t bytes = 0, tokens = 0;
  DiskBytes out;
  for (const auto& h : histories) {
    const auto chain = server::prefix_chain(tier.identity(), h, h.size() / so.page_tokens);
    for (size_t b = chain.size(); b-- > 0;) {
      const auto value = disk.get(server::prefix_key(chain[b]));
      if (!value) continue;
      bytes += value->size();
      tokens += (b + 1) * so.page_tokens;
      ++out.values;
      break;
    }
  }
  out.per_token = tokens > 0 ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0;
  return out;
}

engine::Model load(const BenchArgs& a, std::unique_ptr<engine::Tokenizer>& tokenizer) {
  engine::Model model;
  if (a.model.rfind("synthetic:", 0) == 0) {
    ThreadPool pool(a.threads);
    model = engine::make_synthetic_model(a.model.substr(10), engine::parse_synthetic_weight_type(a.weights), pool);
    tokenizer = std::make_unique<engine::SyntheticTokenizer>(model.config.vocab_size);
  } else {
    model = engine::load_model(engine::find_model_file(a.model));
    tokenizer = engine::load_tokenizer_for_model(model);
  }
  return model;
}

int run_bench(const BenchArgs& a) {
  if (a.idle >= a.conversations) {
    throw Error(fmt::format("prefix-disk-bench: --idle {} leaves no conversation going of {}", a.idle, a.conversations));
  }
  server::parse_byte_size(a.disk_budget);  // a bad size fails before the work
  std::unique_ptr<engine::Tokenizer> tokenizer;
  engine::Model model = load(a, tokenizer);
  const auto& c = model.config;
  const size_t longest = a.first_tokens + static_cast<size_t>(a.turns - 1) * a.turn_tokens +
                         static_cast<size_t>(a.turns) * static_cast<size_t>(a.answer_tokens);
  // A random-weight file records a short context; nothing in the forward pass depends on it.
  if (longest + 1 > static_cast<size_t>(c.seq_len)) model.config.seq_len = static_cast<int>(longest + 1);
  server::SchedulerOptions so;
  so.cache = parse_cache_config(a.cache);
  so.parallel = 1;
  so.ctx = static_cast<int>(longest + 1);
  so.threads = a.threads;
  so.page_tokens = a.page_tokens;
  {
    server::Scheduler probe(model, *tokenizer, so);
    so.kv_budget = probe.reservation(longest) * static_cast<size_t>(a.resident);
  }
  const Workload w = make_workload(a, c);

  const std::string dir = a.disk.empty() ? fmt::format("/tmp/turbokv-prefix-disk-bench-{}", ::getpid()) : a.disk;
  std::filesystem::remove_all(dir);
  RunResult ram, disk_run;
  DiskBytes bytes;
  size_t file_bytes = 0, stored_bytes = 0, stored_values = 0;
  {
    server::Scheduler s(model, *tokenizer, so);
    ram = run_workload(s, w, a);
  }
  {
    server::DiskStoreOptions dopt;
    dopt.budget_bytes = server::parse_byte_size(a.disk_budget);
    auto disk = std::make_shared<server::DiskPrefixStore>(dir, dopt);
    so.prefix_disk = disk;
    {
      server::Scheduler s(model, *tokenizer, so);
      disk_run = run_workload(s, w, a);
    }
    disk->flush(600000);
    bytes = measure_disk(*disk, model, so, disk_run.history);
    stored_bytes = disk->counters().stored_bytes;
    stored_values = disk->counters().stored_values;
    file_bytes = std::filesystem::file_size(std::filesystem::path(dir) / "data.mdb");
  }
  if (a.disk.empty()) std::filesystem::remove_all(dir);

  int differing = 0;
  for (int v = 0; v < a.conversations; ++v) {
    for (int t = 0; t < a.turns; ++t) {
      differing += ram.turns[static_cast<size_t>(v)][static_cast<size_t>(t)].answer !=
                   disk_run.turns[static_cast<size_t>(v)][static_cast<size_t>(t)].answer;
    }
  }
  const double fp16_per_token = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * 2.0;
  const double p50_ram = percentile(ram.returning_ttft, 0.5), p99_ram = percentile(ram.returning_ttft, 0.99);
  const double p50_disk = percentile(disk_run.returning_ttft, 0.5), p99_disk = percentile(disk_run.returning_ttft, 0.99);
  const int errors = ram.errors + disk_run.errors;
  nlohmann::json out = {
      {"model", a.model}, {"cache", a.cache}, {"page_tokens", a.page_tokens}, {"conversations", a.conversations},
      {"turns", a.turns}, {"first_tokens", a.first_tokens}, {"turn_tokens", a.turn_tokens},
      {"answer_tokens", a.answer_tokens}, {"longest_tokens", longest}, {"kv_budget_bytes", so.kv_budget},
      {"resident_conversations", a.resident}, {"returning_turns", ram.returning_ttft.size()},
      {"ttft_p50_ram_only_s", p50_ram}, {"ttft_p99_ram_only_s", p99_ram},
      {"ttft_p50_with_disk_s", p50_disk}, {"ttft_p99_with_disk_s", p99_disk},
      {"speedup_p50", p50_disk > 0 ? p50_ram / p50_disk : 0}, {"speedup_p99", p99_disk > 0 ? p99_ram / p99_disk : 0},
      {"returning_prompt_tokens", ram.returning_prompt},
      {"returning_restored_ram_only", ram.returning_cached}, {"returning_restored_with_disk", disk_run.returning_cached},
      {"returning_from_disk", disk_run.returning_disk},
      {"disk_budget_bytes", server::parse_byte_size(a.disk_budget)}, {"idle_conversations", a.idle},
      {"idle_back_prompt_tokens", disk_run.idle_prompt}, {"idle_back_from_disk", disk_run.idle_disk},
      {"disk_evictions", disk_run.metrics.disk.store.evictions_total},
      {"prefix_cache_evictions", disk_run.metrics.prefix_cache_evictions_total},
      {"disk_writes", disk_run.metrics.disk.store.writes_total},
      {"disk_write_bytes", disk_run.metrics.disk.store.write_bytes_total},
      {"disk_read_bytes", disk_run.metrics.disk.store.read_bytes_total},
      {"disk_stored_bytes", stored_bytes}, {"disk_file_bytes", file_bytes},
      {"disk_value_bytes_per_token", bytes.per_token}, {"dense_fp16_bytes_per_token", fp16_per_token},
      {"fewer_bytes_than_fp16", bytes.per_token > 0 ? fp16_per_token / bytes.per_token : 0},
      {"differing_answers", differing}, {"errors", errors}};
  if (a.json_out) {
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("prefix-disk-bench: {}, cache {}, pages of {} tokens; {} conversations x {} turns ({} + {}/turn user "
               "tokens, {}-token answers, {} tokens at the end); KV budget {} bytes = {} conversations\n",
               a.model, a.cache, a.page_tokens, a.conversations, a.turns, a.first_tokens, a.turn_tokens,
               a.answer_tokens, longest, so.kv_budget, a.resident);
    fmt::print("| returning turns | TTFT p50 (s) | TTFT p99 (s) | prompt tokens restored | of which from disk |\n");
    fmt::print("|---|---:|---:|---:|---:|\n");
    fmt::print("| RAM prefix cache only | {:.3f} | {:.3f} | {} of {} | - |\n", p50_ram, p99_ram, ram.returning_cached,
               ram.returning_prompt);
    fmt::print("| with the disk tier | {:.3f} | {:.3f} | {} of {} | {} |\n", p50_disk, p99_disk,
               disk_run.returning_cached, disk_run.returning_prompt, disk_run.returning_disk);
    if (a.idle > 0) {
      fmt::print("the {} idle conversations' first turns back: {} of {} prompt tokens from disk\n", a.idle,
                 disk_run.idle_disk, disk_run.idle_prompt);
    }
    fmt::print("speed-up: p50 {:.1f}x, p99 {:.1f}x; answers differing: {} of {}; errors: {}\n",
               out["speedup_p50"].get<double>(), out["speedup_p99"].get<double>(), differing, a.conversations * a.turns,
               errors);
    fmt::print("disk: {:.1f} bytes/token ({:.1f}/token/layer) vs dense fp16 {:.0f} ({:.2f}x fewer); {} values, "
               "{} bytes held (budget {}), data.mdb {} bytes; written {} bytes, read {} bytes, {} values evicted\n",
               bytes.per_token, bytes.per_token / c.n_layers, fp16_per_token, out["fewer_bytes_than_fp16"].get<double>(),
               stored_values, stored_bytes, a.disk_budget, file_bytes, disk_run.metrics.disk.store.write_bytes_total,
               disk_run.metrics.disk.store.read_bytes_total, disk_run.metrics.disk.store.evictions_total);
  }
  return differing == 0 && errors == 0 ? 0 : 1;
}

const CommandRegistration registration{"prefix-disk-bench", [](CLI::App& app) {
  app.description("A chat workload with more conversations than the KV budget: returning turns' TTFT with and without "
                  "the disk tier (serve --prefix-disk)");
  auto a = std::make_shared<BenchArgs>();
  app.add_option("--model", a->model, "llama2.c .bin or .gguf, or synthetic:SHAPE")->capture_default_str();
  app.add_option("--weights", a->weights, "weight type of a synthetic model")->capture_default_str();
  app.add_option("--cache", a->cache, "cache configuration (serve's default)")->capture_default_str();
  app.add_option("--prefix-disk", a->disk, "the disk tier's directory (default: a fresh one under /tmp, removed after)");
  app.add_option("--prefix-disk-budget", a->disk_budget, "the disk tier's budget, e.g. 64MiB (serve's flag)")
      ->capture_default_str();
  app.add_option("--idle", a->idle, "conversations that go idle after their first turn and come back last")
      ->capture_default_str()->check(CLI::Range(0, 100000));
  app.add_option("--conversations", a->conversations, "conversations")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--turns", a->turns, "turns per conversation")->capture_default_str()->check(CLI::Range(2, 1000));
  app.add_option("--first-tokens", a->first_tokens, "tokens of a conversation's first prompt")
      ->capture_default_str()->check(CLI::Range(2, 1 << 20));
  app.add_option("--turn-tokens", a->turn_tokens, "user tokens each later turn adds")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--answer-tokens", a->answer_tokens, "tokens the model answers per turn")
      ->capture_default_str()->check(CLI::Range(1, 1 << 16));
  app.add_option("--resident", a->resident, "conversations (at their final length) the KV budget holds")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--kv-page-tokens", a->page_tokens, "page and block size")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--threads", a->threads, "threads (0: all cores)")->capture_default_str();
  app.add_option("--seed", a->seed, "workload seed")->capture_default_str();
  app.add_flag("--json", a->json_out, "print one JSON object");
  return [a] { return run_bench(*a); };
}};

}  // namespace
}  // namespace turbokv::tools
