// `turbokv serve-bench`: a load generator for `turbokv serve`.
//
//   turbokv serve-bench --model synthetic:llama-3.2-1b --kv dense16,tq4 --kv-budget 40MiB
//       --concurrency 1,16 --requests 16 --prompt-tokens 256 --max-tokens 64
//
// For each --kv configuration it starts a server itself (this binary's `serve`, on 127.0.0.1 and
// a free port, prefix cache off, same budget), or uses --url: any OpenAI-compatible server
// (llama-server too: fields it leaves out or sends as null are not needed). At each concurrency
// level C, C clients send streaming completions back to back (random token-id prompts,
// ignore_eos, greedy) until --requests are done; with --arrive-every S the first C start
// together and the rest arrive one every S seconds once those stream. Reported per
// (configuration, level): generated tokens/s over the level's wall time, time to first token
// (p50, p99), inter-token latency (p50, p90, p99), each stream's longest stall (its longest gap
// between two tokens: p50 and max over the streams), the decode rate (tokens after each stream's
// first, over the time some stream was decoding) and the most streams decoding at once, the most
// sequences the server ran at once and the most KV bytes it held (polled from /metrics every
// 50 ms), and the server's peak RSS (VmHWM, when it started the server). --json prints the same as one object, with the server's
// fitted step costs (turbokv_step_* in /metrics) at the end of each level.
#include <fmt/format.h>
#include <httplib.h>
#include <signal.h>
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>

#include "tools/command_registry.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/error.hpp"

namespace turbokv::tools {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct BenchArgs {
  std::string url;
  std::string model = "synthetic:llama-3.2-1b";
  std::string weights = "q8_0";
  std::string kv = "tq4";
  std::string kv_budget = "512MiB";
  std::string concurrency = "1,4,16";
  int requests = 0;  // per level; 0: 2 x the level
  int prompt_tokens = 256;
  int max_tokens = 64;
  int parallel = 64;
  int threads = 0;
  int vocab = 0;             // token ids of the prompts are below it (0: what /v1/models reports)
  double arrive_every = 0;   // > 0: requests past the first `concurrency` arrive this many seconds apart
  double read_timeout = 600;  // a request fails when nothing arrives for this long (a queued one too)
  std::string extra;  // more `serve` arguments
  bool json_out = false;
};

std::vector<int> parse_int_list(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 1 || v > 4096) throw Error(fmt::format("serve-bench: bad number '{}' in '{}'", item, list));
    out.push_back(v);
  }
  if (out.empty()) throw Error(fmt::format("serve-bench: empty list '{}'", list));
  return out;
}

std::vector<std::string> split(const std::string& list, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

std::map<std::string, double> scrape(httplib::Client& cli) {
  std::map<std::string, double> m;
  auto res = cli.Get("/metrics");
  if (!res || res->status != 200) return m;
  std::stringstream ss(res->body);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.empty() || line[0] == '#' || line.find('{') != std::string::npos) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    try {
      m[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
    } catch (const std::exception&) {
    }
  }
  return m;
}

long peak_rss_kib(pid_t pid, const char* field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::string(field).size()));
  }
  return 0;
}

// A `serve` child process on a free port.
struct ServerProcess {
  pid_t pid = -1;
  std::string url;

  ServerProcess(const std::vector<std::string>& args) {
    int out[2];
    if (pipe(out) != 0) throw Error("serve-bench: pipe failed");
    pid = fork();
    if (pid < 0) throw Error("serve-bench: fork failed");
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      std::vector<char*> argv;
      static std::string self = "/proc/self/exe";
      argv.push_back(self.data());
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    char line[1024];
    bool ready = false;
    while (fgets(line, sizeof line, f) != nullptr) {
      const std::string s(line);
      if (s.rfind("listening on ", 0) == 0) url = s.substr(13, s.find_last_not_of("\r\n") - 12);
      if (s.rfind("ready", 0) == 0) {
        ready = true;
        break;
      }
    }
    // Keep reading (and dropping) its output so the child never blocks on a full pipe.
    std::thread([f] {
      char buf[1024];
      while (fgets(buf, sizeof buf, f) != nullptr) {
      }
      fclose(f);
    }).detach();
    if (!ready || url.empty()) {
      stop();
      throw Error("serve-bench: the server did not start (see its error above)");
    }
  }
  void stop() {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
  }
  ~ServerProcess() { stop(); }
};

