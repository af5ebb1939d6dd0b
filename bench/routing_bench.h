// `kvtier bench routing`: routing by cache against routing by load, side by side in one run
// (docs/benchmarks.md). Target `cores`: one `kvtier serve --engine-cores 4` with
// routing.policy cache, one with routing.policy load, and, as the reference for the hit rate,
// one engine core with the memory of all four; each gets the same multi-round conversations
// (workload_scenarios.h, multi-round-qa), in turn. The device of each core holds about a
// quarter of the conversations (the kvtier host cache is off, so a prefix is reused only where
// it was computed). One row per target: the hit rates and TTFT p50/p99 of both policies,
// hit_rate_ratio (cache routing ÷ one core with all the memory), ttft_p50_speedup (load ÷
// cache) and outputs_identical (every output equal on all three servers). Target `router`: the
// same over two `kvtier serve` instances of one engine core each behind `kvtier router --policy
// cache`, two more behind `--policy load`, and one instance with the memory of both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "workload_scenarios.h"

namespace kvtier::bench {

struct RoutingBenchOptions {
  bool json = false;
  std::vector<std::string> targets = {"cores", "router"};
  uint32_t cores = 4;
  size_t users = 16;  // conversations
  size_t concurrency = 8;
  ScenarioSizes sizes{.document_tokens = 1024, .rounds = 4};
  uint64_t seed = 7;
  std::vector<std::string> extra_sets;  // KEY=VALUE overrides for every server
  std::string executable;               // kvtier; empty: this process's executable
};

// Writes JSON Lines (json) or key=value rows. Returns a process exit code: 1 when a request
// failed or an output differed, 2 for an unknown target.
int run_routing_bench(const RoutingBenchOptions& options, std::ostream& out);

}  // namespace kvtier::bench
