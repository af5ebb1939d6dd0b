// PrometheusText: the one writer of the Prometheus text format (kvtierd's and the frontend's
// /metrics).
#include "kvtier/core/prometheus_text.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvtier {
namespace {

TEST(PrometheusText, FamiliesSamplesAndLabels) {
  PrometheusText out;
  out.family("kvtier_x_total", CounterKind::kCounter, "What x counts.");
  out.sample("kvtier_x_total", uint64_t{3});
  out.sample("kvtier_x_total", {{"tenant", "a"}, {"code", "not_found"}},
             uint64_t{18446744073709551615u});
  out.family("kvtier_y", "gauge", "A level.");
  out.sample("kvtier_y", {}, 1.5);
  EXPECT_EQ(out.text(),
            "# HELP kvtier_x_total What x counts.\n"
            "# TYPE kvtier_x_total counter\n"
            "kvtier_x_total 3\n"
            "kvtier_x_total{tenant=\"a\",code=\"not_found\"} 18446744073709551615\n"
            "# HELP kvtier_y A level.\n"
            "# TYPE kvtier_y gauge\n"
            "kvtier_y 1.5\n");
}

TEST(PrometheusText, LabelValuesAreEscapedAndSpecialNumbersSpelled) {
  PrometheusText out;
  out.sample("m", {{"tier", "a\"b\\c\nd"}}, std::numeric_limits<double>::quiet_NaN());
  out.sample("m", {}, std::numeric_limits<double>::infinity());
  out.sample("m", {}, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(out.text(), "m{tier=\"a\\\"b\\\\c\\nd\"} NaN\nm +Inf\nm -Inf\n");
}

TEST(PrometheusText, MetricNamePartKeepsOnlyNameCharacters) {
  EXPECT_EQ(metric_name_part("load.bytes-total/x9_Y"), "load_bytes_total_x9_Y");
}

}  // namespace
}  // namespace kvtier
