// Copy descriptors for chunk transfers: which device blocks go to (or come from) which host
// slot, turned into the CopyDescriptor list a Device executes. See kv_layout.h for where a
// block's bytes live on each side.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/core/kv_layout.h"
#include "kvtier/device/device.h"

namespace kvtier {

enum class Direction { kStore, kLoad };  // store: device -> host; load: host -> device

std::string_view to_string(Direction d);
inline CopyKind copy_kind(Direction d) {
  return d == Direction::kStore ? CopyKind::kDeviceToHost : CopyKind::kHostToDevice;
}

// Where one KV-cache group lives in device memory.
struct GroupCacheAddresses {
  // kPerLayer: one base per layer; kCrossLayer: exactly one base.
  std::vector<DeviceAddress> bases;
  uint32_t num_blocks = 0;
};

struct KvCacheAddresses {
  std::vector<GroupCacheAddresses> groups;  // indexed like KvLayout::groups
};

// The host pool as the device sees it.
struct HostSlots {
  DeviceAddress base = 0;
  size_t slot_bytes = 0;
  uint32_t num_slots = 0;
};

// One chunk of `group` <-> `slot`. `blocks` are the device block ids of the chunk's blocks
// [first_block, blocks_per_chunk): a load whose leading blocks are already on the device (a
// device prefix-cache hit that ends inside the chunk) copies only the rest. Stores copy whole
// chunks (first_block = 0). `layer` < the group's layers copies only that layer's part of each
// block (a layer-wise transfer, worker_connector.h); kAllLayers copies every layer.
struct ChunkTransfer {
  static constexpr uint32_t kAllLayers = UINT32_MAX;

  uint32_t group = 0;
  std::vector<uint32_t> blocks;
  uint32_t slot = 0;
  uint32_t first_block = 0;
  uint32_t layer = kAllLayers;
};

// Builds the descriptors for `chunks`, in chunk order. With `coalesce`, a run of pieces that is
// contiguous on both sides becomes one descriptor. Out-of-range groups, blocks or slots, a
// wrong block count, a layer beyond the group's, or addresses that do not match `layout` are
// std::invalid_argument (they are bugs, not device faults: F2).
std::vector<CopyDescriptor> build_copy_descriptors(const KvLayout& layout,
                                                   const KvCacheAddresses& caches,
                                                   const HostSlots& slots, Direction direction,
                                                   std::span<const ChunkTransfer> chunks,
                                                   bool coalesce);

// The checks build_copy_descriptors makes of each chunk, alone: the same std::invalid_argument
// for the first chunk that fails one.
void check_chunk_transfers(const KvLayout& layout, const KvCacheAddresses& caches,
                           const HostSlots& slots, std::span<const ChunkTransfer> chunks);

// Checks that `caches` matches `layout` and that every chunk fits a slot of `slots`.
void validate_addresses(const KvLayout& layout, const KvCacheAddresses& caches,
                        const HostSlots& slots);

}  // namespace kvtier
