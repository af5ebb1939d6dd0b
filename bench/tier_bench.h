// `kvtier bench tiers`: each tier beside its raw baseline, measured side by side in one run:
//   disk   DiskTier put/get (segment records with checksums, O_DIRECT, io_uring) vs the raw
//          device through the file system: O_DIRECT sequential writes / reads of the same bytes
//          in one preallocated file, with the queue depth the tier uses for that chunk size
//          (io_uring, kept full the whole time). Gets are cold: O_DIRECT bypasses the page
//          cache on both sides, and both move the same memory: the tier puts from one aligned
//          mapping (as the tier mover's staging buffers are) and gets into host pool slots, and
//          the raw IO writes from and reads into those same pages, after an untimed pass of raw
//          IO over that memory (to a file of its own). The sides (and batch_*: the same
//          raw IO drained every batch_chunks, as the tier's calls are) take turns in slices of
//          8 MiB (at least batch_chunks chunks), so that they meet a drifting device alike.
//          Then op "verify": the tier's chunk checksum (xxh3, the widest build this CPU runs) vs
//          Debian's libxxhash xxh3 over the same cold chunks.
//   redis  RedisTier put/get (records, pipelined, pooled; one caller, calls of batch_chunks)
//          vs pipelined SET/GET of the same sizes straight to Redis over hiredis in its best
//          shape: pipelines of 4, 16 or 64 commands over 1, 2 or 4 connections (a thread
//          each), each measured `repeat` times first, the tier as many times in all; then the
//          tier and that shape take turns, `repeat` times each, and each side's best over both
//          phases is compared (the baseline: the fastest its best shape ran; each side's best
//          over as many measurements). Both move the same memory: SET's values come from the
//          tier's put sources, and every measurement runs after an untimed pass of each side,
//          with later SETs overwriting earlier keys, so that neither side meets memory the
//          kernel has not copied from or into yet (on either end of the socket), as a
//          long-running tier does not.
// Rows: bench, tier, op, chunk_bytes, chunks, kvtier_gbps, baseline_gbps, ratio, baseline;
// disk put/get rows add queue_depth, batch_chunks, batch_baseline_gbps, batch_ratio and io,
// verify rows add kernel; redis rows add baseline_depth and baseline_connections (the best
// shape), batch_chunks, tries (measurements per side) and baseline_shapes_gbps (every shape's
// best, "<depth>x<connections>").
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
  bool total_given = false;               // total_bytes was asked for: the disk moves it too
  size_t disk_total_bytes = 0;  // moved per disk measurement; 0: as said above, or 512 MiB
  int repeat = 3;               // measurements per side; the best of each is kept
  std::vector<size_t> chunk_bytes = {64 << 10, 256 << 10, 512 << 10, 2 << 20};
  std::string redis_url;           // empty: start a redis-server of our own
  std::filesystem::path disk_dir;  // empty: a temporary directory
  size_t batch_chunks = 16;        // chunks per tier call / per pipeline
  bool skip_redis = false;
};

// Writes JSON Lines (json) or a table. Returns a process exit code.
int run_tier_bench(const TierBenchOptions& options, std::ostream& out);

}  // namespace kvtier::bench
