// DiskTier (L2): chunks appended to large segment files on a local disk, read and written with
// O_DIRECT through io_uring, bounded in size, found again after a restart.
//
// Layout: <directory>/seg-<16 hex digits>.kvs, each a preallocated file of segment_bytes
// (256 MiB by default) holding records appended one after another (segment_record.h in
// src/tier/disk: a 4 KiB header block with the key, a sequence number, the chunk record header
// (chunk_record.h) and a header checksum, then the payload padded to 4 KiB). <directory>/LOCK is
// flock()ed by the one DiskTier that owns the directory.
//
// Index: key -> (segment, offset, size) in memory, in LRU order (a put or a hit makes a key most
// recent). open() rebuilds it by scanning every segment's headers: a header whose checksum
// fails (torn, overwritten, zeros) is skipped and the scan resumes at the next block; for a key
// found several times the highest sequence number wins. Payloads are verified on every read, so
// a record whose payload was torn is found by the scan but never served: the read is kCorrupt.
//
// Space: the segment files never hold more than capacity_bytes (segment_bytes is lowered to a
// quarter of the capacity for small capacities). A segment left with no live chunk is retired:
// its file is kept as a spare (<directory>/spare-<16 hex digits>.kvs, at most two, counted in
// the capacity) and becomes the next new segment, renamed, because writing over written blocks
// is much cheaper than writing into newly allocated ones; records of its earlier life name
// their old segment in their header checksum and are never found again. When a new segment is
// needed, a spare nothing reads from is taken; otherwise, where a new file would not fit, least
// recently used chunks are evicted until some segment holds no live chunk and becomes the
// spare. After each new segment, the sealed segment with the smallest live fraction below
// compact_below is compacted: its live records are read, verified and appended to the new
// segment, and its file is retired.
//
// IO: each call takes one of `io_threads` io_uring rings and keeps up to queue_depth requests
// (at most 16 MiB) in flight, submitted in groups of 1 MiB. A read's checksum is verified while
// the next reads are in flight; reads that complete together are verified in parallel on a small
// helper pool. Caller buffers the device can DMA to (aligned as statx's STATX_DIOALIGN says: 4
// bytes on NVMe, 512 on virtio-blk, 4 KiB when unknown) are read into / written from directly;
// others go through aligned bounce buffers. Where io_uring is unavailable (seccomp,
// io_uring_disabled, an old kernel) the tier says so on stderr and in io_description(), and uses
// `io_threads` threads with preadv/pwritev instead. Where O_DIRECT is unsupported (some file
// systems) it uses the page cache, also said there.
//
// Timeouts: when a call's timeout passes, keys whose IO has not started are not started and the
// call returns kDeadlineExceeded; IO already submitted is waited for (it uses the caller's
// buffers), so a call overruns its timeout by about one IO's time.
//
// Failures (H7): a segment that cannot be created (disk full) or a segment file deleted behind
// the tier's back fails the call whole with kUnavailable; ping() forgets deleted segments,
// recreates the directory if needed and succeeds once a new segment can be allocated.
//
// Thread-safety: every call may come from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "kvtier/tier/tier.h"

namespace kvtier {

namespace tier_internal {
class IoEngine;
struct IoSlot;
struct IoRequest;
}  // namespace tier_internal

enum class DiskIo {
  kAuto,     // io_uring, or threads where io_uring is unavailable
  kIoUring,  // io_uring or fail to open
  kThreads,  // preadv/pwritev on io_threads threads
};

struct DiskTierOptions {
  std::filesystem::path directory;               // created if absent
  uint64_t capacity_bytes = uint64_t{10} << 30;  // segment file bytes kept at most
  uint32_t io_threads = 4;                       // io_uring rings (calls at once), or threads
  uint64_t segment_bytes = uint64_t{256} << 20;  // at most capacity / 4; a multiple of 4 KiB
  uint32_t queue_depth = 16;                     // IO requests in flight per call, at most
  double compact_below = 0.5;                    // live fraction that makes a segment compacted
  DiskIo io = DiskIo::kAuto;
  bool direct_io = true;  // O_DIRECT where the file system supports it
};

class DiskTier final : public Tier {
 public:
  // Creates the directory if needed, takes its lock and rebuilds the index from it.
  // kInvalidArgument for an empty path, zero threads or queue depth, a capacity below four
  // segments of 8 KiB, or compact_below outside [0, 1); kUnavailable when the directory cannot
  // be made or read, another DiskTier holds it, or io = kIoUring and io_uring is unavailable.
  // SIGXFSZ is ignored from then on where it had its default action (ending the process): a
  // file size limit (RLIMIT_FSIZE) then fails a segment's allocation with EFBIG, and the tier is
  // DOWN until there is room (H7).
  static Result<std::unique_ptr<DiskTier>> open(const DiskTierOptions& options);
  ~DiskTier() override;

