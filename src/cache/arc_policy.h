// ArcPolicy: Adaptive Replacement Cache (Megiddo & Modha, FAST '03) over resident keys.
//
// - T1 holds keys seen once since they became resident, T2 keys touched again (a touch of a T1
//   key moves it to T2). B1 and B2 remember keys recently evicted from T1 and T2 ("ghosts").
// - p is the target size of T1, in [0, capacity]. A key that becomes resident while in B1
//   grows p by max(1, |B2|/|B1|); one in B2 shrinks it by max(1, |B1|/|B2|). Either way it
//   enters T2, since it has been wanted twice.
// - Victims come from T1 while |T1| > p, else from T2. When the preferred list has nothing
//   evictable (every key pinned or protected) the other list is used instead: ARC does not give
//   up while any evictable key remains (unlike vLLM issue #55461, where ARC stops once T2 is
//   exhausted).
// - Ghost lists are bounded: |T1| + |B1| <= capacity and |B1| + |B2| <= capacity; the oldest
//   ghosts are forgotten first.
#pragma once

#include <memory>

#include "kvtier/cache/eviction_policy.h"

namespace kvtier {

class KeyList;

class ArcPolicy final : public EvictionPolicy {
 public:
  enum class List { kNone, kT1, kT2, kB1, kB2 };

  // Throws std::invalid_argument when capacity == 0.
  explicit ArcPolicy(size_t capacity);
  ~ArcPolicy() override;

  std::string_view name() const override { return "arc"; }
  void insert(const ChunkKey& key) override;
  void touch(const ChunkKey& key) override;
  void remove(const ChunkKey& key) override;
  std::vector<ChunkKey> choose_victims(size_t n,
                                       const EvictablePredicate& evictable) const override;
  void evict(const ChunkKey& key) override;
  bool contains(const ChunkKey& key) const override;
  size_t size() const override;

  // Introspection, for tests and metrics.
  size_t capacity() const { return capacity_; }
  size_t target_t1() const { return p_; }
  List list_of(const ChunkKey& key) const;
  size_t list_size(List which) const;

 private:
  KeyList& list(List which) const;
  void trim_ghosts();

  const size_t capacity_;
  size_t p_ = 0;
  std::unique_ptr<KeyList> t1_, t2_, b1_, b2_;
};

}  // namespace kvtier
