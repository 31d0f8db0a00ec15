#include "engine/eval/evaluate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/runtime/forward.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prompt_cache.hpp"

namespace turbokv::engine {

// ---- text preparation ------------------------------------------------------------------------

int newline_token(const Tokenizer& tokenizer) {
  if (const auto* sp = dynamic_cast<const SentencePieceTokenizer*>(&tokenizer)) {
    // llama2.c-trained models saw the newline as its byte token, whatever the vocabulary holds.
    int id = sp->find("<0x0A>");
    if (id < 0) id = sp->find("\n");
    if (id < 0) throw Error("tokenizer has no newline token (<0x0A>)");
    return id;
  }
  const std::vector<int> ids = tokenizer.encode("\n", false);
  if (ids.size() != 1) {
    throw Error(fmt::format("tokenizer encodes a newline as {} tokens, not one", ids.size()));
  }
  return ids[0];
}

std::vector<int> tokenize_lines(const Tokenizer& tokenizer, std::string_view text,
                                bool drop_percent_lines) {
  const int newline = newline_token(tokenizer);
  std::vector<int> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (drop_percent_lines && line == "%") continue;
    if (!line.empty()) {
      const std::vector<int> ids = tokenizer.encode(line, false);
      out.insert(out.end(), ids.begin(), ids.end());
    }
    out.push_back(newline);
  }
  return out;
}

std::vector<std::vector<int>> make_windows(std::span<const int> tokens, int ctx, int bos_id) {
  if (ctx < 2) throw Error(fmt::format("evaluation context {} is too short (at least 2 positions)", ctx));
  const size_t per_window = static_cast<size_t>(ctx) - 1;
  std::vector<std::vector<int>> windows;
  for (size_t begin = 0; begin < tokens.size(); begin += per_window) {
    const size_t n = std::min(per_window, tokens.size() - begin);
    std::vector<int> w;
    w.reserve(n + 1);
    w.push_back(bos_id);
    w.insert(w.end(), tokens.begin() + static_cast<std::ptrdiff_t>(begin),
             tokens.begin() + static_cast<std::ptrdiff_t>(begin + n));
    windows.push_back(std::move(w));
  }
  return windows;
}

WindowProtocol parse_window_protocol(std::string_view name) {
  if (name == "fresh") return WindowProtocol::fresh;
  if (name == "llama-perplexity") return WindowProtocol::llama_perplexity;
  throw Error(fmt::format("unknown window protocol '{}' (fresh or llama-perplexity)", name));
}

std::vector<std::vector<int>> make_llama_perplexity_windows(std::span<const int> tokens, int ctx, int bos_id) {
  if (ctx < 2) throw Error(fmt::format("evaluation context {} is too short (at least 2 positions)", ctx));
  const size_t n_ctx = static_cast<size_t>(ctx);
  if (tokens.size() < 2 * n_ctx) {
    throw Error(fmt::format("llama-perplexity's protocol needs at least 2 x ctx = {} tokens; the text has {}",
                            2 * n_ctx, tokens.size()));
  }
  std::vector<std::vector<int>> windows;
  for (size_t begin = 0; begin + n_ctx <= tokens.size(); begin += n_ctx) {
    std::vector<int> w(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                       tokens.begin() + static_cast<std::ptrdiff_t>(begin + n_ctx));
    if (bos_id >= 0) w[0] = bos_id;
    windows.push_back(std::move(w));
  }
  return windows;
}

// ---- metrics ---------------------------------------------------------------------------------

namespace {

void check_same_size(std::span<const float> a, std::span<const float> b, const char* what) {
  if (a.size() != b.size() || a.empty()) {
    throw Error(fmt::format("{}: logit vectors of sizes {} and {}", what, a.size(), b.size()));
  }
}

}  // namespace

double logit_cosine(std::span<const float> a, std::span<const float> b) {
  check_same_size(a, b, "logit_cosine");
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  if (aa == 0.0 && bb == 0.0) return 1.0;
  if (aa == 0.0 || bb == 0.0) return 0.0;
  return ab / std::sqrt(aa * bb);
}

