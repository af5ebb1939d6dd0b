// `kvtier bench scheduler`: the scheduler side of the connector in a steady state of running
// requests with long shared-prefix prompts — lookups of arriving requests, load and store job
// building, per-rank verdict aggregation — timed per engine step. Only connector calls are
// timed; the simulated engine around them is not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

namespace kvtier::bench {

struct SchedulerBenchOptions {
  bool json = false;
  size_t requests = 256;  // running at once
  size_t prompt_tokens = 32768;
  size_t shared_prefix_tokens = 24576;  // of each prompt, from one of a few documents
  size_t prefill_chunk = 2048;          // prompt tokens computed per step, over all requests
  size_t mean_decode_tokens = 1024;
  uint32_t world_size = 2;
  size_t warmup_steps = 2000;
  size_t steps = 1000;
  uint64_t seed = 1;
};

// Writes one JSON Lines row (json) or a line of text. Returns a process exit code.
int run_scheduler_bench(const SchedulerBenchOptions& options, std::ostream& out);

}  // namespace kvtier::bench
