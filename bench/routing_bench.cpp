#include "routing_bench.h"

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "bench_row.h"
#include "kvtier/core/child_process.h"
#include "workload_driver.h"

namespace kvtier::bench {
namespace {

double hit_rate(const CellRun& run) {
  return run.counters.prompt_tokens > 0 ? run.counters.cached_tokens / run.counters.prompt_tokens
                                        : 0.0;
}

size_t errors_of(const CellRun& run) {
  return static_cast<size_t>(
      std::ranges::count_if(run.outputs, [](const auto& t) { return !t.has_value(); }));
}

bool run_cores(const RoutingBenchOptions& o, const std::string& exe, std::ostream& out) {
  Progress progress;
  // Every user's conversation, sent round by round `concurrency` at a time.
  const Scenario scenario = make_scenario("multi-round-qa", o.users, o.sizes, o.seed);
  const size_t users = std::max<size_t>(4, o.users);
  const size_t prompt_blocks = (scenario.longest_prompt + o.sizes.answer_tokens) / kBlock + 1;
  // Each core holds a quarter of the conversations, with half as much again for an uneven
  // spread and the requests in flight.
  const size_t core_blocks = (users + o.cores - 1) / o.cores * prompt_blocks * 3 / 2 + 16;
  const size_t max_context = std::max<size_t>(4096, scenario.longest_prompt + 512);
  struct Side {
    std::string name;
    ModeServer server;
  };
  std::vector<Side> sides;
  for (const std::string name : {"cache", "load", "one_core"}) {
    progress.show("routing: starting " + name);
    const bool one = name == "one_core";
    std::vector<std::string> sets =
        base_sets(1, one ? core_blocks * o.cores : core_blocks, max_context);
    sets.push_back("connector.enabled=false");
    sets.push_back("engine.engine_cores=" + std::to_string(one ? 1 : o.cores));
    sets.push_back("routing.policy=" + std::string(one ? "load" : name));
    sets.insert(sets.end(), o.extra_sets.begin(), o.extra_sets.end());
    sides.push_back(
        {name, ModeServer{.cache = name, .serve = std::make_unique<ServeInstance>(exe, sets)}});
  }
  std::vector<CellRun> runs;
  for (const Side& side : sides) {
    progress.show("routing: cores, " + side.name + " (" + std::to_string(scenario.requests.size()) +
                  " requests)");
    runs.push_back(run_cell(side.server, scenario, o.concurrency));
  }
  const CellRun& cache = runs[0];
  const CellRun& load = runs[1];
  const CellRun& one = runs[2];
  const size_t errors = errors_of(cache) + errors_of(load) + errors_of(one);
  const bool identical =
      errors == 0 && cache.outputs == load.outputs && cache.outputs == one.outputs;
  const double cache_p50 = percentile(cache.ttft_ms, 0.5);
  const double load_p50 = percentile(load.ttft_ms, 0.5);
  nlohmann::ordered_json row{
      {"bench", "routing"},
      {"target", "cores"},
      {"cores", o.cores},
      {"users", users},
      {"concurrency", o.concurrency},
      {"requests", scenario.requests.size()},
      {"errors", errors},
      {"device_blocks_per_core", core_blocks},
      {"hit_rate_cache", hit_rate(cache)},
      {"hit_rate_load", hit_rate(load)},
      {"hit_rate_one_core", hit_rate(one)},
      {"hit_rate_ratio", hit_rate(one) > 0 ? hit_rate(cache) / hit_rate(one) : 0.0},
      {"ttft_p50_ms_cache", cache_p50},
      {"ttft_p99_ms_cache", percentile(cache.ttft_ms, 0.99)},
      {"ttft_p50_ms_load", load_p50},
      {"ttft_p99_ms_load", percentile(load.ttft_ms, 0.99)},
      {"ttft_p50_speedup", cache_p50 > 0 ? load_p50 / cache_p50 : 0.0},
      {"outputs_identical", identical},
      {"wall_s_cache", cache.wall_s},
      {"wall_s_load", load.wall_s}};
  emit(out, o.json, row);
  return identical;
}

}  // namespace

int run_routing_bench(const RoutingBenchOptions& o, std::ostream& out) {
  const std::string exe = o.executable.empty() ? self_executable() : o.executable;
  for (const std::string& target : o.targets) {
    if (target != "cores") {
      std::cerr << "bench routing: unknown target '" << target << "' (known: cores)\n";
      return 2;
    }
  }
  try {
    for (const std::string& target : o.targets) {
      (void)target;
      if (!run_cores(o, exe, out)) {
        std::cerr << "bench routing: a request failed or the outputs differed (see errors and "
                     "outputs_identical)\n";
        return 1;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "bench routing: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace kvtier::bench
