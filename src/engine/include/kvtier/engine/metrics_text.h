// The frontend's /metrics: counters of the core manager plus every counter the engine cores
// report in their heartbeats, in Prometheus text exposition format (version 0.0.4).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvtier/core/counter_kind.h"

namespace kvtier {

struct EngineMetrics {
  bool healthy = false;         // /health answers 200
  uint64_t requests_total = 0;  // accepted by submit()
  uint64_t requests_in_flight = 0;
  uint64_t requests_refused_total = 0;  // answered 429: max_requests_in_flight were in flight
  uint64_t request_errors_total = 0;    // ended with an error (core failure, shutdown, `err`)
  uint64_t prompt_tokens_total = 0;
  uint64_t generation_tokens_total = 0;
  uint64_t cached_prompt_tokens_total = 0;  // sum of the cores' `cached_tokens`
  // Index: engine core; the latest `hb.counters` of each.
  std::vector<std::map<std::string, double>> core_counters;
  // Counter or gauge, by core counter name, from the cores' `hb.kinds`.
  std::map<std::string, CounterKind> core_kinds;
};

// Core counters appear as kvtier_core_<name>{core="<n>"}; characters of <name> outside
// [A-Za-z0-9_] become '_'. Their type is their kind in core_kinds ("counter" or "gauge"),
// "untyped" for a name without one.
std::string render_metrics(const EngineMetrics& metrics);

}  // namespace kvtier
