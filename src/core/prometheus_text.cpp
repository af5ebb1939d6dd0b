#include "kvtier/core/prometheus_text.h"

#include <cmath>
#include <cstdio>

namespace kvtier {

void PrometheusText::family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += " ";
  out_ += help;
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += " ";
  out_ += type;
  out_ += "\n";
}

void PrometheusText::sample(std::string_view name, const MetricLabels& labels, uint64_t value) {
  sample_line(name, labels, std::to_string(value));
}

void PrometheusText::sample(std::string_view name, const MetricLabels& labels, double value) {
  std::string text;
  if (std::isnan(value)) {
    text = "NaN";
  } else if (std::isinf(value)) {
    text = value > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", value);
    text = buf;
  }
  sample_line(name, labels, text);
}

void PrometheusText::sample_line(std::string_view name, const MetricLabels& labels,
                                 const std::string& value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += "{";
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ",";
      out_ += labels[i].first + "=\"";
      for (char c : labels[i].second) {
        if (c == '\\' || c == '"') {
          out_ += '\\';
          out_ += c;
        } else if (c == '\n') {
          out_ += "\\n";
        } else {
          out_ += c;
        }
      }
      out_ += "\"";
    }
    out_ += "}";
  }
  out_ += " " + value + "\n";
}

std::string metric_name_part(std::string_view text) {
  std::string name;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    name += ok ? c : '_';
  }
  return name;
}

}  // namespace kvtier
