#include "engine/eval/evaluate_decode.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <memory>

#include "engine/runtime/batch_forward.hpp"
#include "engine/runtime/forward.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prompt_cache.hpp"
#include "turbokv/prng.hpp"
#include "turbokv/synthetic_kv.hpp"
#include "turbokv/timing.hpp"

namespace turbokv::engine {

namespace {

// Synthetic keys/values are generated once, for at most this many tokens, and appended
// repeatedly: their statistics are what matters, not that every token is new.
constexpr size_t kFillBlockTokens = 2048;

// One configuration at one context and batch: `batch` sequences, each with its own cache.
struct Entry {
  DecodeBenchRow row;
  std::vector<PromptCache> caches;
  std::vector<std::vector<KVCache*>> layers;  // per sequence, per layer
  std::vector<double> wall_seconds, cpu_seconds;
};

// Appends `n` tokens of `block` (head-major [kv_heads][block_tokens][head_dim]) to every layer.
void append_prefix(const SyntheticKV& block, size_t n, std::vector<KVCache*>& layers, std::vector<float>& k,
                   std::vector<float>& v) {
  const size_t hd = static_cast<size_t>(block.head_dim);
  if (n == block.n_tokens) {
    for (KVCache* c : layers) c->append(block.keys, block.values, n);
    return;
  }
  k.resize(static_cast<size_t>(block.kv_heads) * n * hd);
  v.resize(k.size());
  for (int h = 0; h < block.kv_heads; ++h) {
    const size_t src = static_cast<size_t>(h) * block.n_tokens * hd;
    const size_t dst = static_cast<size_t>(h) * n * hd;
    std::copy_n(block.keys.begin() + static_cast<std::ptrdiff_t>(src), n * hd, k.begin() + static_cast<std::ptrdiff_t>(dst));
    std::copy_n(block.values.begin() + static_cast<std::ptrdiff_t>(src), n * hd, v.begin() + static_cast<std::ptrdiff_t>(dst));
  }
  for (KVCache* c : layers) c->append(k, v, n);
}

}  // namespace

DecodeBenchResult run_decode_bench(const Model& model, const DecodeBenchOptions& options, ThreadPool& pool) {
  const ModelConfig& mc = model.config;
  if (options.contexts.empty()) throw Error("decode-bench: no context lengths");
  if (options.configs.empty()) throw Error("decode-bench: no cache configurations");
  if (options.steps < 1) throw Error("decode-bench: steps must be at least 1");
  if (options.warmup < 0) throw Error("decode-bench: warmup must not be negative");
  for (const size_t ctx : options.contexts) {
    if (ctx == 0 || ctx > (size_t{1} << 24)) throw Error(fmt::format("decode-bench: context {} outside [1, 2^24]", ctx));
  }
  if (options.batches.empty()) throw Error("decode-bench: no batch sizes");
  for (const size_t b : options.batches) {
    if (b == 0 || b > 4096) throw Error(fmt::format("decode-bench: batch {} outside [1, 4096]", b));
  }
  const auto note = [&](const std::string& s) {
    if (options.progress) options.progress(s);
  };

  DecodeBenchResult result;
  result.model = model.path;
  result.weights = model.weight_type_summary();
  result.weight_bytes = model.weight_bytes();
  result.threads = pool.size();
  result.cpu_time = options.cpu_time;

  Forward forward(model, pool, 1);
  BatchForward batch_forward(model, pool);
  const int token = std::min(1000, mc.vocab_size - 1);
  std::vector<float> k_scratch, v_scratch;

  for (const size_t ctx : options.contexts) {
    SyntheticKVOptions so;
    so.kv_heads = mc.n_kv_heads;
    so.q_heads = mc.n_kv_heads;
    so.head_dim = mc.head_dim;
    so.n_tokens = std::min(ctx, kFillBlockTokens);
    so.n_queries = 1;
    so.seed = derive_seed(options.seed, ctx);
    const SyntheticKV block = make_synthetic_kv(so);
    const size_t first_row_of_context = result.rows.size();

    for (const size_t batch : options.batches) {
      std::vector<std::unique_ptr<Entry>> entries;
      for (const KVConfigSpec& spec : options.configs) {
        auto e = std::make_unique<Entry>();
        e->row.config = spec.name;
        e->row.context = ctx;
        e->row.batch = batch;
        e->row.problem = kv_config_problem(spec, mc.n_kv_heads, mc.head_dim);
        e->row.applicable = e->row.problem.empty();
        if (e->row.applicable) {
          note(fmt::format("context {}, batch {}: filling {}", ctx, batch, spec.name));
          const auto t0 = std::chrono::steady_clock::now();
          for (size_t q = 0; q < batch; ++q) {
            e->caches.push_back(make_prompt_cache(mc.n_layers, mc.n_kv_heads, mc.head_dim, spec.config, mc.layer_windows()));
            std::vector<KVCache*> layers;
            for (size_t l = 0; l < e->caches.back().n_layers(); ++l) layers.push_back(&e->caches.back().layer(l));
            for (size_t filled = 0; filled < ctx;) {
              const size_t n = std::min(block.n_tokens, ctx - filled);
              append_prefix(block, n, layers, k_scratch, v_scratch);
              filled += n;
              // Sliding layers free behind their window as the decoder's would (a ring).
              for (size_t l = 0; l < layers.size(); ++l) {
                const size_t w = mc.layer_window(static_cast<int>(l));
                if (w > 0) layers[l]->drop_before(sliding_window_keep_from(filled, w));
              }
            }
            e->row.kv_bytes += e->caches.back().nbytes();
            e->layers.push_back(std::move(layers));
          }
          e->row.fill_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        entries.push_back(std::move(e));
      }

      const int one[1] = {token};
      std::vector<BatchEntry> step_entries(batch);
      note(fmt::format("context {}, batch {}: decoding", ctx, batch));
      for (int s = 0; s < options.warmup + options.steps; ++s) {
        for (auto& e : entries) {
          if (!e->row.applicable) continue;
          for (size_t q = 0; q < batch; ++q) step_entries[q] = BatchEntry{one, e->layers[q], true};
          const double c0 = process_cpu_seconds();
          const auto t0 = std::chrono::steady_clock::now();
          if (batch == 1) {
            (void)forward.run(one, e->layers[0]);
          } else {
            batch_forward.run(step_entries);
          }
          const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          const double dc = (process_cpu_seconds() - c0) / pool.size();
          if (s >= options.warmup) {
            e->wall_seconds.push_back(dt);
            e->cpu_seconds.push_back(dc);
          }
        }
      }

      const DecodeBenchRow* dense = nullptr;
      const double per_token = 1.0 / static_cast<double>(batch);
      for (auto& e : entries) {
        if (!e->row.applicable) continue;
        const std::vector<double>& times = options.cpu_time ? e->cpu_seconds : e->wall_seconds;
        const double med = median(times);
        double mean = 0.0;
        for (const double t : times) mean += t;
        mean /= static_cast<double>(times.size());
        e->row.wall_ms_median = 1e3 * median(e->wall_seconds);
        e->row.cpu_ms_median = 1e3 * median(e->cpu_seconds);
        e->row.step_ms_median = 1e3 * med;
        e->row.ms_per_token_median = 1e3 * med * per_token;
        e->row.ms_per_token_mean = 1e3 * mean * per_token;
        e->row.tokens_per_s = med > 0 ? static_cast<double>(batch) / med : 0.0;
        if (e->row.config == "dense16" && dense == nullptr) dense = &e->row;
      }
      for (auto& e : entries) {
        if (e->row.applicable && dense != nullptr) {
          e->row.speedup_vs_dense16 = e->row.tokens_per_s / dense->tokens_per_s;
          e->row.kv_bytes_vs_dense16 = static_cast<double>(e->row.kv_bytes) / static_cast<double>(dense->kv_bytes);
        }
        result.rows.push_back(e->row);
      }
    }
    // Each row's step against the same configuration's batch-1 step at this context.
    for (size_t i = first_row_of_context; i < result.rows.size(); ++i) {
      DecodeBenchRow& row = result.rows[i];
      if (!row.applicable) continue;
      for (size_t j = first_row_of_context; j < result.rows.size(); ++j) {
        const DecodeBenchRow& one_row = result.rows[j];
        if (one_row.batch == 1 && one_row.config == row.config && one_row.applicable && one_row.step_ms_median > 0) {
          row.step_vs_batch1 = row.step_ms_median / one_row.step_ms_median;
          break;
        }
      }
    }
  }
  return result;
}

std::string format_decode_bench_table(const DecodeBenchResult& r) {
  std::string out = fmt::format(
      "model {} ({} weights, {:.2f} GB), {} threads; speed = 1 / median step {}\n", r.model, r.weights,
      r.weight_bytes / 1e9, r.threads, r.cpu_time ? "CPU time / threads" : "wall time");
  out += fmt::format("{:<12} {:>8} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>9} {:>9} {:>8}\n",
                     "config", "context", "batch", "tokens/s", "ms/tok med", "ms/tok avg", "step ms", "step/b1",
                     "cpu/thr med", "KV bytes", "KV ratio", "speedup", "fill s");
  for (const DecodeBenchRow& row : r.rows) {
    if (!row.applicable) {
      out += fmt::format("{:<12} {:>8} {:>5} n/a: {}\n", row.config, row.context, row.batch, row.problem);
      continue;
    }
    const std::string ratio = row.kv_bytes_vs_dense16 > 0 ? fmt::format("{:.3f}", row.kv_bytes_vs_dense16) : "-";
    const std::string speedup = row.speedup_vs_dense16 > 0 ? fmt::format("{:.2f}x", row.speedup_vs_dense16) : "-";
    const std::string step_ratio = row.step_vs_batch1 > 0 ? fmt::format("{:.2f}x", row.step_vs_batch1) : "-";
    out += fmt::format(
        "{:<12} {:>8} {:>5} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10} {:>10.2f} {:>12} {:>9} {:>9} {:>8.1f}\n",
        row.config, row.context, row.batch, row.tokens_per_s, row.ms_per_token_median, row.ms_per_token_mean,
        row.step_ms_median, step_ratio, row.cpu_ms_median, row.kv_bytes, ratio, speedup, row.fill_seconds);
  }
  return out;
}

std::string format_decode_bench_json(const DecodeBenchResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const DecodeBenchRow& row : r.rows) {
    nlohmann::json j;
    j["config"] = row.config;
    j["context"] = row.context;
    j["batch"] = row.batch;
    j["tokens_per_s"] = row.applicable ? nlohmann::json(row.tokens_per_s) : nlohmann::json(nullptr);
    j["step_ms"] = row.applicable ? nlohmann::json(row.step_ms_median) : nlohmann::json(nullptr);
    j["kv_bytes"] = row.applicable ? nlohmann::json(row.kv_bytes) : nlohmann::json(nullptr);
    j["speedup_vs_dense16"] =
        row.applicable && row.speedup_vs_dense16 > 0 ? nlohmann::json(row.speedup_vs_dense16) : nlohmann::json(nullptr);
    j["step_vs_batch1"] =
        row.applicable && row.step_vs_batch1 > 0 ? nlohmann::json(row.step_vs_batch1) : nlohmann::json(nullptr);
    rows.push_back(std::move(j));
  }
  nlohmann::json out;
  out["model"] = r.model;
  out["rows"] = std::move(rows);
  return out.dump();
}

}  // namespace turbokv::engine
