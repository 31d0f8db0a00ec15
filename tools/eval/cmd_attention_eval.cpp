// `turbokv attention-eval`: attention quality of each cache configuration on synthetic keys and
// values shaped like a real model's (synthetic_kv.hpp), at any head size.
//
// Every configuration stores the same synthetic context; a set of decode queries (each seeing
// the whole context) attends through turbokv::attend, i.e. the cache's own kernel, and is
// compared with exact attention on the original float32 vectors (attend_reference):
//   output_rel_error  mean over query rows of ||o - o_exact|| / ||o_exact||
//   score_rmse        RMS over rows and keys of the logit error (q.k_hat - q.k) * scale, keys
//                     from fetch()
//   topk_recall       k = 8: of the true top-k keys by logit, the fraction found among the
//                     top-k by approximate logit (mean over rows)
//   bits_per_value    8 * nbytes / (2 * tokens * kv_heads * head_dim), everything stored
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <memory>
#include <numeric>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/command_registry.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/error.hpp"
#include "turbokv/synthetic_kv.hpp"

namespace turbokv::tools {
namespace {

constexpr int kTopK = 8;

struct Args {
  int head_dim = 128;
  size_t context = 4096;
  std::string kv;
  int q_heads = 8;
  int kv_heads = 4;
  int queries = 16;
  uint64_t seed = SyntheticKVOptions{}.seed;
  bool json = false;
};

struct Row {
  std::string config;
  std::string description;
  std::string not_applicable;  // non-empty: the reason
  double bits = 0, output_rel_error = 0, score_rmse = 0, topk_recall = 0;
};

// Logits [q_heads * queries][tokens] of every query row against the given keys.
std::vector<double> all_scores(const SyntheticKV& s, const std::vector<float>& keys) {
  const int d = s.head_dim, group = s.q_heads / s.kv_heads;
  const size_t n = s.n_tokens, rows = static_cast<size_t>(s.q_heads) * s.n_queries;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> scores(rows * n);
  for (size_t r = 0; r < rows; ++r) {
    const int kvh = static_cast<int>(r / s.n_queries) / group;
    const float* q = s.queries.data() + r * d;
    const float* k = keys.data() + static_cast<size_t>(kvh) * n * d;
    for (size_t t = 0; t < n; ++t) {
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += double(q[c]) * k[t * d + c];
      scores[r * n + t] = dot * scale;
    }
  }
  return scores;
}

std::vector<size_t> top_k(const double* scores, size_t n, int k) {
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), size_t{0});
  const size_t kk = std::min<size_t>(static_cast<size_t>(k), n);
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(kk), idx.end(),
                    [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  idx.resize(kk);
  std::sort(idx.begin(), idx.end());
  return idx;
}

Row evaluate(const KVConfigSpec& spec, const SyntheticKV& s, const std::vector<float>& exact_out,
             const std::vector<double>& exact_scores) {
  Row row{spec.name, spec.description, "", 0, 0, 0, 0};
  const std::string problem = kv_config_problem(spec, s.kv_heads, s.head_dim);
  if (!problem.empty()) {
    row.not_applicable = problem;
    return row;
  }
  auto cache = make_kv_cache(spec, s.kv_heads, s.head_dim);
  // Fill in prefill-sized chunks, as an engine would.
  const size_t n = s.n_tokens, d = s.head_dim, chunk = 512;
  for (size_t start = 0; start < n; start += chunk) {
    const size_t m = std::min(chunk, n - start);
    std::vector<float> k(s.kv_heads * m * d), v(k.size());
    for (int h = 0; h < s.kv_heads; ++h) {
      std::copy_n(s.keys.begin() + (h * n + start) * d, m * d, k.begin() + h * m * d);
      std::copy_n(s.values.begin() + (h * n + start) * d, m * d, v.begin() + h * m * d);
    }
    cache->append(k, v, m);
  }
  row.bits = kv_bits_per_value(*cache);

  AttentionOptions options;
  options.causal = false;  // decode queries: each sees the whole context
  std::vector<float> out(s.queries.size());
  attend(s.queries, s.q_heads, s.n_queries, *cache, out, options);
  const size_t rows = static_cast<size_t>(s.q_heads) * s.n_queries;
  double rel = 0;
  for (size_t r = 0; r < rows; ++r) {
    double num = 0, den = 0;
    for (size_t c = 0; c < d; ++c) {
      const double e = exact_out[r * d + c], a = out[r * d + c];
      num += (a - e) * (a - e);
      den += e * e;
    }
    rel += std::sqrt(num / std::max(den, 1e-300));
  }
  row.output_rel_error = rel / static_cast<double>(rows);

  std::vector<float> keys(s.keys.size()), values(s.values.size());
  cache->fetch(keys, values);
  const std::vector<double> scores = all_scores(s, keys);
  double sq = 0, recall = 0;
  for (size_t i = 0; i < scores.size(); ++i) sq += (scores[i] - exact_scores[i]) * (scores[i] - exact_scores[i]);
  for (size_t r = 0; r < rows; ++r) {
    const auto truth = top_k(exact_scores.data() + r * n, n, kTopK);
    const auto approx = top_k(scores.data() + r * n, n, kTopK);
    std::vector<size_t> common;
    std::set_intersection(truth.begin(), truth.end(), approx.begin(), approx.end(),
                          std::back_inserter(common));
    recall += static_cast<double>(common.size()) / static_cast<double>(truth.size());
  }
  row.score_rmse = std::sqrt(sq / static_cast<double>(scores.size()));
  row.topk_recall = recall / static_cast<double>(rows);
  return row;
}

// A per-layer configuration (tq3.5, tq4) gets one row per distinct layer width: the base widths
// ("other layers") and each group of layer_bits entries with the same widths.
std::vector<KVConfigSpec> expand_layers(const KVConfigSpec& spec) {
  if (spec.config.layer_bits.empty()) return {spec};
  std::vector<KVConfigSpec> out;
  KVConfigSpec base = spec;
  base.config.layer_bits.clear();
  base.name = spec.name + " (other layers)";
  std::vector<std::pair<std::vector<int>, LayerBits>> groups;
  for (const LayerBits& lb : spec.config.layer_bits) {
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& e) {
      return e.second.key_bits == lb.key_bits && e.second.value_bits == lb.value_bits;
    });
    if (g == groups.end()) groups.push_back({{lb.layer}, lb});
    else g->first.push_back(lb.layer);
  }
  for (const auto& [layers, lb] : groups) {
    KVConfigSpec v = base;
    v.config.tq.key_bits = lb.key_bits;
    v.config.tq.value_bits = lb.value_bits;
    v.name = fmt::format("{} (layer{} {})", spec.name, layers.size() > 1 ? "s" : "", fmt::join(layers, ","));
    out.push_back(std::move(v));
  }
  out.push_back(std::move(base));
  return out;
}

