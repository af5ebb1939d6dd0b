// Helpers shared by the cache tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <vector>

#include "kvtier/cache/cache_manager.h"
#include "kvtier/cache/eviction_policy.h"

namespace kvtier::cache_test {

inline ChunkKey key(uint64_t i) {
  return ChunkKey{.lo = i, .hi = 0xc0ffee};
}

inline std::vector<ChunkKey> keys(std::initializer_list<uint64_t> ids) {
  std::vector<ChunkKey> out;
  for (uint64_t i : ids) out.push_back(key(i));
  return out;
}

inline std::vector<ChunkKey> key_range(uint64_t first, uint64_t count) {
  std::vector<ChunkKey> out;
  for (uint64_t i = 0; i < count; ++i) out.push_back(key(first + i));
  return out;
}

inline constexpr size_t kSlotBytes = 4096;

// Every chunk may be evicted.
inline const EvictablePredicate kAll = [](const ChunkKey&) { return true; };

inline std::unique_ptr<CacheManager> make_manager(size_t num_slots,
                                                  std::string_view policy = "lru") {
  auto p = make_eviction_policy(policy, num_slots);
  EXPECT_TRUE(p.has_value());
  return std::make_unique<CacheManager>(num_slots, kSlotBytes, std::move(*p));
}

// prepare_store + complete_store(kSucceeded), requiring that room was made.
inline StorePlan store(CacheManager& m, const std::vector<ChunkKey>& ks) {
  std::optional<StorePlan> plan = m.prepare_store(ks);
  EXPECT_TRUE(plan.has_value());
  if (!plan) return {};
  m.complete_store(plan->keys, Verdict::kSucceeded);
  return *plan;
}

// The slot counts partition the pool (F12).
inline void expect_conserved(const CacheManager& m) {
  const CacheCounters c = m.counters();
  EXPECT_EQ(c.slots_free + c.slots_pending + c.slots_ready + c.slots_quarantined, m.num_slots());
  const Status audit = m.audit();
  EXPECT_TRUE(audit.has_value()) << audit.error().to_string();
}

}  // namespace kvtier::cache_test