double token_nll(std::span<const float> logits, int target) {
  if (target < 0 || static_cast<size_t>(target) >= logits.size()) {
    throw Error(fmt::format("token_nll: target {} outside {} logits", target, logits.size()));
  }
  return log_sum_exp(logits) - static_cast<double>(logits[static_cast<size_t>(target)]);
}

double kl_divergence(std::span<const float> p_logits, std::span<const float> q_logits) {
  check_same_size(p_logits, q_logits, "kl_divergence");
  const double lp = log_sum_exp(p_logits);
  const double lq = log_sum_exp(q_logits);
  double kl = 0.0;
  for (size_t i = 0; i < p_logits.size(); ++i) {
    const double log_p = static_cast<double>(p_logits[i]) - lp;
    const double log_q = static_cast<double>(q_logits[i]) - lq;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  // Rounding can leave a tiny negative sum for (nearly) identical distributions.
  return std::max(kl, 0.0);
}

double perplexity(std::span<const double> nll) {
  if (nll.empty()) return 1.0;
  double s = 0.0;
  for (const double v : nll) s += v;
  return std::exp(s / static_cast<double>(nll.size()));
}

void MetricAccumulator::add(std::span<const float> reference, std::span<const float> logits, int target) {
  const double cos = logit_cosine(reference, logits);
  cos_sum_ += cos;
  cos_min_ = std::min(cos_min_, cos);
  if (argmax(reference) == argmax(logits)) ++top1_;
  const double kl = kl_divergence(reference, logits);
  kl_sum_ += kl;
  kl_max_ = std::max(kl_max_, kl);
  nll_sum_ += token_nll(logits, target);
  nll_ref_sum_ += token_nll(reference, target);
  ++n_;
}

EvalMetrics MetricAccumulator::result() const {
  EvalMetrics m;
  m.positions = n_;
  if (n_ == 0) return m;
  const double n = static_cast<double>(n_);
  m.cosine_mean = cos_sum_ / n;
  m.cosine_min = cos_min_;
  m.top1_agreement = static_cast<double>(top1_) / n;
  m.ppl = std::exp(nll_sum_ / n);
  m.ppl_reference = std::exp(nll_ref_sum_ / n);
  m.delta_ppl = m.ppl - m.ppl_reference;
  m.kl = kl_sum_ / n;
  m.kl_max = kl_max_;
  return m;
}

// ---- the evaluation --------------------------------------------------------------------------

bool needs_decode_steps(const KVConfigSpec& spec) {
  const CacheConfig& c = spec.config;
  if (c.kind == "turboquant") return c.tq.window > 0;
  if (c.kind == "kivi") return true;
  return false;
}

namespace {

struct ConfigState {
  const KVConfigSpec* spec = nullptr;
  EvalRow row;
  MetricAccumulator acc;
};

std::vector<KVCache*> layer_pointers(PromptCache& cache) {
  std::vector<KVCache*> out;
  for (size_t l = 0; l < cache.n_layers(); ++l) out.push_back(&cache.layer(l));
  return out;
}

}  // namespace

EvalResult evaluate_kv_configs(const Model& model, std::span<const int> text_tokens,
                               std::span<const KVConfigSpec> configs, const EvalOptions& options,
                               ThreadPool& pool) {
  const ModelConfig& mc = model.config;
  const int ctx = options.ctx > 0 ? options.ctx : mc.seq_len;
  if (ctx < 2) throw Error(fmt::format("eval: context {} is too short (at least 2 positions)", ctx));
  check_rope_factors_for(mc, ctx, "eval");
  if (options.max_chunk < 1) throw Error("eval: max_chunk must be at least 1");
  if (configs.empty()) throw Error("eval: no configurations");
  std::span<const int> tokens = text_tokens;
  if (options.max_tokens > 0 && tokens.size() > options.max_tokens) tokens = tokens.first(options.max_tokens);
  if (tokens.empty()) throw Error("eval: the text has no tokens");
  for (const int t : tokens) {
    if (t < 0 || t >= mc.vocab_size) {
      throw Error(fmt::format("eval: token id {} outside the model's vocabulary of {}", t, mc.vocab_size));
    }
  }

  const bool llama_protocol = options.protocol == WindowProtocol::llama_perplexity;
  const auto windows = llama_protocol ? make_llama_perplexity_windows(tokens, ctx, mc.bos_id)
                                      : make_windows(tokens, ctx, mc.bos_id);
  // Position i of a window is scored (predicts window[i + 1]) for first_scored <= i < size - 1.
  const size_t first_scored = llama_protocol ? static_cast<size_t>(ctx / 2) : 0;
  const size_t vocab = static_cast<size_t>(mc.vocab_size);
  const size_t per_token_values = 2ull * static_cast<size_t>(mc.n_kv_heads) * mc.head_dim * mc.n_layers;

  std::vector<ConfigState> states(configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    ConfigState& s = states[i];
    s.spec = &configs[i];
    s.row.config = configs[i].name;
    s.row.description = configs[i].description;
    s.row.problem = kv_config_problem(configs[i], mc.n_kv_heads, mc.head_dim);
    s.row.applicable = s.row.problem.empty();
    s.row.decode_steps = needs_decode_steps(configs[i]);
  }
  size_t applicable = 0;
  for (const auto& s : states) applicable += s.row.applicable ? 1 : 0;

  Forward chunked(model, pool, std::min(options.max_chunk, ctx));
  Forward stepped(model, pool, 1);
  CacheConfig reference_config;
  reference_config.kind = "dense";
  reference_config.dense_dtype = DenseDtype::f32;

  std::vector<float> reference_logits, logits;
  const size_t total_runs = windows.size() * (applicable + 1);
  size_t done = 0;
  double reference_nll = 0.0;
  size_t scored = 0;
  for (const auto& window : windows) {
    const size_t n = window.size();
    reference_logits.assign(n * vocab, 0.0f);
    {
      PromptCache cache = make_prompt_cache(mc.n_layers, mc.n_kv_heads, mc.head_dim, reference_config, mc.layer_windows());
      const auto layers = layer_pointers(cache);
      chunked.run_all_logits(window, layers, reference_logits);
    }
    for (size_t i = first_scored; i + 1 < n; ++i) {
      const std::span<const float> row(reference_logits.data() + i * vocab, vocab);
      reference_nll += token_nll(row, window[i + 1]);
      if (options.reference_logits) options.reference_logits(row);
    }
    scored += n - 1 - first_scored;
    ++done;
    if (options.progress) options.progress(done, total_runs, "dense32 (reference)");
    for (ConfigState& s : states) {
      if (!s.row.applicable) continue;
      PromptCache cache = make_prompt_cache(mc.n_layers, mc.n_kv_heads, mc.head_dim, s.spec->config, mc.layer_windows());
      const auto layers = layer_pointers(cache);
      logits.assign(n * vocab, 0.0f);
      (s.row.decode_steps ? stepped : chunked).run_all_logits(window, layers, logits);
      // Position i predicts window[i + 1]; the window's last position predicts nothing here.
      for (size_t i = first_scored; i + 1 < n; ++i) {
        s.acc.add(std::span<const float>(reference_logits.data() + i * vocab, vocab),
                  std::span<const float>(logits.data() + i * vocab, vocab), window[i + 1]);
      }
      s.row.kv_bytes += cache.nbytes();
      s.row.stored_values += n * per_token_values;
      ++done;
      if (options.progress) options.progress(done, total_runs, s.row.config);
    }
  }

  EvalResult result;
  result.model = model.path;
  result.tokens = scored;
  result.windows = windows.size();
  result.ctx = ctx;
  result.protocol = options.protocol;
  result.ppl_reference = std::exp(reference_nll / static_cast<double>(scored));
  for (ConfigState& s : states) {
    if (s.row.applicable) {
      s.row.metrics = s.acc.result();
      s.row.bits_per_value = 8.0 * static_cast<double>(s.row.kv_bytes) / static_cast<double>(s.row.stored_values);
      s.row.compression_vs_fp16 = s.row.bits_per_value > 0 ? 16.0 / s.row.bits_per_value : 0.0;
    }
    result.rows.push_back(std::move(s.row));
  }
  return result;
}

}  // namespace turbokv::engine
