// DiskTier (L2): chunks as files in a local directory, bounded in size, LRU eviction.
//
// Layout: <directory>/<first 2 hex digits>/<32 hex digits of the key>.kvc, each file one chunk
// record (chunk_record.h). A write goes to a uniquely named ".tmp" file in the same folder and
// is renamed over the final name, so a reader or a restart sees the old record, the new record
// or nothing, never a torn one. Files are not fsynced: after a power loss a renamed file may be
// short or zeroed, and the record check turns it into kCorrupt (a miss) and deletes it.
//
// Index: key -> file size, in LRU order (a put or a hit makes a key most recent). open()
// rebuilds it from the directory, oldest modification time first, deleting leftover ".tmp"
// files, so a restarted engine finds what it stored. When a put makes the total exceed
// capacity_bytes, least recently used files are deleted until it fits.
//
// IO: pread/pwrite on `io_threads` threads; a batch's keys run in parallel. (io_uring was left
// out: each chunk is an open + write + rename or an open + read of its own file, which io_uring
// only covers on newer kernels, and the thread pool gives the same parallelism.) A timeout
// cancels keys whose IO has not started; see io_pool.h.
//
// Thread-safety: every call may come from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kvtier/tier/tier.h"

namespace kvtier {

namespace tier_internal {
class IoPool;
}

struct DiskTierOptions {
  std::filesystem::path directory;               // created if absent
  uint64_t capacity_bytes = uint64_t{10} << 30;  // file bytes (records) kept at most
  uint32_t io_threads = 4;
};

class DiskTier final : public Tier {
 public:
  // Creates the directory if needed and rebuilds the index from it. kInvalidArgument for an
  // empty path, zero capacity or zero threads; kUnavailable when the directory cannot be made
  // or read.
  static Result<std::unique_ptr<DiskTier>> open(const DiskTierOptions& options);
  ~DiskTier() override;

  std::string name() const override { return "disk"; }

  uint64_t bytes_used() const;  // record bytes the index holds
  size_t chunk_count() const;
  uint64_t evictions() const;                                // files deleted to make room
  std::filesystem::path path_of(const ChunkKey& key) const;  // where key's record lives

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
  explicit DiskTier(const DiskTierOptions& options);
  Status rebuild_index();
  ChunkStatus write_one(const ChunkKey& key, std::span<const std::byte> payload);
  ChunkStatus read_one(const ChunkKey& key, std::span<std::byte> dst);
  // Called with mutex_ held: records key as most recent and evicts until the total fits.
  void insert_locked(const ChunkKey& key, uint64_t bytes);
  void erase_locked(const ChunkKey& key);

  struct Entry {
    uint64_t bytes;
    std::list<ChunkKey>::iterator lru;
  };

  const DiskTierOptions options_;
  std::unique_ptr<tier_internal::IoPool> io_;
  mutable std::mutex mutex_;  // guards the index, and orders renames and deletions with it
  std::unordered_map<ChunkKey, Entry, ChunkKeyHash> index_;
  std::list<ChunkKey> lru_;  // front: most recent
  uint64_t bytes_used_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace kvtier
