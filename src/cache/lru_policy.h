// LruPolicy: evicts the least recently inserted-or-touched key first. O(1) per operation;
// choose_victims is O(keys skipped + n).
#pragma once

#include <memory>

#include "kvtier/cache/eviction_policy.h"

namespace kvtier {

class KeyList;

class LruPolicy final : public EvictionPolicy {
 public:
  LruPolicy();
  ~LruPolicy() override;

  std::string_view name() const override { return "lru"; }
  void insert(const ChunkKey& key) override;
  void touch(const ChunkKey& key) override;
  void remove(const ChunkKey& key) override;
  std::vector<ChunkKey> choose_victims(size_t n,
                                       const EvictablePredicate& evictable) const override;
  void evict(const ChunkKey& key) override;
  bool contains(const ChunkKey& key) const override;
  size_t size() const override;

 private:
  std::unique_ptr<KeyList> keys_;
};

}  // namespace kvtier