struct LevelResult {
  std::string kv;
  int concurrency = 0;
  int requests = 0, failed = 0;
  double seconds = 0, tokens_per_s = 0;
  uint64_t generated = 0;
  double ttft_p50 = 0, ttft_p99 = 0, itl_p50 = 0, itl_p90 = 0, itl_p99 = 0;
  double stall_p50 = 0, stall_max = 0;  // over the streams' longest gaps between two tokens
  std::vector<double> stalls;           // each stream's longest gap, in request order
  // Decoding as the clients saw it, whatever the server: the tokens after each stream's first over
  // the time at least one stream was between its first and last token, and the most streams in
  // that phase at once (a server that queues requests decodes fewer at a time).
  double decode_tokens_per_s = 0, peak_streaming = 0;
  double peak_running = 0, peak_kv_bytes = 0, peak_waiting = 0;
  long rss_peak_kib = 0;
  std::map<std::string, double> step_cost;  // the server's fitted step costs at the end (turbokv only)
};

// A number in a JSON object, or `fallback` when the field is missing, null or not a number
// (servers differ: llama-server sends no usage while streaming, and null where a field has no
// value).
double number_or(const json& object, const char* key, double fallback) {
  if (!object.is_object()) return fallback;
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : fallback;
}

// The vocabulary size a server reports in /v1/models: turbokv's meta.vocab, llama-server's
// meta.n_vocab; 0 when neither is there.
int reported_vocab(const json& models) {
  if (!models.is_object() || !models.contains("data") || !models["data"].is_array() || models["data"].empty()) return 0;
  const json& first = models["data"][0];
  if (!first.is_object() || !first.contains("meta")) return 0;
  const json& meta = first["meta"];
  return static_cast<int>(number_or(meta, "vocab", number_or(meta, "n_vocab", 0)));
}

// The first model id a server lists ("?" when there is none).
std::string served_model_id(const json& models) {
  if (!models.is_object() || !models.contains("data") || !models["data"].is_array() || models["data"].empty()) return "?";
  const json& first = models["data"][0];
  return first.is_object() && first.contains("id") && first["id"].is_string() ? first["id"].get<std::string>() : "?";
}

// One streamed completion: when each token's text arrived (seconds from the request), and the
// generated tokens (the usage the server reports, else the pieces of text that came).
struct StreamResult {
  bool ok = false;
  std::vector<double> arrivals;
  uint64_t tokens = 0;
};

StreamResult stream_completion(const std::string& url, const json& body, double read_timeout,
                               const std::function<void()>& on_first) {
  httplib::Client cli(url);
  cli.set_read_timeout(std::chrono::duration<double>(read_timeout));
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  StreamResult r;
  std::string buffer;
  double usage_tokens = -1;
  const auto start = Clock::now();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t pos;
    while ((pos = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, pos);
      buffer.erase(0, pos + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const json chunk = json::parse(event.substr(6), nullptr, false);
      if (chunk.is_discarded() || !chunk.is_object()) continue;
      if (chunk.contains("usage")) usage_tokens = number_or(chunk["usage"], "completion_tokens", usage_tokens);
      if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) continue;
      const json& choice = chunk["choices"][0];
      if (!choice.is_object()) continue;
      // A piece of text is a token's arrival (the closing chunk, with its finish_reason, has none).
      const auto text = choice.find("text");
      const bool has_text = text != choice.end() && text->is_string() && !text->get<std::string>().empty();
      const auto finish = choice.find("finish_reason");
      const bool open = finish == choice.end() || finish->is_null();
      if (has_text || open) {
        r.arrivals.push_back(std::chrono::duration<double>(Clock::now() - start).count());
        if (r.arrivals.size() == 1 && on_first) on_first();
      }
    }
    return true;
  };
  const auto res = cli.send(req);
  r.ok = res && res->status == 200 && !r.arrivals.empty();
  r.tokens = usage_tokens >= 0 ? static_cast<uint64_t>(usage_tokens) : r.arrivals.size();
  return r;
}

// A stream's decoding phase, in seconds from the level's start, and the tokens it carried.
struct DecodeSpan {
  double first = 0, last = 0;
  uint64_t tokens = 0;
};

