// KvEventMirror: what a subscriber of KV events knows about a cache: the blocks stored on each
// medium, rebuilt from the batches alone (tests of the publishers compare it with the cache).
// caught_up() drains a subscriber until it has every batch the publisher sent.
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>

#include "kvtier/core/kv_event_batch.h"
#include "kvtier/core/kv_event_publisher.h"
#include "kvtier/core/kv_event_subscriber.h"

namespace kvtier::testing {

struct KvEventMirror {
  std::map<std::string, std::set<ChunkKey>> stored;
  uint64_t events = 0;

  void apply(const KvEventBatch& batch) {
    for (const KvEvent& e : batch.events) {
      ++events;
      switch (e.kind) {
        case KvEventKind::kBlockStored:
          stored[e.medium].insert(e.block_hashes.begin(), e.block_hashes.end());
          break;
        case KvEventKind::kBlockRemoved:
          for (const ChunkKey& k : e.block_hashes) stored[e.medium].erase(k);
          break;
        case KvEventKind::kAllBlocksCleared:
          stored.clear();
          break;
      }
    }
  }
  std::set<ChunkKey> on(const std::string& medium) const {
    auto it = stored.find(medium);
    return it == stored.end() ? std::set<ChunkKey>{} : it->second;
  }

  // Flushes `pub` and applies what `sub` receives until it holds every batch sent; false when
  // that takes longer than `timeout`.
  bool caught_up(KvEventPublisher& pub, KvEventSubscriber& sub,
                 std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    pub.flush();
    const uint64_t sent = pub.batches_sent();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (sub.next_sequence().value_or(0) < sent) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      for (const KvEventBatch& b : sub.poll(std::chrono::milliseconds(10))) apply(b);
    }
    return true;
  }
};

// Waits until `sub` receives what `pub` publishes (a PUB socket drops what it sends before a
// subscriber's connection is up): publishes a block stored and removed at once on a medium of
// its own (no change to any cache's view) until one arrives.
inline bool connected(KvEventPublisher& pub, KvEventSubscriber& sub, KvEventMirror& mirror,
                      std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const ChunkKey probe{};
    pub.stored("handshake", std::span(&probe, 1), 1);
    pub.removed("handshake", std::span(&probe, 1));
    pub.flush();
    const auto got = sub.poll(std::chrono::milliseconds(20));
    for (const KvEventBatch& b : got) mirror.apply(b);
    if (!got.empty()) return true;
  }
  return false;
}

}  // namespace kvtier::testing
