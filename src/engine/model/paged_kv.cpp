#include "paged_kv.h"

#include <stdexcept>
#include <string>

namespace kvtier::model_internal {

PagedKv::PagedKv(DeviceLayout layout, const KvGroup& group, const GroupCacheAddresses& addresses,
                 std::span<const uint32_t> block_table)
    : layout_(layout), group_(group), addresses_(addresses), block_table_(block_table) {}

float* PagedKv::head(uint32_t layer, uint32_t kv, uint32_t position, uint32_t kv_head) const {
  const uint32_t index = position / group_.block_size;
  if (index >= block_table_.size()) {
    throw std::out_of_range("block table of " + std::to_string(block_table_.size()) +
                            " blocks does not cover position " + std::to_string(position));
  }
  const uint64_t block = block_table_[index];
  if (block >= addresses_.num_blocks) {
    throw std::out_of_range("block " + std::to_string(block) + " beyond the cache's " +
                            std::to_string(addresses_.num_blocks) + " blocks");
  }
  const uint64_t slot = position % group_.block_size;
  const uint64_t row = uint64_t{group_.kv_heads} * group_.head_dim;  // floats per token
  uint64_t offset;                                                   // in floats
  DeviceAddress base;
  if (layout_ == DeviceLayout::kPerLayer) {
    base = addresses_.bases[layer];
    offset = ((block * 2 + kv) * group_.block_size + slot) * row;
  } else {
    base = addresses_.bases[0];
    offset = (((block * group_.layers + layer) * 2 + kv) * group_.block_size + slot) * row;
  }
  return reinterpret_cast<float*>(base) + offset + uint64_t{kv_head} * group_.head_dim;
}

}  // namespace kvtier::model_internal
