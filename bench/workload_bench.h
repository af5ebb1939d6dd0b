// `kvtier bench workload`: a multi-turn conversation workload against `kvtier serve` started as
// real processes. Several users each keep a conversation whose history starts with a long
// document and grows by a message and an answer every turn; the device is too small to keep
// every user's history, so a returning user's prefix is either recomputed (cache off) or loaded
// from kvtier's host cache (cache on), or from the disk tier below a host pool that holds about
// one and a half conversations (cache disk). The three servers run side by side in one run,
// requests interleaved, and time to first token (TTFT) is measured from the client. Rows
// `workload_pressure` run requests 8 at a time over shared documents on a device that holds
// about one and a half of them, cache off and on, and count the requests that completed. A last
// row measures
// how long /health takes to answer 503 after a worker is killed with SIGKILL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace kvtier::bench {

struct WorkloadBenchOptions {
  bool json = false;
  uint32_t users = 4;
  uint32_t turns = 4;
  size_t history_tokens = 8192;  // the document each conversation starts with
  size_t message_tokens = 64;    // each user turn
  size_t answer_tokens = 16;     // each answer
  uint32_t world_size = 1;
  uint32_t pressure_requests = 40;  // memory-pressure case: requests, 8 at a time
  std::string executable;           // kvtier; empty: this process's executable
};

// Writes JSON Lines (json) or key=value rows. Returns a process exit code.
int run_workload_bench(const WorkloadBenchOptions& options, std::ostream& out);

}  // namespace kvtier::bench
