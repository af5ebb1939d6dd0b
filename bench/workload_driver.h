// What `kvtier bench workload` and `kvtier bench routing` share: the servers they start
// (ServeInstance, kvtierd), the counters a row reads from /metrics, and the driver that sends a
// Scenario's requests `concurrency` at a time and measures each (run_cell).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtierd_instance.h"
#include "progress.h"
#include "serve_instance.h"
#include "workload_scenarios.h"

namespace kvtier::bench {

// The p-quantile (0..1) of `v`, linear between the two closest ranks (the median of an even
// count is the mean of the middle two); 0 for none.
double percentile(std::vector<double> v, double p);

// The layout every server of the workload benches uses.
constexpr size_t kBlock = 16;
constexpr size_t kBlocksPerChunk = 4;

// The overrides every server of the bench shares.
std::vector<std::string> base_sets(uint32_t world_size, size_t device_blocks, size_t max_context);
// The KV bytes of one chunk over all ranks, for a server started with these overrides.
uint64_t chunk_bytes_of(const std::vector<std::string>& sets);

// The counters of one server that a row reports, read from /metrics (and kvtierd's STATS).
struct Counters {
  double prompt_tokens = 0;
  double cached_tokens = 0;
  double generated_tokens = 0;
  double loaded_tokens = 0;
  double stored_chunks = 0;
  double stores_deferred = 0;      // chunk stores put off because the store direction was behind
  double stores_not_admitted = 0;  // chunks the admission policy did not store
  double lookups_deferred = 0;     // lookups answered "ask again later" (chunks on their way)
  std::map<std::string, double> mover;  // the tier mover's counters (cache disk)

  bool operator==(const Counters&) const = default;
  Counters operator-(const Counters& o) const {
    Counters d{prompt_tokens - o.prompt_tokens,
               cached_tokens - o.cached_tokens,
               generated_tokens - o.generated_tokens,
               loaded_tokens - o.loaded_tokens,
               stored_chunks - o.stored_chunks,
               stores_deferred - o.stores_deferred,
               stores_not_admitted - o.stores_not_admitted,
               lookups_deferred - o.lookups_deferred,
               mover};
    for (auto& [name, value] : d.mover) {
      const auto it = o.mover.find(name);
      if (it != o.mover.end()) value -= it->second;
    }
    return d;
  }
};

// The tier mover's counters a disk row shows (tier_mover.h): where chunks went on their way
// down and back.
inline const char* const kMoverCounters[] = {"chunks_demoted",    "writes_dropped",
                                             "writes_missed",     "prefetch_keys",
                                             "prefetch_rejected", "prefetch_succeeded"};

// One cache mode's server (and its kvtierd).
struct ModeServer {
  std::string cache;
  std::unique_ptr<KvtierdInstance> kvtierd;  // cache kvtierd only
  std::unique_ptr<ServeInstance> serve;      // what the requests go to
  // `kvtier serve` instances behind `serve` when it is a `kvtier router`: its counters are
  // theirs, summed.
  std::vector<std::unique_ptr<ServeInstance>> backends;

  // Its counters now, from /metrics (and kvtierd's STATS). Throws std::runtime_error.
  Counters counters() const;
  // Its counters once the work done so far is in them: the engine cores' counters reach
  // /metrics with their heartbeats (every 0.1 s), so they are read until two reads 0.25 s apart
  // agree, for at most 3 s.
  Counters settled_counters() const;
};

// What one mode did with one cell's requests.
struct CellRun {
  std::vector<std::optional<std::string>> outputs;  // nullopt: the request failed
  std::vector<double> ttft_ms;
  std::vector<double> itl_ms;  // per request: (last token - first token) / (tokens - 1)
  double wall_s = 0;
  Counters counters;                       // the server's counters moved by this run
  std::map<std::string, size_t> failures;  // how failed requests ended, counted
};

// Sends the scenario's requests `concurrency` at a time, each after the one it must follow.
CellRun run_cell(const ModeServer& server, const Scenario& scenario, size_t concurrency);

}  // namespace kvtier::bench
