// Tier: one store of chunks below the host pool (L2 local disk, L3 Redis), behind one narrow
// interface that the in-process cache and kvtierd both use.
//
// Calls are batches: keys[i] goes with chunks[i] (put) or dst[i] (get), and each key gets its
// own ChunkStatus. A call that cannot reach the tier at all (connection refused, timeout, IO
// error on the store as a whole) returns an Error instead; the health wrapper
// (health_checked_tier.h) turns that into DOWN.
//
// Integrity: every chunk a tier writes is a chunk record (chunk_record.h) carrying its key and
// an xxh3 checksum. A record that fails the check on read is kCorrupt: a miss that is counted,
// never served. Its bytes in dst are then unspecified and must not be used.
//
// Parts: a tier may consist of parts that fail alone (the masters of a Redis Cluster). While a
// part is down the tier serves the keys of the others and skips that part's keys at once
// (kSkipped: get and contains answer them as misses, put does not store them), names the part
// in down_parts() and probes it itself, with a backoff (health_state.h). A tier of one part
// (one disk, one redis-server) fails whole instead: the call returns an Error.
//
// Timeouts: every call takes one; a tier returns kDeadlineExceeded rather than block longer
// than it (plus at most one IO that had already started, see each tier).
//
// Counters: the public calls count what they return (non-virtual interface), so every tier
// counts the same way.
//
// Thread-safety: every Tier is safe to call from several threads at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/counter_kind.h"
#include "kvtier/core/kv_event_publisher.h"
#include "kvtier/core/status.h"

namespace kvtier {

enum class ChunkStatus : uint8_t {
  kOk,       // put: stored; get: dst holds the chunk, checksum verified
  kMiss,     // get: the tier does not hold the key
  kCorrupt,  // get: the record failed its key or checksum check; a miss, never served
  kError,    // this key failed (IO error, server error reply); the others may have succeeded
  kSkipped,  // not tried: the part of the tier that holds the key is down (a miss; not stored)
};

std::string_view to_string(ChunkStatus status);

struct TierCounters {
  uint64_t hits = 0;            // keys get() returned kOk
  uint64_t misses = 0;          // keys get() returned kMiss (kCorrupt not included)
  uint64_t corrupt = 0;         // keys get() returned kCorrupt
  uint64_t errors = 0;          // keys that returned kError, plus calls that failed whole
  uint64_t chunks_written = 0;  // keys put() returned kOk
  uint64_t bytes_read = 0;      // payload bytes of hits
  uint64_t bytes_written = 0;   // payload bytes of chunks_written
  uint64_t skipped_calls = 0;   // calls not made because the tier was DOWN (health wrapper only)
  uint64_t skipped_keys = 0;    // keys get() or put() returned kSkipped: their part was down
};

// f(name, value, kind) for every field (counter_kind.h); all are counters.
template <class F>
void visit_counters(const TierCounters& c, F&& f) {
  using enum CounterKind;
  f("hits", c.hits, kCounter);
  f("misses", c.misses, kCounter);
  f("corrupt", c.corrupt, kCounter);
  f("errors", c.errors, kCounter);
  f("chunks_written", c.chunks_written, kCounter);
  f("bytes_read", c.bytes_read, kCounter);
  f("bytes_written", c.bytes_written, kCounter);
  f("skipped_calls", c.skipped_calls, kCounter);
  f("skipped_keys", c.skipped_keys, kCounter);
}

// A part of a tier that is down, as down_parts() names it.
struct DownPart {
  std::string name;   // e.g. "10.0.0.7:6379"
  std::string error;  // of the failure that made it down, or of its last failed probe
};

class Tier {
 public:
  virtual ~Tier() = default;

  // A short name for metrics and DEGRADED reasons: "disk", "redis".
  virtual std::string name() const = 0;

  // Stores chunks[i] under keys[i] (replacing what the key held). keys and chunks have equal
  // sizes (std::invalid_argument otherwise). The spans are only read during the call.
  Result<std::vector<ChunkStatus>> put(std::span<const ChunkKey> keys,
                                       std::span<const std::span<const std::byte>> chunks,
                                       Duration timeout);

  // Reads keys[i] into dst[i], whose size must equal the stored chunk's size (a record of
  // another size is kCorrupt). dst is written only during the call.
  Result<std::vector<ChunkStatus>> get(std::span<const ChunkKey> keys,
                                       std::span<const std::span<std::byte>> dst, Duration timeout);

  // Whether the tier holds each key (without verifying its record: a later get may still find
  // it corrupt).
  Result<std::vector<bool>> contains(std::span<const ChunkKey> keys, Duration timeout);

  // Cheap reachability check, used to probe a DOWN tier.
  Status ping(Duration timeout);

  // Whether the tier can store chunks of `bytes` at all; an error saying why not (a disk tier
  // whose segments are smaller than one record would fail every put). A wrapper forwards.
  virtual Status can_hold(uint64_t bytes) const {
    (void)bytes;
    return {};
  }

  // Snapshot of what the public calls returned so far.
  virtual TierCounters counters() const;

  // The parts of the tier that are down now (see "Parts" above); none for a tier of one part.
  virtual std::vector<DownPart> down_parts() const { return {}; }
  // Probes the down parts whose probe is due (the health wrapper calls it regularly, so that
  // they recover while no call needs them).
  virtual void probe_down_parts() {}

  // KV events (docs/events.md): from now on the chunks put() stores are published as stored on
  // medium name(), each `block_size` tokens, and a tier that drops chunks itself (the disk
  // tier's evictions) publishes their removal; null stops it. A wrapper forwards to the tier it
  // wraps. The publisher must outlive the tier.
  virtual void publish_events(KvEventPublisher* publisher, uint32_t block_size);

 protected:
  // The publisher publish_events() set (null: none) and its block size.
  KvEventPublisher* events() const { return publisher_.load(); }
  uint32_t event_block_size() const { return block_size_.load(); }

  virtual Result<std::vector<ChunkStatus>> do_put(
      std::span<const ChunkKey> keys, std::span<const std::span<const std::byte>> chunks,
      Duration timeout) = 0;
  virtual Result<std::vector<ChunkStatus>> do_get(std::span<const ChunkKey> keys,
                                                  std::span<const std::span<std::byte>> dst,
                                                  Duration timeout) = 0;
  virtual Result<std::vector<bool>> do_contains(std::span<const ChunkKey> keys,
                                                Duration timeout) = 0;
  virtual Status do_ping(Duration timeout) = 0;

 private:
  struct Cells {
    std::atomic<uint64_t> hits{0}, misses{0}, corrupt{0}, errors{0}, chunks_written{0},
        bytes_read{0}, bytes_written{0}, skipped_keys{0};
  };
  Cells cells_;
  std::atomic<KvEventPublisher*> publisher_{nullptr};
  std::atomic<uint32_t> block_size_{0};
};

}  // namespace kvtier