  std::string name() const override { return "disk"; }
  // Also announces every chunk the tier already holds (found again after a restart), and from
  // then on publishes the chunks it evicts, overwrites or finds corrupt as removed.
  void publish_events(KvEventPublisher* publisher, uint32_t block_size) override;
  // An error when a record of `bytes` (its header block and payload) exceeds a segment, naming
  // the capacity that would hold it.
  Status can_hold(uint64_t bytes) const override;

  uint64_t bytes_used() const;  // bytes of the live records the index holds
  uint64_t disk_bytes() const;  // bytes of the segment files
  size_t chunk_count() const;
  size_t segment_count() const;
  uint64_t evictions() const;        // chunks evicted to make room
  uint64_t compactions() const;      // segments compacted and retired
  uint64_t segments_reused() const;  // new segments made of a retired segment's file
  size_t spare_count() const;        // retired segment files kept for reuse
  uint64_t segment_bytes() const { return segment_bytes_; }
  // Requests in flight per call for chunks of this size (queue_depth, lowered so that at most
  // 16 MiB, and at most one segment's worth, are in flight).
  size_t queue_depth_for(uint64_t chunk_bytes) const;
  bool uses_io_uring() const;
  bool direct_io() const { return direct_io_; }
  // "io_uring, O_DIRECT, ..." or the fallback and why.
  std::string io_description() const { return io_description_; }

  // Where a key's record lies on disk (for tests and tools).
  struct RecordLocation {
    std::filesystem::path segment;
    uint64_t offset = 0;  // of the header block; the payload starts 4 KiB later
    uint64_t bytes = 0;   // of the whole record
  };
  std::optional<RecordLocation> location_of(const ChunkKey& key) const;
  // The same, found by scanning a directory no DiskTier has open.
  static std::optional<RecordLocation> find_record(const std::filesystem::path& directory,
                                                   const ChunkKey& key);

 protected:
  Result<std::vector<ChunkStatus>> do_put(std::span<const ChunkKey> keys,
                                          std::span<const std::span<const std::byte>> chunks,
                                          Duration timeout) override;
  Result<std::vector<ChunkStatus>> do_get(std::span<const ChunkKey> keys,
                                          std::span<const std::span<std::byte>> dst,
                                          Duration timeout) override;
  Result<std::vector<bool>> do_contains(std::span<const ChunkKey> keys, Duration timeout) override;
  Status do_ping(Duration timeout) override;

 private:
  struct Segment;
  using SegmentPtr = std::shared_ptr<Segment>;
  struct Entry {
    SegmentPtr segment;
    uint64_t offset = 0;
    uint64_t payload_bytes = 0;
    std::list<ChunkKey>::iterator lru;
    // Its payload is known intact: this process wrote it, or read and verified it. A record
    // found by the scan on open is not (its payload may be torn): a put of its key writes it
    // again rather than trusting it.
    bool verified = false;
  };
  // What write_records writes: a payload, and whether its memory is 4 KiB-aligned and readable
  // up to the next 4 KiB boundary (then it is written without a bounce copy).
  struct Source {
    std::span<const std::byte> payload;
    bool padded = false;
  };
  struct Move {
    SegmentPtr from;
    uint64_t offset;
  };
  struct WriteResult {
    std::vector<ChunkStatus> statuses;
    size_t started = 0;
    std::optional<Error> error;  // the call failed whole
  };