// Tokens after each stream's first over the time at least one span is open, and the most spans
// open at once: one sweep over the spans' edges in time order.
std::pair<double, double> decode_rate_and_overlap(const std::vector<DecodeSpan>& spans) {
  std::vector<std::pair<double, int>> edges;  // +1 where a span opens, -1 where one closes
  uint64_t tokens = 0;
  for (const auto& s : spans) {
    edges.emplace_back(s.first, 1);
    edges.emplace_back(s.last, -1);
    tokens += s.tokens;
  }
  std::sort(edges.begin(), edges.end());  // a close before an open at the same instant
  double covered = 0, previous = 0;
  int open = 0, most = 0;
  for (const auto& [t, d] : edges) {
    if (open > 0) covered += t - previous;
    previous = t;
    most = std::max(most, open += d);
  }
  return {covered > 0 ? static_cast<double>(tokens) / covered : 0.0, static_cast<double>(most)};
}

// Distinct random prompts (no prefix is shared), token ids past the byte range.
json completion_body(const BenchArgs& a, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  json prompt = json::array();
  prompt.push_back(1);
  for (int t = 1; t < a.prompt_tokens; ++t) prompt.push_back(300 + static_cast<int>(rng() % static_cast<uint64_t>(vocab - 300)));
  return {{"prompt", prompt}, {"max_tokens", a.max_tokens}, {"temperature", 0}, {"stream", true},
          {"ignore_eos", true}, {"stream_options", {{"include_usage", true}}}};
}

