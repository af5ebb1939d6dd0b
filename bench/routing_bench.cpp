#include "routing_bench.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

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

// The row of one target: runs are (cache, load, one_core). Returns whether every request
// succeeded and every output was the same on all three.
bool emit_row(const RoutingBenchOptions& o, const std::string& target,
              const nlohmann::ordered_json& shape, size_t users, const Scenario& scenario,
              const std::vector<CellRun>& runs, std::ostream& out) {
  const CellRun& cache = runs[0];
  const CellRun& load = runs[1];
  const CellRun& one = runs[2];
  const size_t errors = errors_of(cache) + errors_of(load) + errors_of(one);
  const bool identical =
      errors == 0 && cache.outputs == load.outputs && cache.outputs == one.outputs;
  const double cache_p50 = percentile(cache.ttft_ms, 0.5);
  const double load_p50 = percentile(load.ttft_ms, 0.5);
  nlohmann::ordered_json row{{"bench", "routing"}, {"target", target}};
  for (const auto& [key, value] : shape.items()) row[key] = value;
  row.update(nlohmann::ordered_json{
      {"users", users},
      {"concurrency", o.concurrency},
      {"requests", scenario.requests.size()},
      {"errors", errors},
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
      {"wall_s_load", load.wall_s}});
  emit(out, o.json, row);
  return identical;
}

bool run_cores(const RoutingBenchOptions& o, const std::string& exe, std::ostream& out) {
  Progress progress;
  // Every user's conversation, sent round by round `concurrency` at a time.
  const Scenario scenario = multi_round_qa_of_users(o.users, o.sizes, o.seed);
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
  return emit_row(o, "cores", {{"cores", o.cores}, {"device_blocks_per_core", core_blocks}}, users,
                  scenario, runs, out);
}

// A folder of its own for the backends' ipc:// event endpoints, removed at the end.
class EndpointDir {
 public:
  EndpointDir()
      : path_(std::filesystem::temp_directory_path() /
              ("kvtier-bench-router-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~EndpointDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  EndpointDir(const EndpointDir&) = delete;
  EndpointDir& operator=(const EndpointDir&) = delete;
  std::string endpoint(const std::string& name) const { return "ipc://" + (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Target `router`: two `kvtier serve` instances (one engine core each, KV events on) behind a
// `kvtier router --policy cache`, two more behind `--policy load`, and one instance with the
// device blocks of both as the reference for the hit rate.
bool run_router(const RoutingBenchOptions& o, const std::string& exe, std::ostream& out) {
  constexpr uint32_t kInstances = 2;
  Progress progress;
  const Scenario scenario = multi_round_qa_of_users(o.users, o.sizes, o.seed);
  const size_t users = std::max<size_t>(4, o.users);
  const size_t prompt_blocks = (scenario.longest_prompt + o.sizes.answer_tokens) / kBlock + 1;
  // As in run_cores: each instance holds its share of the conversations, half as much again.
  const size_t instance_blocks = (users + kInstances - 1) / kInstances * prompt_blocks * 3 / 2 + 16;
  const size_t max_context = std::max<size_t>(4096, scenario.longest_prompt + 512);
  const EndpointDir endpoints;
  auto sets_of = [&](size_t blocks) {
    std::vector<std::string> sets = base_sets(1, blocks, max_context);
    sets.push_back("connector.enabled=false");
    sets.push_back("engine.engine_cores=1");
    return sets;
  };
  struct Side {
    std::string name;
    ModeServer server;
  };
  std::vector<Side> sides;
  for (const std::string name : {"cache", "load"}) {
    progress.show("routing: starting the router by " + name + " and its instances");
    ModeServer server{.cache = name};
    std::vector<std::string> argv = {
        exe, "router", "--port", "0", "--policy", name, "--health-interval", "0.1"};
    for (uint32_t n = 0; n < kInstances; ++n) {
      std::vector<std::string> sets = sets_of(instance_blocks);
      const std::string id = name + "-" + std::to_string(n);
      sets.push_back("events.endpoint=" + endpoints.endpoint("events-" + id));
      sets.push_back("events.replay_endpoint=" + endpoints.endpoint("replay-" + id));
      sets.insert(sets.end(), o.extra_sets.begin(), o.extra_sets.end());
      server.backends.push_back(std::make_unique<ServeInstance>(exe, sets));
      argv.insert(argv.end(), {"--backend", server.backends.back()->url()});
    }
    server.serve = std::make_unique<ServeInstance>(argv, std::chrono::seconds(60));
    // Every instance in rotation before the first request.
    const auto deadline = BenchClock::now() + std::chrono::seconds(30);
    while (metric_sum(server.serve->get("/metrics").body, "kvtier_router_in_rotation") <
           kInstances) {
      if (BenchClock::now() > deadline)
        throw std::runtime_error("kvtier router: not every instance in rotation: " +
                                 server.serve->log_tail());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // waiting for health checks
    }
    sides.push_back({name, std::move(server)});
  }
  progress.show("routing: starting one_core");
  std::vector<std::string> sets = sets_of(instance_blocks * kInstances);
  sets.insert(sets.end(), o.extra_sets.begin(), o.extra_sets.end());
  sides.push_back({"one_core", ModeServer{.cache = "one_core",
                                          .serve = std::make_unique<ServeInstance>(exe, sets)}});
  std::vector<CellRun> runs;
  for (const Side& side : sides) {
    progress.show("routing: router, " + side.name + " (" +
                  std::to_string(scenario.requests.size()) + " requests)");
    runs.push_back(run_cell(side.server, scenario, o.concurrency));
  }
  return emit_row(o, "router",
                  {{"instances", kInstances}, {"device_blocks_per_instance", instance_blocks}},
                  users, scenario, runs, out);
}

}  // namespace

int run_routing_bench(const RoutingBenchOptions& o, std::ostream& out) {
  const std::string exe = o.executable.empty() ? self_executable() : o.executable;
  for (const std::string& target : o.targets) {
    if (target != "cores" && target != "router") {
      std::cerr << "bench routing: unknown target '" << target << "' (known: cores, router)\n";
      return 2;
    }
  }
  try {
    for (const std::string& target : o.targets) {
      const bool ok = target == "cores" ? run_cores(o, exe, out) : run_router(o, exe, out);
      if (!ok) {
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
