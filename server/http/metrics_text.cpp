#include "server/http/metrics_text.hpp"

#include <fmt/format.h>

#include <vector>

namespace turbokv::server {
namespace {

struct Row {
  const char* name;
  const char* type;  // gauge or counter
  const char* help;
  double value;
};

std::vector<Row> scheduler_rows(const SchedulerMetrics& m) {
  return {
    {"turbokv_requests_running", "gauge", "Sequences in the running batch", static_cast<double>(m.running)},
    {"turbokv_requests_waiting", "gauge", "Requests queued for admission", static_cast<double>(m.waiting)},
    {"turbokv_requests_running_peak", "gauge", "Most sequences ever running at once",
      static_cast<double>(m.peak_running)},
    {"turbokv_kv_budget_bytes", "gauge", "The KV memory budget (--kv-budget)",
      static_cast<double>(m.kv_budget)},
    {"turbokv_kv_reserved_bytes", "gauge", "KV bytes reserved by running sequences",
      static_cast<double>(m.kv_reserved)},
    {"turbokv_kv_used_bytes", "gauge", "KV bytes allocated (running caches and prefix cache)",
      static_cast<double>(m.kv_allocated)},
    {"turbokv_kv_used_bytes_peak", "gauge", "Most KV bytes ever allocated at once",
      static_cast<double>(m.peak_kv_allocated)},
    {"turbokv_kv_tokens", "gauge", "Tokens held by running sequences' caches",
      static_cast<double>(m.kv_tokens)},
    {"turbokv_prefix_cache_bytes", "gauge", "Bytes held by the prefix cache",
      static_cast<double>(m.prefix_cache_bytes)},
    {"turbokv_prefix_cache_entries", "gauge", "Prefixes held by the prefix cache",
      static_cast<double>(m.prefix_cache_entries)},
    {"turbokv_prefix_cache_hits_total", "counter", "Admitted requests that restored a prefix",
      static_cast<double>(m.prefix_cache_hits_total)},
    {"turbokv_prefix_cache_misses_total", "counter", "Admitted requests with no stored prefix",
      static_cast<double>(m.prefix_cache_misses_total)},
    {"turbokv_prefix_cache_evictions_total", "counter", "Prefixes evicted for room",
      static_cast<double>(m.prefix_cache_evictions_total)},
    {"turbokv_prompt_tokens_total", "counter", "Prompt tokens of admitted requests",
      static_cast<double>(m.prompt_tokens_total)},
    {"turbokv_prompt_tokens_cached_total", "counter", "Prompt tokens restored from the prefix cache",
      static_cast<double>(m.prompt_tokens_cached_total)},
    {"turbokv_prompt_tokens_computed_total", "counter", "Prompt tokens computed",
      static_cast<double>(m.prompt_tokens_computed_total)},
    {"turbokv_generation_tokens_total", "counter", "Tokens generated",
      static_cast<double>(m.generated_tokens_total)},
    {"turbokv_requests_finished_total", "counter", "Requests finished",
      static_cast<double>(m.requests_finished_total)},
    {"turbokv_requests_cancelled_total", "counter", "Requests cancelled (client gone)",
      static_cast<double>(m.requests_cancelled_total)},
    {"turbokv_requests_failed_total", "counter", "Requests failed",
      static_cast<double>(m.requests_failed_total)},
    {"turbokv_requests_rejected_total", "counter", "Requests refused with 429 (queue full)",
      static_cast<double>(m.requests_rejected_total)},
    {"turbokv_batch_sequences", "gauge", "Sequences in the last step",
      static_cast<double>(m.last_batch_sequences)},
    {"turbokv_batch_rows", "gauge", "Token rows in the last step", static_cast<double>(m.last_batch_rows)},
    {"turbokv_steps_total", "counter", "Batched forward steps", static_cast<double>(m.steps_total)},
    {"turbokv_step_seconds_total", "counter", "Seconds spent in forward steps",
      static_cast<double>(m.step_seconds_total)},
  };
}

// The shared prefix store's tier (--prefix-store): present only when one is configured.
std::vector<Row> prefix_store_rows(const SchedulerMetrics& m) {
  const SharedPrefixMetrics& p = m.shared;
  return {
    {"turbokv_prompt_tokens_store_total", "counter", "Prompt tokens restored from the shared prefix store",
      static_cast<double>(m.prompt_tokens_store_total)},
    {"turbokv_prefix_store_hits_total", "counter", "Admitted requests that restored a prefix from the store",
      static_cast<double>(m.prefix_store_hits_total)},
    {"turbokv_prefix_store_misses_total", "counter", "Admitted requests that took nothing from the store",
      static_cast<double>(m.prefix_store_misses_total)},
    {"turbokv_prefix_store_lookups_total", "counter", "Store lookups", static_cast<double>(p.lookups_total)},
    {"turbokv_prefix_store_unavailable_total", "counter",
      "Lookups that found the store down, slow or failing (the prompt was computed)",
      static_cast<double>(p.unavailable_total)},
    {"turbokv_prefix_store_evicted_total", "counter", "Values gone between EXISTS and GET",
      static_cast<double>(p.evicted_total)},
    {"turbokv_prefix_store_rejected_total", "counter",
      "Stored values refused: truncated, corrupt, another model's or configuration's",
      static_cast<double>(p.rejected_total)},
    {"turbokv_prefix_store_offers_total", "counter", "Prefixes queued for the store",
      static_cast<double>(p.offers_total)},
    {"turbokv_prefix_store_offer_bytes_total", "counter", "Bytes of the prefixes queued for the store",
      static_cast<double>(p.offer_bytes_total)},
    {"turbokv_prefix_store_writes_total", "counter", "Values written to the store",
      static_cast<double>(p.store.writes_total)},
    {"turbokv_prefix_store_write_bytes_total", "counter", "Bytes written to the store",
      static_cast<double>(p.store.write_bytes_total)},
    {"turbokv_prefix_store_writes_failed_total", "counter", "Writes that failed (store down, slow, full)",
      static_cast<double>(p.store.writes_failed_total)},
    {"turbokv_prefix_store_writes_dropped_total", "counter", "Writes dropped: the write queue was full",
      static_cast<double>(p.store.writes_dropped_total)},
    {"turbokv_prefix_store_calls_failed_total", "counter", "Store calls that failed or timed out",
      static_cast<double>(p.store.calls_failed_total)},
  };
}

void append(std::string& out, const std::vector<Row>& rows) {
  for (const Row& r : rows) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", r.name, r.help, r.name, r.type, r.name, r.value);
  }
}

}  // namespace

std::string scheduler_metrics_text(const SchedulerMetrics& m) {
  std::string out;
  append(out, scheduler_rows(m));
  if (m.prefix_store) append(out, prefix_store_rows(m));
  return out;
}

}  // namespace turbokv::server
