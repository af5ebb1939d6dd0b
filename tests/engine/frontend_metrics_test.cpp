// render_metrics: Prometheus text exposition of the frontend's counters and the cores' counters.
#include <gtest/gtest.h>

#include "kvtier/engine/metrics_text.h"

namespace kvtier {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

TEST(FrontendMetrics, FrontendCountersOneFamilyEach) {
  EngineMetrics m;
  m.healthy = true;
  m.requests_total = 7;
  m.requests_in_flight = 2;
  m.request_errors_total = 1;
  m.prompt_tokens_total = 900;
  m.generation_tokens_total = 56;
  m.cached_prompt_tokens_total = 512;
  const std::string text = render_metrics(m);
  EXPECT_TRUE(has_line(text, "kvtier_engine_healthy 1")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE kvtier_engine_healthy gauge")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE kvtier_requests_total counter")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE kvtier_requests_in_flight gauge")) << text;
  EXPECT_TRUE(has_line(text, "kvtier_requests_total 7")) << text;
  EXPECT_TRUE(has_line(text, "kvtier_requests_in_flight 2")) << text;
  EXPECT_TRUE(has_line(text, "kvtier_request_errors_total 1")) << text;
  EXPECT_TRUE(has_line(text, "kvtier_prompt_tokens_total 900")) << text;
  EXPECT_TRUE(has_line(text, "kvtier_generation_tokens_total 56")) << text;
  EXPECT_TRUE(has_line(text, "kvtier_cached_prompt_tokens_total 512")) << text;
  m.healthy = false;
  EXPECT_TRUE(has_line(render_metrics(m), "kvtier_engine_healthy 0"));
}

TEST(FrontendMetrics, CoreCountersAreLabelledByCoreAndSanitized) {
  EngineMetrics m;
  m.core_counters = {{{"cache_hits", 3}, {"load.bytes", 1.5}}, {{"cache_hits", 4}}};
  const std::string text = render_metrics(m);
  EXPECT_TRUE(has_line(text, "kvtier_core_cache_hits{core=\"0\"} 3")) << text;
  EXPECT_TRUE(has_line(text, "kvtier_core_cache_hits{core=\"1\"} 4")) << text;
  EXPECT_TRUE(has_line(text, "kvtier_core_load_bytes{core=\"0\"} 1.5")) << text;
  EXPECT_EQ(text.find("load_bytes{core=\"1\"}"), std::string::npos);
  // One HELP/TYPE header per family, not per core.
  size_t types = 0;
  for (size_t at = text.find("# TYPE kvtier_core_cache_hits"); at != std::string::npos;
       at = text.find("# TYPE kvtier_core_cache_hits", at + 1)) {
    ++types;
  }
  EXPECT_EQ(types, 1u);
}

TEST(FrontendMetrics, CoreCountersTakeTheirKindAsType) {
  EngineMetrics m;
  m.core_counters = {{{"steps_total", 9}, {"requests_running", 2}, {"mystery", 1}},
                     {{"steps_total", 4}}};
  m.core_kinds = {{"steps_total", CounterKind::kCounter},
                  {"requests_running", CounterKind::kGauge}};
  const std::string text = render_metrics(m);
  EXPECT_TRUE(has_line(text, "# TYPE kvtier_core_steps_total counter")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE kvtier_core_requests_running gauge")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE kvtier_core_mystery untyped")) << "no kind: untyped\n" << text;
  EXPECT_TRUE(has_line(text, "kvtier_core_steps_total{core=\"1\"} 4")) << text;
}

}  // namespace
}  // namespace kvtier
