// Table and JSON of `turbokv eval` (issue 6).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/eval/evaluate.hpp"

namespace turbokv::engine {

std::string format_eval_table(const EvalResult& r) {
  std::string out = fmt::format(
      "model {}: {} tokens in {} windows of up to {} positions (BOS + text); dense fp32 ppl {:.4f}\n",
      r.model, r.tokens, r.windows, r.ctx, r.ppl_reference);
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
    } else {
      // Not applicable to this model's shape: the same fields, null.
      for (const char* key : {"bits_per_value", "compression_vs_fp16", "logit_cosine", "logit_cosine_min",
                              "top1_agreement", "ppl", "delta_ppl", "kl"}) {
        j[key] = nullptr;
      }
    }
    rows.push_back(std::move(j));
  }
  nlohmann::json out;
  out["model"] = r.model;
  out["tokens"] = r.tokens;
  out["rows"] = std::move(rows);
  return out.dump();
}

}  // namespace turbokv::engine
