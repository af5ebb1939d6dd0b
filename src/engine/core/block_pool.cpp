#include "kvtier/engine/block_pool.h"

#include <stdexcept>

namespace kvtier {

BlockPool::BlockPool(uint32_t num_blocks)
    : refs_(num_blocks, 0), keys_(num_blocks), lru_pos_(num_blocks) {
  for (uint32_t b = num_blocks; b > 0; --b) free_.push_back(b - 1);
}

std::vector<uint32_t> BlockPool::acquire_cached(std::span<const ChunkKey> keys) {
  std::vector<uint32_t> blocks;
  for (const ChunkKey& key : keys) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) break;
    const uint32_t b = it->second;
    if (refs_[b]++ == 0) evictable_.erase(lru_pos_[b]);
    blocks.push_back(b);
  }
  return blocks;
}

size_t BlockPool::cached_prefix(std::span<const ChunkKey> keys) const {
  size_t n = 0;
  while (n < keys.size() && by_key_.contains(keys[n])) ++n;
  return n;
}

std::optional<uint32_t> BlockPool::allocate() {
  uint32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    b = evictable_.front();
    evictable_.pop_front();
    const ChunkKey key = keys_[b].value();  // an evictable block always has its key
    by_key_.erase(key);
    keys_[b].reset();
    if (publisher_) publisher_->removed(kMediumDevice, std::span(&key, 1));
  } else {
    return std::nullopt;
  }
  refs_[b] = 1;
  return b;
}

void BlockPool::release(uint32_t block) {
  if (block >= refs_.size() || refs_[block] == 0) {
    throw std::logic_error("BlockPool::release: block " + std::to_string(block) + " is not held");
  }
  if (--refs_[block] > 0) return;
  if (keys_[block]) {
    lru_pos_[block] = evictable_.insert(evictable_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void BlockPool::release_table(std::span<const uint32_t> table) {
  for (auto b = table.rbegin(); b != table.rend(); ++b) release(*b);
}

void BlockPool::cache(uint32_t block, const ChunkKey& key, std::optional<ChunkKey> parent,
                      std::span<const TokenId> tokens) {
  if (keys_[block] || by_key_.contains(key)) return;
  keys_[block] = key;
  by_key_.emplace(key, block);
  if (publisher_)
    publisher_->stored(kMediumDevice, std::span(&key, 1), block_size_, parent, tokens);
}

}  // namespace kvtier
