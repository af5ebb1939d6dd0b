// AnnouncedChunks: the chunks a tier announced stored in KV events whose removals it cannot
// see (Redis drops keys on its own), newest last, at most `limit`. Adding past the limit forgets
// the oldest, which the tier then announces removed: so what subscribers (a router's index)
// believe the tier holds stays bounded, like the publisher's own record of it.
//
// Not thread-safe: the tier holds a lock around it.
#pragma once

#include <cstddef>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvtier/core/chunk_key.h"

namespace kvtier::tier_internal {

class AnnouncedChunks {
 public:
  explicit AnnouncedChunks(size_t limit) : limit_(limit) {}

  // Adds `keys` (one held already becomes the newest); returns the oldest ones forgotten to
  // stay within the limit.
  std::vector<ChunkKey> add(std::span<const ChunkKey> keys) {
    for (const ChunkKey& key : keys) {
      if (auto it = at_.find(key); it != at_.end()) {
        order_.splice(order_.end(), order_, it->second);
        continue;
      }
      order_.push_back(key);
      at_.emplace(key, std::prev(order_.end()));
    }
    std::vector<ChunkKey> forgotten;
    while (order_.size() > limit_) {
      forgotten.push_back(order_.front());
      at_.erase(order_.front());
      order_.pop_front();
    }
    return forgotten;
  }

  // Forgets `key`; whether it was held.
  bool erase(const ChunkKey& key) {
    auto it = at_.find(key);
    if (it == at_.end()) return false;
    order_.erase(it->second);
    at_.erase(it);
    return true;
  }

  size_t size() const { return order_.size(); }

 private:
  size_t limit_;
  std::list<ChunkKey> order_;
  std::unordered_map<ChunkKey, std::list<ChunkKey>::iterator, ChunkKeyHash> at_;
};

}  // namespace kvtier::tier_internal
