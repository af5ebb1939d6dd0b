#include "kvtier/connector/remote_cache.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <stdexcept>

namespace kvtier {

ChunkKey rank_key(const ChunkKey& key, uint32_t rank) {
  const std::array<TokenId, 1> tag{static_cast<TokenId>(rank)};
  return next_chunk_key(key, tag);
}

SharedKvArena::SharedKvArena(const KvLayout& layout, uint32_t num_blocks,
                             const std::string& name_hint)
    : layout_(layout), num_blocks_(num_blocks) {
  static std::atomic<int> serial{0};
  name_ = "kvtier-" + name_hint + "-" + std::to_string(getpid()) + "-" + std::to_string(serial++);
  Result<size_t> total = layout.total_bytes(num_blocks);  // every offset below fits
  if (!total) throw std::invalid_argument("shared KV memory: " + total.error().message);
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    server::GroupTensors tensors{.num_blocks = num_blocks};
    const size_t tensor = *layout.tensor_bytes(g, num_blocks);
    for (size_t i = 0; i < layout.tensors_per_group(g); ++i) {
      tensors.offsets.push_back(bytes_);
      bytes_ += tensor;
    }
    groups_.push_back(std::move(tensors));
  }
  auto memory = server::SealedMemory::create(bytes_, name_);
  if (!memory) throw std::runtime_error("shared KV memory: " + memory.error().message);
  memory_ = std::move(*memory);
  base_ = memory_->data();
}

SharedKvArena::~SharedKvArena() = default;

server::Registration SharedKvArena::registration(uint32_t rank) const {
  return server::Registration{
      .rank = rank, .layout = layout_, .memory = memory_->describe(groups_)};
}

KvCacheAddresses SharedKvArena::addresses(uint32_t visible_blocks) const {
  if (visible_blocks > num_blocks_) throw std::invalid_argument("SharedKvArena: too many blocks");
  KvCacheAddresses caches;
  for (const server::GroupTensors& g : groups_) {
    GroupCacheAddresses group{.num_blocks = visible_blocks};
    for (uint64_t offset : g.offsets)
      group.bases.push_back(reinterpret_cast<DeviceAddress>(base_ + offset));
    caches.groups.push_back(std::move(group));
  }
  return caches;
}

}  // namespace kvtier
