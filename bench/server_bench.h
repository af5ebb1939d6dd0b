// `kvtier bench server`: kvtierd (in-process server thread, a CacheClient over ZeroMQ ipc, the
// payload through shared memory) against a local redis-server holding the same chunks the way
// an LMCache-style Redis backend does (SET/GET of each chunk's bytes, pipelined), measured side
// by side in one run for each chunk size and op: store, retrieve (GB/s), lookup (keys/s, one
// key per LOOKUP) and lookup_prefix64 (keys/s, a 64-chunk prefix per LOOKUP); Redis runs one
// EXISTS per key, pipelined, in both lookup rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kvtier::bench {

struct ServerBenchOptions {
  bool json = false;
  size_t total_bytes = size_t{64} << 20;  // moved per measurement
  int repeat = 3;                         // measurements per side; the best of each is kept
  size_t lookups = 200000;                // keys looked up per measurement
  uint32_t copy_threads = 0;  // kvtierd's server.copy_threads (0: its default), memcpy's too
  std::vector<size_t> chunk_bytes = {256 << 10, 512 << 10, 1 << 20, 2 << 20};
  std::string redis_server = "redis-server";
  // Run against the same redis-server for the rows' redis_benchmark_* fields (skipped when it
  // cannot be run).
  std::string redis_benchmark = "redis-benchmark";
};

// Writes JSON Lines (json) or a table. Returns a process exit code (2 when redis-server cannot
// be started, 1 when a transfer does not complete).
int run_server_bench(const ServerBenchOptions& options, std::ostream& out);

}  // namespace kvtier::bench
