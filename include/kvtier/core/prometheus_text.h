// PrometheusText: builds a /metrics page in the Prometheus text exposition format (version
// 0.0.4), the one writer behind every /metrics kvtier serves (the engine frontend's, kvtierd's).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/core/counter_kind.h"

namespace kvtier {

// Label name and value of one sample, e.g. {"tenant", "default"}.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
 public:
  // The "# HELP" and "# TYPE" lines of a family; `type` is "counter", "gauge" or "untyped".
  void family(std::string_view name, std::string_view type, std::string_view help);
  void family(std::string_view name, CounterKind kind, std::string_view help) {
    family(name, to_string(kind), help);
  }
  // One sample of the family named last. Label values are escaped (\\, \", \n).
  void sample(std::string_view name, const MetricLabels& labels, double value);
  void sample(std::string_view name, const MetricLabels& labels, uint64_t value);
  void sample(std::string_view name, uint64_t value) { sample(name, {}, value); }

  const std::string& text() const { return out_; }

 private:
  void sample_line(std::string_view name, const MetricLabels& labels, const std::string& value);
  std::string out_;
};

// `text` with every character outside [A-Za-z0-9_] replaced by '_' (a metric name's tail).
std::string metric_name_part(std::string_view text);

}  // namespace kvtier