  explicit DiskTier(const DiskTierOptions& options);
  Status take_lock();
  void probe_direct_io();  // sets direct_io_ and dio_mem_align_; once, in open()
  Status rebuild_index();
  void remove_legacy_files();
  int segment_open_flags() const;
  // Whether the device can transfer straight to or from caller memory at this address.
  bool direct_ok(const void* memory) const;

  // Writes records; moves (compaction) replace a key's entry only while it still points at
  // moves[i], and keep its LRU place.
  WriteResult write_records(std::span<const ChunkKey> keys, std::span<const Source> sources,
                            std::span<const Move> moves, TimePoint deadline);
  // A record of a segment being compacted.
  struct Live {
    ChunkKey key;
    uint64_t offset;
    uint64_t payload_bytes;
  };
  // Compacts the segment whose live fraction is lowest below compact_below, if one is due; an
  // exception leaves compaction due again, not off.
  void maybe_compact(TimePoint deadline);
  // Moves `victim`'s intact records `live` to the active segment, and retires it once empty.
  void compact(const SegmentPtr& victim, std::vector<Live>& live, TimePoint deadline);

  // Called with mutex_ held.
  // The segments a call found present (vanished_locked): each is checked once per call, not
  // once per record (an fstat per record costs more than the rest of its preparation).
  using CheckedSegments = std::vector<uint64_t>;  // segment ids
  Result<std::pair<SegmentPtr, uint64_t>> allocate_locked(uint64_t record_bytes,
                                                          CheckedSegments& checked);
  Status new_segment_locked();
  // Makes a spare the active segment (renamed to a new id); false when none is free to reuse.
  bool reuse_spare_locked();
  Status make_room_locked(uint64_t extra_bytes);
  // Frees one thing toward room: a spare, else the least recently used chunk, else an idle
  // empty active segment; kResourceExhausted when nothing can go.
  Status free_space_step_locked();
  // Deletes a spare's file; by value, because the caller's pointer may be spares_'s own element,
  // which this erases.
  void drop_spare_locked(SegmentPtr spare);
  void insert_locked(const ChunkKey& key, const SegmentPtr& segment, uint64_t offset,
                     uint64_t payload_bytes, bool verified);
  void erase_locked(const ChunkKey& key);
  void maybe_retire_locked(const SegmentPtr& segment);
  void retire_locked(const SegmentPtr& segment);
  // True when `segment`'s file was deleted by someone else; forgets every such segment. A
  // segment in `checked` was found present earlier in the call; one found present is added.
  bool vanished_locked(const SegmentPtr& segment, CheckedSegments& checked);
  void forget_vanished_locked();
  Error broken_error_locked() const;

  const DiskTierOptions options_;
  uint64_t segment_bytes_ = 0;
  bool direct_io_ = false;
  uint64_t dio_mem_align_ = 4096;  // caller buffers aligned to this skip the bounce buffers
  std::string io_description_;
  std::unique_ptr<tier_internal::IoEngine> engine_;
  int lock_fd_ = -1;

  mutable std::mutex mutex_;  // guards everything below
  std::unordered_map<ChunkKey, Entry, ChunkKeyHash> index_;
  std::list<ChunkKey> lru_;  // front: most recent
  std::map<uint64_t, SegmentPtr> segments_;
  SegmentPtr active_;  // appended to; null until the first put after open or a failed rollover
  std::vector<SegmentPtr> spares_;     // retired, their files kept for reuse (kMaxSpares)
  std::vector<SegmentPtr> graveyard_;  // retired and deleted; closed outside the lock
  uint64_t next_segment_id_ = 1;
  uint64_t seq_ = 0;
  uint64_t bytes_used_ = 0;
  uint64_t disk_bytes_ = 0;
  uint64_t evictions_ = 0;
  uint64_t compactions_ = 0;
  uint64_t segments_reused_ = 0;
  bool compaction_due_ = false;
  bool compacting_ = false;
  std::string broken_;  // why the tier is failing until ping() repairs it; empty when fine
};

}  // namespace kvtier
