// FakeTier: an in-memory Tier whose failures a test scripts, for unit tests of the tier's
// callers (the health wrapper, the tier mover). Real tiers are tested against real disks and a
// real redis-server.
#pragma once

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "kvtier/tier/tier.h"

namespace kvtier::testing {

class FakeTier final : public Tier {
 public:
  explicit FakeTier(std::string name = "fake") : name_(std::move(name)) {}

  std::string name() const override { return name_; }

  // While set, every call fails whole with kUnavailable (as an unreachable server).
  void set_unreachable(bool down) {
    std::lock_guard lock(mutex_);
    unreachable_ = down;
  }
  // While set, put() blocks until released (a slow tier); blocked_in_put() tells when a put
  // is waiting there.
  void hold_puts(bool hold) {
    {
      std::lock_guard lock(mutex_);
      hold_puts_ = hold;
    }
    cv_.notify_all();
  }
  bool wait_blocked_in_put(Duration timeout) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return blocked_in_put_ > 0; });
  }
  // Stores bytes directly (as if another engine had written them).
  void insert(const ChunkKey& key, std::vector<std::byte> bytes) {
    std::lock_guard lock(mutex_);
    chunks_[key] = std::move(bytes);
  }
  bool holds(const ChunkKey& key) const {
    std::lock_guard lock(mutex_);
    return chunks_.contains(key);
  }
  std::vector<std::byte> bytes_of(const ChunkKey& key) const {
    std::lock_guard lock(mutex_);
    return chunks_.at(key);
  }
  int pings() const {
    std::lock_guard lock(mutex_);
    return pings_;
  }

 protected:
  Result<std::vector<ChunkStatus>> do_put(std::span<const ChunkKey> keys,
                                          std::span<const std::span<const std::byte>> chunks,
                                          Duration) override {
    std::unique_lock lock(mutex_);
    ++blocked_in_put_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !hold_puts_; });
    --blocked_in_put_;
    if (unreachable_) return make_error(ErrorCode::kUnavailable, name_ + " unreachable");
    for (size_t i = 0; i < keys.size(); ++i) {
      chunks_[keys[i]].assign(chunks[i].begin(), chunks[i].end());
    }
    return std::vector<ChunkStatus>(keys.size(), ChunkStatus::kOk);
  }
  Result<std::vector<ChunkStatus>> do_get(std::span<const ChunkKey> keys,
                                          std::span<const std::span<std::byte>> dst,
                                          Duration) override {
    std::lock_guard lock(mutex_);
    if (unreachable_) return make_error(ErrorCode::kUnavailable, name_ + " unreachable");
    std::vector<ChunkStatus> out;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = chunks_.find(keys[i]);
      if (it == chunks_.end()) {
        out.push_back(ChunkStatus::kMiss);
      } else if (it->second.size() != dst[i].size()) {
        out.push_back(ChunkStatus::kCorrupt);
      } else {
        std::memcpy(dst[i].data(), it->second.data(), dst[i].size());
        out.push_back(ChunkStatus::kOk);
      }
    }
    return out;
  }
  Result<std::vector<bool>> do_contains(std::span<const ChunkKey> keys, Duration) override {
    std::lock_guard lock(mutex_);
    if (unreachable_) return make_error(ErrorCode::kUnavailable, name_ + " unreachable");
    std::vector<bool> out;
    for (const ChunkKey& k : keys) out.push_back(chunks_.contains(k));
    return out;
  }
  Status do_ping(Duration) override {
    std::lock_guard lock(mutex_);
    ++pings_;
    if (unreachable_) return make_error(ErrorCode::kUnavailable, name_ + " unreachable");
    return {};
  }

 private:
  const std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<ChunkKey, std::vector<std::byte>> chunks_;
  bool unreachable_ = false;
  bool hold_puts_ = false;
  int blocked_in_put_ = 0;
  int pings_ = 0;
};

}  // namespace kvtier::testing