int run(const Args& a) {
  if (a.kv.empty()) throw Error("attention-eval: --kv needs at least one configuration");
  if (a.context < static_cast<size_t>(kTopK)) {
    throw Error(fmt::format("attention-eval: --context must be at least {}", kTopK));
  }
  const std::vector<KVConfigSpec> specs = parse_kv_config_list(a.kv);
  SyntheticKVOptions o;
  o.kv_heads = a.kv_heads;
  o.q_heads = a.q_heads;
  o.head_dim = a.head_dim;
  o.n_tokens = a.context;
  o.n_queries = a.queries;
  o.seed = a.seed;
  const SyntheticKV s = make_synthetic_kv(o);

  AttentionOptions options;
  options.causal = false;
  std::vector<float> exact_out(s.queries.size());
  attend_reference(s.queries, s.q_heads, s.n_queries, s.keys, s.values, s.kv_heads, s.n_tokens,
                   s.head_dim, exact_out, options);
  const std::vector<double> exact_scores = all_scores(s, s.keys);

  std::vector<Row> rows;
  for (const auto& spec : specs) {
    for (const auto& variant : expand_layers(spec)) rows.push_back(evaluate(variant, s, exact_out, exact_scores));
  }

  if (a.json) {
    nlohmann::json j;
    j["head_dim"] = a.head_dim;
    j["context"] = a.context;
    j["kv_heads"] = a.kv_heads;
    j["q_heads"] = a.q_heads;
    j["queries"] = a.queries;
    j["seed"] = a.seed;
    j["topk"] = kTopK;
    j["rows"] = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json jr;
      jr["config"] = r.config;
      if (!r.not_applicable.empty()) {
        jr["not_applicable"] = r.not_applicable;
        for (const char* key : {"bits_per_value", "compression_vs_fp16", "output_rel_error",
                                "score_rmse", "topk_recall"}) {
          jr[key] = nullptr;
        }
      } else {
        jr["bits_per_value"] = r.bits;
        jr["compression_vs_fp16"] = 16.0 / r.bits;
        jr["output_rel_error"] = r.output_rel_error;
        jr["score_rmse"] = r.score_rmse;
        jr["topk_recall"] = r.topk_recall;
      }
      j["rows"].push_back(jr);
    }
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print("attention-eval: head_dim {}, context {}, kv_heads {}, q_heads {}, {} decode queries "
             "per head, seed {}\n",
             a.head_dim, a.context, a.kv_heads, a.q_heads, a.queries, a.seed);
  fmt::print("{:<12} {:>9} {:>8} {:>12} {:>11} {:>9}  {}\n", "config", "bits/val", "compr",
             "out rel err", "score rmse", "top-8", "what");
  for (const Row& r : rows) {
    if (!r.not_applicable.empty()) {
      fmt::print("{:<12} {:>9} {:>8} {:>12} {:>11} {:>9}  {}\n", r.config, "n/a", "n/a", "n/a",
                 "n/a", "n/a", r.not_applicable);
      continue;
    }
    fmt::print("{:<12} {:>9.3f} {:>7.2f}x {:>12.5f} {:>11.5f} {:>9.4f}  {}\n", r.config, r.bits,
               16.0 / r.bits, r.output_rel_error, r.score_rmse, r.topk_recall, r.description);
  }
  return 0;
}

const CommandRegistration registration{"attention-eval", [](CLI::App& app) {
  app.description("Attention output/score error and top-k recall of cache configurations on "
                  "synthetic keys/values shaped like a real model's");
  auto args = std::make_shared<Args>();
  app.add_option("--head-dim", args->head_dim, "head dimension (even)")->capture_default_str();
  app.add_option("--context", args->context, "tokens in the cache")->capture_default_str();
  app.add_option("--kv", args->kv, "comma-separated configurations (dense16, tq3, k4v2, q4_0h, "
                 "kivi2, affine4, ...)")->required();
  app.add_option("--q-heads", args->q_heads, "query heads (a multiple of --kv-heads)")
      ->capture_default_str();
  app.add_option("--kv-heads", args->kv_heads, "KV heads")->capture_default_str();
  app.add_option("--queries", args->queries, "decode queries per query head")
      ->capture_default_str();
  app.add_option("--seed", args->seed, "synthetic data seed")->capture_default_str();
  app.add_flag("--json", args->json, "print one JSON object instead of the table");
  return [args] { return run(*args); };
}};

}  // namespace
}  // namespace turbokv::tools
