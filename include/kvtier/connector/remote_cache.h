// What the scheduler side and the worker sides of kvtierd's connector (`cache.mode: server`)
// share: the per-rank keys and the KV memory a client registers with the server.
//
// kvtierd keys chunks globally, and every rank holds only its share of a chunk, so each rank
// stores and retrieves its share under rank_key(key, rank); a chunk is a hit when every rank's
// share is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/kv_layout.h"
#include "kvtier/server/client.h"
#include "kvtier/server/sealed_memory.h"
#include "kvtier/transfer/copy_descriptors.h"

namespace kvtier {

ChunkKey rank_key(const ChunkKey& key, uint32_t rank);

// SharedKvArena: a rank's KV caches in a sealed memfd (server::SealedMemory, the host device's
// stand-in for CUDA IPC), `num_blocks` blocks per group in `layout`'s device layout,
// zero-filled. The memory is unmapped and closed by the destructor: destroy it only once no
// server copy can touch it any more (the client that registered it is gone).
// Not thread-safe; the bytes are shared with the server.
class SharedKvArena {
 public:
  SharedKvArena(const KvLayout& layout, uint32_t num_blocks, const std::string& name_hint);
  ~SharedKvArena();
  SharedKvArena(const SharedKvArena&) = delete;
  SharedKvArena& operator=(const SharedKvArena&) = delete;

  server::Registration registration(uint32_t rank) const;
  // Where each group's tensors are, as pointers usable in this process; the addresses report
  // `visible_blocks` blocks (the rest of the arena is the caller's scratch).
  KvCacheAddresses addresses(uint32_t visible_blocks) const;
  std::byte* base() const { return base_; }
  size_t bytes() const { return bytes_; }

 private:
  KvLayout layout_;
  uint32_t num_blocks_;
  std::string name_;
  size_t bytes_ = 0;
  std::unique_ptr<server::SealedMemory> memory_;
  std::byte* base_ = nullptr;
  std::vector<server::GroupTensors> groups_;
};

}  // namespace kvtier
