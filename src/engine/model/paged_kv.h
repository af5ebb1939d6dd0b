// PagedKv: where the K and V of (layer, position, KV head) of one KV-cache group live in this
// rank's cache memory, in kvtier's device layout (kvtier/core/kv_layout.h):
//   kPerLayer   bases[layer] -> [num_blocks][2][block_size][kv_heads][head_dim]
//   kCrossLayer bases[0]     -> [num_blocks][layers][2][block_size][kv_heads][head_dim]
// Addresses must be dereferenceable by this process (true for HostDevice memory).
#pragma once

#include <cstdint>
#include <span>

#include "kvtier/core/kv_layout.h"
#include "kvtier/transfer/copy_descriptors.h"

namespace kvtier::model_internal {

class PagedKv {
 public:
  // `block_table[i]` is the device block of positions [i * block_size, (i + 1) * block_size).
  PagedKv(DeviceLayout layout, const KvGroup& group, const GroupCacheAddresses& addresses,
          std::span<const uint32_t> block_table);

  // K (kv = 0) or V (kv = 1) of one head: head_dim floats. Throws std::out_of_range for a
  // position beyond the block table or a block id beyond the cache (bugs, not faults).
  float* head(uint32_t layer, uint32_t kv, uint32_t position, uint32_t kv_head) const;

 private:
  DeviceLayout layout_;
  KvGroup group_;
  const GroupCacheAddresses& addresses_;
  std::span<const uint32_t> block_table_;
};

}  // namespace kvtier::model_internal
