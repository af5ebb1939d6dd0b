#include "kvtier/engine/metrics_text.h"

#include <set>

#include "kvtier/core/prometheus_text.h"

namespace kvtier {

std::string render_metrics(const EngineMetrics& m) {
  PrometheusText out;
  const auto one = [&](const char* name, const char* type, const char* help, uint64_t value) {
    out.family(name, type, help);
    out.sample(name, value);
  };
  one("kvtier_engine_healthy", "gauge", "1 while GET /health answers 200.", m.healthy ? 1 : 0);
  one("kvtier_requests_total", "counter", "Requests accepted.", m.requests_total);
  one("kvtier_requests_in_flight", "gauge", "Requests accepted and not yet ended.",
      m.requests_in_flight);
  one("kvtier_requests_refused_total", "counter",
      "Requests answered 429 (overloaded): engine.max_requests_in_flight were in flight.",
      m.requests_refused_total);
  one("kvtier_request_errors_total", "counter", "Requests that ended with an error.",
      m.request_errors_total);
  one("kvtier_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.",
      m.prompt_tokens_total);
  one("kvtier_generation_tokens_total", "counter", "Tokens generated.", m.generation_tokens_total);
  one("kvtier_cached_prompt_tokens_total", "counter",
      "Prompt tokens whose KV came from a cache instead of prefill.", m.cached_prompt_tokens_total);
  // One family per counter name, with a sample per core that reports it.
  std::set<std::string> names;
  for (const auto& counters : m.core_counters) {
    for (const auto& [name, value] : counters) names.insert(name);
  }
  for (const std::string& counter : names) {
    const std::string name = "kvtier_core_" + metric_name_part(counter);
    const auto kind = m.core_kinds.find(counter);
    const std::string type =
        kind == m.core_kinds.end() ? "untyped" : std::string(to_string(kind->second));
    out.family(name, type, "Engine core counter '" + counter + "'.");
    for (size_t core = 0; core < m.core_counters.size(); ++core) {
      const auto it = m.core_counters[core].find(counter);
      if (it == m.core_counters[core].end()) continue;
      out.sample(name, {{"core", std::to_string(core)}}, it->second);
    }
  }
  return out.text();
}

}  // namespace kvtier