LevelResult run_level(const std::string& url, const BenchArgs& a, int concurrency, int vocab, uint64_t seed) {
  LevelResult r;
  r.concurrency = concurrency;
  r.requests = a.requests > 0 ? a.requests : 2 * concurrency;
  std::mutex mutex;
  std::vector<double> ttft, itl;
  std::vector<DecodeSpan> spans;
  r.stalls.assign(static_cast<size_t>(r.requests), 0.0);
  std::atomic<uint64_t> generated{0};
  std::atomic<int> failed{0};
  std::atomic<bool> polling{true};
  double peak_running = 0, peak_kv = 0, peak_waiting = 0;
  std::thread poller([&] {
    httplib::Client cli(url);
    while (polling.load()) {
      const auto m = scrape(cli);
      peak_running = std::max(peak_running, m.count("turbokv_requests_running") ? m.at("turbokv_requests_running") : 0);
      peak_waiting = std::max(peak_waiting, m.count("turbokv_requests_waiting") ? m.at("turbokv_requests_waiting") : 0);
      peak_kv = std::max(peak_kv, m.count("turbokv_kv_used_bytes") ? m.at("turbokv_kv_used_bytes") : 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::atomic<int> first_tokens{0};
  const auto t0 = Clock::now();
  auto run_request = [&](int i) {
    const bool initial = i < concurrency;
    const double sent = std::chrono::duration<double>(Clock::now() - t0).count();
    const StreamResult s = stream_completion(url, completion_body(a, vocab, seed + static_cast<uint64_t>(i) * 7919),
                                             a.read_timeout, [&] { first_tokens += initial ? 1 : 0; });
    if (!s.ok) {
      ++failed;
      first_tokens += initial && s.arrivals.empty() ? 1 : 0;  // never had a first token: do not wait for it
      return;
    }
    generated += s.tokens;
    double longest = 0;
    std::lock_guard lock(mutex);
    ttft.push_back(s.arrivals.front());
    for (size_t k = 1; k < s.arrivals.size(); ++k) {
      itl.push_back(s.arrivals[k] - s.arrivals[k - 1]);
      longest = std::max(longest, itl.back());
    }
    r.stalls[static_cast<size_t>(i)] = longest;
    if (s.arrivals.size() > 1 && s.tokens > 1) spans.push_back({sent + s.arrivals.front(), sent + s.arrivals.back(), s.tokens - 1});
  };
  std::vector<std::thread> clients;
  std::atomic<int> next{0};  // outlives the client threads (joined below): not inside the if
  if (a.arrive_every <= 0) {
    // Closed loop: each client sends its next request when the last one finished.
    for (int c = 0; c < concurrency; ++c) {
      clients.emplace_back([&] {
        for (int i = next.fetch_add(1); i < r.requests; i = next.fetch_add(1)) run_request(i);
      });
    }
  } else {
    // The first `concurrency` requests start together; once each of them streams, the others
    // arrive one every --arrive-every seconds, whatever is running (open loop).
    for (int i = 0; i < std::min(concurrency, r.requests); ++i) clients.emplace_back(run_request, i);
    while (first_tokens.load() < std::min(concurrency, r.requests)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (int i = concurrency; i < r.requests; ++i) {
      std::this_thread::sleep_for(std::chrono::duration<double>(a.arrive_every));
      clients.emplace_back(run_request, i);
    }
  }
  for (auto& t : clients) t.join();
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  polling = false;
  poller.join();
  r.generated = generated.load();
  r.failed = failed.load();
  r.tokens_per_s = static_cast<double>(r.generated) / r.seconds;
  r.ttft_p50 = percentile(ttft, 50);
  r.ttft_p99 = percentile(ttft, 99);
  r.itl_p50 = percentile(itl, 50);
  r.itl_p90 = percentile(itl, 90);
  r.itl_p99 = percentile(itl, 99);
  r.stall_p50 = percentile(r.stalls, 50);
  r.stall_max = r.stalls.empty() ? 0 : *std::max_element(r.stalls.begin(), r.stalls.end());
  std::tie(r.decode_tokens_per_s, r.peak_streaming) = decode_rate_and_overlap(spans);
  r.peak_running = peak_running;
  r.peak_waiting = peak_waiting;
  r.peak_kv_bytes = peak_kv;
  httplib::Client cli(url);
  for (const auto& [name, value] : scrape(cli)) {
    if (name.rfind("turbokv_step_", 0) == 0 && name.find("_total") == std::string::npos) r.step_cost[name] = value;
  }
  return r;
}

int run_bench(const BenchArgs& a) {
  std::signal(SIGPIPE, SIG_IGN);
  const auto levels = parse_int_list(a.concurrency);
  std::vector<LevelResult> results;
  std::string server_model;
  const auto configs = a.url.empty() ? split(a.kv, ',') : std::vector<std::string>{"(server at --url)"};
  for (const auto& name : configs) {
    std::optional<ServerProcess> server;
    std::string url = a.url;
    if (url.empty()) {
      std::vector<std::string> args = {"serve", "--port", "0", "--model", a.model, "--weights", a.weights,
                                       "--kv-budget", a.kv_budget,
                                       "--parallel", std::to_string(a.parallel), "--max-queue", "256",
                                       "--no-prefix-cache", "--threads", std::to_string(a.threads)};
      // "default": the server's own default cache; anything else an eval configuration name.
      if (name != "default") {
        args.push_back("--cache");
        args.push_back(format_cache_config(parse_kv_config(name).config));
      }
      for (const auto& e : split(a.extra, ' ')) args.push_back(e);
      if (!a.json_out) std::fprintf(stderr, "serve-bench: starting %s with %s\n", a.model.c_str(), name.c_str());
      server.emplace(args);
      url = server->url;
    }
    httplib::Client cli(url);
    auto models = cli.Get("/v1/models");
    if (!models || models->status != 200) throw Error(fmt::format("serve-bench: GET {}/v1/models failed", url));
    const json listed = json::parse(models->body, nullptr, false);
    if (server_model.empty()) server_model = a.url.empty() ? a.model : served_model_id(listed) + " at " + a.url;
    const int vocab = a.vocab > 0 ? a.vocab : reported_vocab(listed);
    if (vocab <= 300) {
      throw Error(fmt::format("serve-bench: {}/v1/models reports no vocabulary size (meta.vocab or meta.n_vocab) over "
                              "300; give --vocab", url));
    }
    for (const int c : levels) {
      LevelResult r = run_level(url, a, c, vocab, 1234 + static_cast<uint64_t>(c));
      r.kv = name;
      if (server) r.rss_peak_kib = peak_rss_kib(server->pid, "VmHWM:");
      if (!a.json_out) {
        std::fprintf(stderr, "  %s c=%d: %.1f tok/s, peak running %.0f\n", name.c_str(), c, r.tokens_per_s, r.peak_running);
      }
      results.push_back(r);
    }
  }
  if (a.json_out) {
    // A server at --url: its model id; what the started servers would have used does not apply.
    const json unknown = nullptr;
    json out = {{"model", server_model}, {"weights", a.url.empty() ? json(a.weights) : unknown},
                {"kv_budget", a.url.empty() ? json(a.kv_budget) : unknown}, {"prompt_tokens", a.prompt_tokens},
                {"max_tokens", a.max_tokens}, {"results", json::array()}};
    for (const auto& r : results) {
      out["results"].push_back({{"kv", r.kv}, {"concurrency", r.concurrency}, {"requests", r.requests}, {"failed", r.failed},
                                {"seconds", r.seconds}, {"generated_tokens", r.generated}, {"tokens_per_s", r.tokens_per_s},
                                {"ttft_p50_s", r.ttft_p50}, {"ttft_p99_s", r.ttft_p99}, {"itl_p50_s", r.itl_p50},
                                {"itl_p90_s", r.itl_p90}, {"itl_p99_s", r.itl_p99}, {"stall_p50_s", r.stall_p50},
                                {"stall_max_s", r.stall_max}, {"stalls_s", r.stalls}, {"step_cost", r.step_cost},
                                {"decode_tokens_per_s", r.decode_tokens_per_s}, {"peak_streaming", r.peak_streaming},
                                {"peak_running", r.peak_running},
                                {"peak_waiting", r.peak_waiting}, {"peak_kv_bytes", r.peak_kv_bytes},
                                {"rss_peak_bytes", r.rss_peak_kib * 1024}});
    }
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("serve-bench: {} ({}), budget {}, prompts {} tokens, {} generated\n", server_model,
             a.url.empty() ? a.weights : "?", a.url.empty() ? a.kv_budget : "?",
             a.prompt_tokens, a.max_tokens);
  fmt::print("| kv | clients | requests | gen tok/s | decode tok/s (streams at once) | TTFT p50 / p99 (s) | ITL p50 / p90 / p99 (ms) | longest stall "
             "p50 / max (ms) | peak running | peak KV MiB | peak RSS MiB |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& r : results) {
    fmt::print("| {} | {} | {}{} | {:.1f} | {:.1f} ({:.0f}) | {:.2f} / {:.2f} | {:.0f} / {:.0f} / {:.0f} | {:.0f} / {:.0f} | {:.0f} | {:.1f} | "
               "{:.0f} |\n",
               r.kv, r.concurrency, r.requests, r.failed ? fmt::format(" ({} failed)", r.failed) : "", r.tokens_per_s,
               r.decode_tokens_per_s, r.peak_streaming, r.ttft_p50, r.ttft_p99, r.itl_p50 * 1e3, r.itl_p90 * 1e3, r.itl_p99 * 1e3, r.stall_p50 * 1e3,
               r.stall_max * 1e3, r.peak_running, r.peak_kv_bytes / (1 << 20), static_cast<double>(r.rss_peak_kib) / 1024.0);
  }
  return 0;
}

const CommandRegistration registration{"serve-bench", [](CLI::App& app) {
  app.description("Load generator for `turbokv serve`: tokens/s, TTFT, ITL, peak sequences, KV bytes and RSS");
  auto a = std::make_shared<BenchArgs>();
  app.add_option("--url", a->url, "a running server (default: start one per --kv configuration)");
  app.add_option("--model", a->model, "model for the servers it starts (a file, or synthetic:SHAPE)")->capture_default_str();
  app.add_option("--weights", a->weights, "weight type of a synthetic model")->capture_default_str();
  app.add_option("--kv", a->kv, "comma-separated cache configurations (dense16, tq4, tq4s1w32-x16, ...; default: the server's)")
      ->capture_default_str();
  app.add_option("--kv-budget", a->kv_budget, "KV budget of the servers it starts")->capture_default_str();
  app.add_option("--concurrency", a->concurrency, "comma-separated client counts")->capture_default_str();
  app.add_option("--requests", a->requests, "requests per level (0: twice the clients)")->capture_default_str();
  app.add_option("--prompt-tokens", a->prompt_tokens, "prompt length in tokens")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  app.add_option("--max-tokens", a->max_tokens, "tokens generated per request")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--parallel", a->parallel, "--parallel of the servers it starts")->capture_default_str();
  app.add_option("--threads", a->threads, "--threads of the servers it starts (0: all cores)")->capture_default_str();
  app.add_option("--vocab", a->vocab, "prompt token ids stay below it (default: what /v1/models reports)")
      ->check(CLI::Range(301, 1 << 24));
  app.add_option("--arrive-every", a->arrive_every, "seconds between arrivals: the first --concurrency requests start "
                 "together, the others one by one once those stream (0: each client sends its next when one ends)")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  app.add_option("--read-timeout", a->read_timeout, "seconds a request may wait for its next byte before it counts as "
                 "failed (a server with fewer slots than clients keeps the rest queued without a byte)")
      ->capture_default_str()->check(CLI::Range(0.01, 86400.0));
  app.add_option("--server-args", a->extra, "more arguments for the servers it starts (space-separated)");
  app.add_flag("--json", a->json_out, "print one JSON object");
  return [a] { return run_bench(*a); };
}};

}  // namespace
}  // namespace turbokv::tools
