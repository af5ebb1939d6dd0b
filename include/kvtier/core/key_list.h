// KeyList: keys in recency order with O(1) insert, move-to-most-recent, erase and pop of the least
// recent. The building block of the LRU and ARC policies, and of what the Redis tier announced.
#pragma once

#include <list>
#include <stdexcept>
#include <unordered_map>

#include "kvtier/core/chunk_key.h"

namespace kvtier {

class KeyList {
 public:
  using const_iterator = std::list<ChunkKey>::const_iterator;

  bool contains(const ChunkKey& key) const { return where_.contains(key); }
  size_t size() const { return order_.size(); }
  bool empty() const { return order_.empty(); }

  // Precondition: not contained.
  void push_mru(const ChunkKey& key) {
    if (contains(key)) throw std::logic_error("KeyList: key already present: " + key.hex());
    where_.emplace(key, order_.insert(order_.end(), key));
  }
  // No effect when not contained.
  void move_to_mru(const ChunkKey& key) {
    auto it = where_.find(key);
    if (it != where_.end()) order_.splice(order_.end(), order_, it->second);
  }
  // Returns whether the key was there.
  bool erase(const ChunkKey& key) {
    auto it = where_.find(key);
    if (it == where_.end()) return false;
    order_.erase(it->second);
    where_.erase(it);
    return true;
  }
  // Precondition: not empty.
  void pop_lru() { erase(order_.front()); }

  // Least recently used first.
  const_iterator begin() const { return order_.begin(); }
  const_iterator end() const { return order_.end(); }

 private:
  std::list<ChunkKey> order_;  // front: least recently used
  std::unordered_map<ChunkKey, std::list<ChunkKey>::iterator, ChunkKeyHash> where_;
};

}  // namespace kvtier
