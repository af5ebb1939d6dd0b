// BlockPool: the device KV blocks of one engine core, with the device prefix cache. A block id
// names the same block in every KV-cache group (groups share one block size in the engine).
//
// A block is free (no owner, no key), cached (its KV is complete and findable by the key of its
// prefix; evictable while no request holds it, least recently released first), or held (ref
// count > 0). Not thread-safe: the scheduler thread owns it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/kv_event_publisher.h"

namespace kvtier {

class BlockPool {
 public:
  explicit BlockPool(uint32_t num_blocks);

  uint32_t num_blocks() const { return static_cast<uint32_t>(refs_.size()); }
  // Blocks allocate() can hand out (free or evictable).
  size_t available() const { return free_.size() + evictable_.size(); }

  // The leading `keys` cached on the device, each now held once more.
  std::vector<uint32_t> acquire_cached(std::span<const ChunkKey> keys);
  // How many leading `keys` are cached on the device now (nothing is held).
  size_t cached_prefix(std::span<const ChunkKey> keys) const;
  // A free block, evicting the least recently released cached one if need be; nullopt when
  // every block is held.
  std::optional<uint32_t> allocate();
  // Drops one hold; a cached block stays findable until evicted, an uncached one is free.
  void release(uint32_t block);
  // Drops one hold on each block of a request's table, the last first: the least recently
  // released go first, so the table's tail is evicted before its head and what stays cached is
  // a prefix, which is what a lookup matches (from the first block on).
  void release_table(std::span<const uint32_t> table);
  // The block's KV is complete for `key`'s prefix: later requests may share it. A key already
  // cached in another block keeps that block. `parent` (the key of the block before, none for
  // the first) and `tokens` (the block's) go into its KV event.
  void cache(uint32_t block, const ChunkKey& key, std::optional<ChunkKey> parent = std::nullopt,
             std::span<const TokenId> tokens = {});

  // From now on a key that becomes findable, or stops being findable (its block evicted), is
  // published as a KV event on medium "device", each block `block_size` tokens; null stops it.
  // The publisher must outlive the pool.
  void publish_events(KvEventPublisher* publisher, uint32_t block_size) {
    publisher_ = publisher;
    block_size_ = block_size;
  }

 private:
  std::vector<uint32_t> refs_;
  std::vector<std::optional<ChunkKey>> keys_;
  std::vector<std::list<uint32_t>::iterator> lru_pos_;
  std::unordered_map<ChunkKey, uint32_t, ChunkKeyHash> by_key_;
  std::vector<uint32_t> free_;
  std::list<uint32_t> evictable_;  // cached, unheld; front = least recently released
  KvEventPublisher* publisher_ = nullptr;
  uint32_t block_size_ = 0;
};

}  // namespace kvtier
