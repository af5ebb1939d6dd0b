#include "kvtier/engine/metrics_text.h"

#include <cmath>
#include <cstdio>
#include <set>

namespace kvtier {
namespace {

void family(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, uint64_t value) {
  out += name + " " + std::to_string(value) + "\n";
}

std::string number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

std::string metric_name(const std::string& counter) {
  std::string name = "kvtier_core_";
  for (char c : counter) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    name += ok ? c : '_';
  }
  return name;
}

}  // namespace

std::string render_metrics(const EngineMetrics& m) {
  std::string out;
  family(out, "kvtier_engine_healthy", "gauge", "1 while GET /health answers 200.");
  sample(out, "kvtier_engine_healthy", m.healthy ? 1 : 0);
  family(out, "kvtier_requests_total", "counter", "Requests accepted.");
  sample(out, "kvtier_requests_total", m.requests_total);
  family(out, "kvtier_requests_in_flight", "gauge", "Requests accepted and not yet ended.");
  sample(out, "kvtier_requests_in_flight", m.requests_in_flight);
  family(out, "kvtier_request_errors_total", "counter", "Requests that ended with an error.");
  sample(out, "kvtier_request_errors_total", m.request_errors_total);
  family(out, "kvtier_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.");
  sample(out, "kvtier_prompt_tokens_total", m.prompt_tokens_total);
  family(out, "kvtier_generation_tokens_total", "counter", "Tokens generated.");
  sample(out, "kvtier_generation_tokens_total", m.generation_tokens_total);
  family(out, "kvtier_cached_prompt_tokens_total", "counter",
         "Prompt tokens whose KV came from a cache instead of prefill.");
  sample(out, "kvtier_cached_prompt_tokens_total", m.cached_prompt_tokens_total);
  // One family per counter name, with a sample per core that reports it.
  std::set<std::string> names;
  for (const auto& counters : m.core_counters) {
    for (const auto& [name, value] : counters) names.insert(name);
  }
  for (const std::string& counter : names) {
    const std::string name = metric_name(counter);
    const auto kind = m.core_kinds.find(counter);
    const std::string type =
        kind == m.core_kinds.end() ? "untyped" : std::string(to_string(kind->second));
    family(out, name, type.c_str(), ("Engine core counter '" + counter + "'.").c_str());
    for (size_t core = 0; core < m.core_counters.size(); ++core) {
      const auto it = m.core_counters[core].find(counter);
      if (it == m.core_counters[core].end()) continue;
      out += name + "{core=\"" + std::to_string(core) + "\"} " + number(it->second) + "\n";
    }
  }
  return out;
}

}  // namespace kvtier
