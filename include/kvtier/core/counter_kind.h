// CounterKind: what a number in a counter struct is, for the places that publish them (an
// engine core's heartbeat and the frontend's /metrics, kvtierd's STATS). A counter is a total
// since start that only grows; a gauge is a level that goes up and down.
//
// Each counter struct has a visitor beside it, the one place its fields get names:
//   template <class F> void visit_counters(const XCounters& c, F&& f);
// calls f(std::string_view name, uint64_t value, CounterKind kind) once per field.
#pragma once

#include <string_view>

namespace kvtier {

enum class CounterKind { kCounter, kGauge };

// The Prometheus metric type: "counter" or "gauge".
constexpr std::string_view to_string(CounterKind kind) {
  return kind == CounterKind::kCounter ? "counter" : "gauge";
}

}  // namespace kvtier
