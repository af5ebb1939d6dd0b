// `kvtier bench chaos`: the whole system under a seeded random schedule of faults, checked by an
// oracle (docs/engine.md, "Chaos bench").
//
// It runs `kvtier serve` (2 engine cores, world size 2) in epochs, each a fresh instance in the
// default mode (in-process host cache) or against kvtierd with the disk and Redis tiers (a
// redis-server started by the bench), with device faults drawn for the epoch (the `faults`
// section: submit failures, latched errors, delays, record failures, in a drawn direction).
// Clients stream a fixed seeded set of multi-turn requests that share prefixes, greedy, some
// hanging up mid-stream. Meanwhile the driver injects process faults (SIGKILL and
// SIGSTOP/SIGCONT of workers, engine cores, kvtierd and redis-server), flips bytes in disk-tier
// segment records and Redis chunk records, and restarts what a fatal fault took down.
//
// Oracle: every completed response equals the fault-free reference run's, byte for byte (and a
// partial one is a prefix of it); /health is never 200 once it said failed or stalled, and says
// 503 within its bound after a worker or core is killed or stopped past the stall timeout; no
// request outlives engine.request_timeout_s plus a margin; after each quiet period the audits
// pass (no request, job, pending or pinned slot left; kvtierd's cache audit, locks and
// transfers). Rows: one per epoch, then the summary row; the exit code is 1 when any of
// wrong_outputs, hung_requests, dishonest_health or leaks is not zero.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace kvtier::bench {

struct ChaosBenchOptions {
  bool json = false;
  double seconds = 60;  // chaos time, after the reference run
  uint64_t seed = 1;
  bool server_mode = true;  // also epochs against kvtierd + disk + Redis
  std::string executable;   // kvtier; empty: this process's executable
};

// Writes JSON Lines (json) or key=value rows. Returns a process exit code.
int run_chaos_bench(const ChaosBenchOptions& options, std::ostream& out);

}  // namespace kvtier::bench
