// The /metrics lines of the prefix tiers below the in-process prefix cache: the disk tier
// (turbokv_prefix_disk_*, turbokv_prompt_tokens_disk_total) and the shared store
// (turbokv_prefix_store_*, turbokv_prompt_tokens_store_total), the same counters for each
// (docs/architecture.md, "Prefix tiers").
#pragma once

#include <string>

#include "server/scheduling/scheduler.hpp"

namespace turbokv::server {

// Appends the Prometheus text of each configured tier to `out`.
void append_prefix_tier_metrics(std::string& out, const SchedulerMetrics& m);

}  // namespace turbokv::server
