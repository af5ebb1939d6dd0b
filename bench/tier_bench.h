// `kvtier bench tiers`: each tier beside its raw baseline, measured side by side in one run:
//   disk   DiskTier put/get (records with checksums, temp file + rename, IO thread pool) vs
//          plain open + write + close / open + read + close of one file per chunk, same bytes.
//   redis  RedisTier put/get (records, pipelined, pooled) vs pipelined SET/GET of the same
//          sizes straight to Redis over one hiredis connection.
// Rows: bench, tier, op, chunk_bytes, chunks, kvtier_gbps, baseline_gbps, ratio, baseline.
#pragma once

#include <cstddef>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

namespace kvtier::bench {

struct TierBenchOptions {
  bool json = false;
  size_t total_bytes = size_t{32} << 20;  // moved per measurement
  int repeat = 3;                         // measurements per side; the best of each is kept
  std::vector<size_t> chunk_bytes = {64 << 10, 512 << 10, 2 << 20};
  std::string redis_url;           // empty: start a redis-server of our own
  std::filesystem::path disk_dir;  // empty: a temporary directory
  size_t batch_chunks = 16;        // chunks per tier call / per pipeline
  bool skip_redis = false;
};

// Writes JSON Lines (json) or a table. Returns a process exit code.
int run_tier_bench(const TierBenchOptions& options, std::ostream& out);

}  // namespace kvtier::bench
