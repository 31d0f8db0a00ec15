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
    {"turbokv_prompt_steps_total", "counter", "Batched forward steps that carried prompt rows",
      static_cast<double>(m.prompt_steps_total)},
    {"turbokv_step_seconds_total", "counter", "Seconds spent in forward steps",
      static_cast<double>(m.step_seconds_total)},
    {"turbokv_step_base_seconds", "gauge", "Fitted fixed cost of a step that carries prompt rows", m.step_base_seconds},
    {"turbokv_step_decode_row_seconds", "gauge", "Fitted cost of a row in a decode-only step", m.step_decode_row_seconds},
    {"turbokv_step_prompt_row_seconds", "gauge", "Fitted cost of a row in a step that carries prompt rows", m.step_prompt_row_seconds},
    {"turbokv_step_prompt_budget_rows", "gauge", "Prompt rows the last step could carry (--max-step-ms)",
      static_cast<double>(m.step_prompt_budget_rows)},
  };
}

// The tiers below the prefix cache (--prefix-disk, --prefix-store), each present only when
// configured, with the same counters: turbokv_prefix_<tier>_*, turbokv_prompt_tokens_<tier>_total.
struct TierCounts {
  const char* tier;         // "disk", "store"
  const char* where;        // in help texts
  uint64_t prompt_tokens, hits, misses;
  const SharedPrefixMetrics* p;
};

void append_tier(std::string& out, const TierCounts& t) {
  auto line = [&](const std::string& name, const char* type, const std::string& help, double value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
  };
  const std::string n = fmt::format("turbokv_prefix_{}_", t.tier);
  const SharedPrefixMetrics& p = *t.p;
  const StoreCounters& s = p.store;
  line(fmt::format("turbokv_prompt_tokens_{}_total", t.tier), "counter",
       fmt::format("Prompt tokens restored from {}", t.where), static_cast<double>(t.prompt_tokens));
  line(n + "hits_total", "counter", fmt::format("Admitted requests that restored a prefix from {}", t.where),
       static_cast<double>(t.hits));
  line(n + "misses_total", "counter", fmt::format("Admitted requests that took nothing from {}", t.where),
       static_cast<double>(t.misses));
  line(n + "lookups_total", "counter", fmt::format("Lookups in {}", t.where), static_cast<double>(p.lookups_total));
  line(n + "unavailable_total", "counter",
       fmt::format("Lookups that found {} down, slow or failing (the prompt was computed)", t.where),
       static_cast<double>(p.unavailable_total));
  line(n + "evicted_total", "counter", "Values gone between the index lookup and the read",
       static_cast<double>(p.evicted_total));
  line(n + "rejected_total", "counter", "Stored values refused: truncated, corrupt, another model's or configuration's",
       static_cast<double>(p.rejected_total));
  line(n + "offers_total", "counter", fmt::format("Prefixes queued for {}", t.where), static_cast<double>(p.offers_total));
  line(n + "offer_bytes_total", "counter", fmt::format("Bytes of the prefixes queued for {}", t.where),
       static_cast<double>(p.offer_bytes_total));
  line(n + "writes_total", "counter", fmt::format("Values written to {}", t.where), static_cast<double>(s.writes_total));
  line(n + "write_bytes_total", "counter", fmt::format("Bytes written to {}", t.where),
       static_cast<double>(s.write_bytes_total));
  line(n + "writes_failed_total", "counter", "Writes that failed (down, slow, full)",
       static_cast<double>(s.writes_failed_total));
  line(n + "writes_dropped_total", "counter", "Writes dropped: the write queue was full",
       static_cast<double>(s.writes_dropped_total));
  line(n + "write_queue", "gauge", "Writes waiting in the queue", static_cast<double>(s.queued_writes));
  line(n + "read_bytes_total", "counter", fmt::format("Bytes of values read from {}", t.where),
       static_cast<double>(s.read_bytes_total));
  line(n + "calls_failed_total", "counter", "Calls that failed or timed out", static_cast<double>(s.calls_failed_total));
}

void append(std::string& out, const std::vector<Row>& rows) {
  for (const Row& r : rows) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", r.name, r.help, r.name, r.type, r.name, r.value);
  }
}

void append_prefix_tiers(std::string& out, const SchedulerMetrics& m) {
  if (m.prefix_disk) {
    append_tier(out, {"disk", "the disk tier", m.prompt_tokens_disk_total, m.prefix_disk_hits_total,
                      m.prefix_disk_misses_total, &m.disk});
    const StoreCounters& s = m.disk.store;
    out += fmt::format(
        "# HELP turbokv_prefix_disk_evictions_total Values dropped from the disk tier for room (least recently used)\n"
        "# TYPE turbokv_prefix_disk_evictions_total counter\nturbokv_prefix_disk_evictions_total {}\n"
        "# HELP turbokv_prefix_disk_bytes Bytes of the values the disk tier holds\n"
        "# TYPE turbokv_prefix_disk_bytes gauge\nturbokv_prefix_disk_bytes {}\n"
        "# HELP turbokv_prefix_disk_entries Prefixes the disk tier holds\n"
        "# TYPE turbokv_prefix_disk_entries gauge\nturbokv_prefix_disk_entries {}\n",
        s.evictions_total, s.stored_bytes, s.stored_values);
  }
  if (m.prefix_store) {
    append_tier(out, {"store", "the shared store", m.prompt_tokens_store_total, m.prefix_store_hits_total,
                      m.prefix_store_misses_total, &m.shared});
  }
}

}  // namespace

std::string scheduler_metrics_text(const SchedulerMetrics& m) {
  std::string out;
  append(out, scheduler_rows(m));
  append_prefix_tiers(out, m);
  return out;
}

}  // namespace turbokv::server
