// `kvtier bench workload`: the workloads of workload_scenarios.h against `kvtier serve` started
// as real processes, one server per cache mode, the modes taking turns on the same requests in
// one run (docs/benchmarks.md):
//   off      kvtier off (the engine's own device prefix cache only)
//   host     kvtier's host cache in the engine (cache.mode local)
//   disk     a host cache for about one and a half of the longest prompts, the disk tier below
//   kvtierd  the cache in a kvtierd process (cache.mode server)
// The device holds about two of the scenario's longest prompts, so a returning prefix has left
// it. Each (scenario, concurrency) cell runs every mode, in an order that rotates from cell to
// cell, and prints a row per mode: TTFT and inter-token latency p50/p99 measured by the client,
// output tokens/s, the cache hit rate and the bytes loaded and stored (from /metrics), and for
// the modes other than off the ratios against off and whether every output equals off's.
// Two more scenarios keep their own rows: `pressure` (`workload_pressure`: requests 8 at a time
// on a device for about one and a half of them, cache off and on, every one must complete) and
// `kill` (`workload_kill`: from a worker's SIGKILL to the first 503), and `layerwise`
// (`bench: "layerwise"`: host-cache hits with layer-wise against whole-request loads, in one
// run, `layerwise_speedup` = TTFT request ÷ TTFT layer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "workload_scenarios.h"

namespace kvtier::bench {

struct WorkloadBenchOptions {
  bool json = false;
  // Scenario names (workload_scenarios.h, "pressure", "kill", "layerwise"); empty: all of them.
  std::vector<std::string> scenarios;
  std::vector<size_t> concurrency = {1, 8, 32};
  std::vector<std::string> caches;  // modes; empty: workload_cache_modes()
  ScenarioSizes sizes;
  uint32_t world_size = 1;
  uint32_t pressure_requests = 40;  // memory-pressure case: requests, 8 at a time
  uint64_t seed = 7;
  // Rounds of every cell of the scenarios above, the modes taking turns in each, every round on
  // its own prompts (seed + concurrency + 7919 × round); a row gives the median of its rounds.
  uint32_t repeat = 1;
  std::vector<std::string> extra_sets;  // KEY=VALUE overrides for every server (after the bench's)
  std::string executable;               // kvtier; empty: this process's executable
};

// The cache modes, in the order the first cell runs them.
const std::vector<std::string>& workload_cache_modes();

// Writes JSON Lines (json) or key=value rows, a progress line on stderr. Returns a process exit
// code: 1 when a request failed, an output differed from cache off's, or a server failed.
int run_workload_bench(const WorkloadBenchOptions& options, std::ostream& out);

}  // namespace kvtier::bench
