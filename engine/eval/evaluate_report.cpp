// Table and JSON of `turbokv eval` (issue 6).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/eval/evaluate.hpp"

namespace turbokv::engine {

namespace {

const char* protocol_name(WindowProtocol p) {
  return p == WindowProtocol::llama_perplexity ? "llama-perplexity" : "fresh";
}

}  // namespace

std::string format_eval_table(const EvalResult& r) {
  const char* layout = r.protocol == WindowProtocol::llama_perplexity
                           ? "llama-perplexity's chunks (BOS first, second half scored)"
                           : "BOS + text";
  std::string out = fmt::format(
      "model {}: {} tokens scored in {} windows of up to {} positions ({}); dense fp32 ppl {:.4f}\n",
      r.model, r.tokens, r.windows, r.ctx, layout, r.ppl_reference);
  out += fmt::format("{:<14} {:>9} {:>11} {:>10} {:>10} {:>8} {:>9} {:>10} {:>10}\n", "config",
                     "bits/val", "compression", "logit cos", "min cos", "top-1", "ppl", "delta ppl", "KL");
  for (const EvalRow& row : r.rows) {
    if (!row.applicable) {
      out += fmt::format("{:<14} n/a: {}\n", row.config, row.problem);
      continue;
    }
    const EvalMetrics& m = row.metrics;
    out += fmt::format("{:<14} {:>9.3f} {:>10.2f}x {:>10.6f} {:>10.6f} {:>7.2f}% {:>9.4f} {:>+10.4f} {:>10.3e}{}\n",
                       row.config, row.bits_per_value, row.compression_vs_fp16, m.cosine_mean, m.cosine_min,
                       100.0 * m.top1_agreement, m.ppl, m.delta_ppl, m.kl, row.decode_steps ? "  (decode steps)" : "");
  }
  return out;
}

std::string format_eval_json(const EvalResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const EvalRow& row : r.rows) {
    nlohmann::json j;
    j["config"] = row.config;
    if (row.applicable) {
      const EvalMetrics& m = row.metrics;
      j["bits_per_value"] = row.bits_per_value;
      j["compression_vs_fp16"] = row.compression_vs_fp16;
      j["logit_cosine"] = m.cosine_mean;
      j["logit_cosine_min"] = m.cosine_min;
      j["top1_agreement"] = m.top1_agreement;
      j["ppl"] = m.ppl;
      j["delta_ppl"] = m.delta_ppl;
      j["kl"] = m.kl;
      j["kl_max"] = m.kl_max;
    } else {
      // Not applicable to this model's shape: the same fields, null.
      for (const char* key : {"bits_per_value", "compression_vs_fp16", "logit_cosine", "logit_cosine_min",
                              "top1_agreement", "ppl", "delta_ppl", "kl", "kl_max"}) {
        j[key] = nullptr;
      }
    }
    rows.push_back(std::move(j));
  }
  nlohmann::json out;
  out["model"] = r.model;
  out["tokens"] = r.tokens;
  out["windows"] = r.windows;
  out["ctx"] = r.ctx;
  out["protocol"] = protocol_name(r.protocol);
  out["ppl_reference"] = r.ppl_reference;
  out["rows"] = std::move(rows);
  return out.dump();
}

}  // namespace turbokv::engine
