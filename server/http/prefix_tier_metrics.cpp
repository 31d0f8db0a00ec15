#include "server/http/prefix_tier_metrics.hpp"

#include <fmt/format.h>

namespace turbokv::server {

namespace {

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

}  // namespace

void append_prefix_tier_metrics(std::string& out, const SchedulerMetrics& m) {
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

}  // namespace turbokv::server
