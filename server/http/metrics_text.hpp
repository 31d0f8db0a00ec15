// The scheduler's counters and gauges (SchedulerMetrics) as Prometheus text exposition lines,
// for GET /metrics: one table per source, each row a name, a type, a help line and a value.
#pragma once

#include <string>

#include "server/scheduling/scheduler.hpp"

namespace turbokv::server {

std::string scheduler_metrics_text(const SchedulerMetrics& m);

}  // namespace turbokv::server
