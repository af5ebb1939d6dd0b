// FakeTier: an in-memory Tier whose failures a test scripts, for unit tests of the tier's
// callers (the health wrapper, the tier mover). Real tiers are tested against real disks and a
// real redis-server.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
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
  // While set, every call raises std::bad_alloc (a tier out of memory).
  void set_out_of_memory(bool out) {
    std::lock_guard lock(mutex_);
    out_of_memory_ = out;
  }
  // While set, put() (get()) blocks until released (a slow tier); wait_blocked_in_put()
  // (wait_blocked_in_get()) tells when one is waiting there.
  void hold_puts(bool hold) { set_held(puts_, hold); }
  bool wait_blocked_in_put(Duration timeout) { return wait_blocked(puts_, timeout); }
  void hold_gets(bool hold) { set_held(gets_, hold); }
  bool wait_blocked_in_get(Duration timeout) { return wait_blocked(gets_, timeout); }
  // How many keys each get() asked for, in call order.
  std::vector<size_t> get_sizes() const {
    std::lock_guard lock(mutex_);
    return get_sizes_;
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
  // Parts the tier says are down (down_parts()); their keys are kSkipped by get and put.
  // probe_down_parts() counts its calls (part_probes()) and clears the parts when told to.
  void set_down_parts(std::vector<DownPart> parts, std::vector<ChunkKey> their_keys = {}) {
    std::lock_guard lock(mutex_);
    down_parts_ = std::move(parts);
    down_keys_ = std::move(their_keys);
  }
  void recover_parts_on_probe(bool recover) {
    std::lock_guard lock(mutex_);
    recover_parts_ = recover;
  }
  int part_probes() const {
    std::lock_guard lock(mutex_);
    return part_probes_;
  }
  std::vector<DownPart> down_parts() const override {
    std::lock_guard lock(mutex_);
    return down_parts_;
  }
  void probe_down_parts() override {
    std::lock_guard lock(mutex_);
    ++part_probes_;
    if (recover_parts_) {
      down_parts_.clear();
      down_keys_.clear();
    }
  }

 protected:
  Result<std::vector<ChunkStatus>> do_put(std::span<const ChunkKey> keys,
                                          std::span<const std::span<const std::byte>> chunks,
                                          Duration) override {
    std::unique_lock lock(mutex_);
    pass(puts_, lock);
    if (out_of_memory_) throw std::bad_alloc();
    if (unreachable_) return make_error(ErrorCode::kUnavailable, name_ + " unreachable");
    std::vector<ChunkStatus> out;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (on_down_part(keys[i])) {
        out.push_back(ChunkStatus::kSkipped);
        continue;
      }
      chunks_[keys[i]].assign(chunks[i].begin(), chunks[i].end());
      out.push_back(ChunkStatus::kOk);
    }
    return out;
  }
  Result<std::vector<ChunkStatus>> do_get(std::span<const ChunkKey> keys,
                                          std::span<const std::span<std::byte>> dst,
                                          Duration) override {
    std::unique_lock lock(mutex_);
    pass(gets_, lock);
    if (out_of_memory_) throw std::bad_alloc();
    get_sizes_.push_back(keys.size());
    if (unreachable_) return make_error(ErrorCode::kUnavailable, name_ + " unreachable");
    std::vector<ChunkStatus> out;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = chunks_.find(keys[i]);
      if (on_down_part(keys[i])) {
        out.push_back(ChunkStatus::kSkipped);
      } else if (it == chunks_.end()) {
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
    if (out_of_memory_) throw std::bad_alloc();
    if (unreachable_) return make_error(ErrorCode::kUnavailable, name_ + " unreachable");
    std::vector<bool> out;
    for (const ChunkKey& k : keys) out.push_back(!on_down_part(k) && chunks_.contains(k));
    return out;
  }
  Status do_ping(Duration) override {
    std::lock_guard lock(mutex_);
    ++pings_;
    if (out_of_memory_) throw std::bad_alloc();
    if (unreachable_) return make_error(ErrorCode::kUnavailable, name_ + " unreachable");
    return {};
  }

 private:
  struct Hold {
    bool held = false;
    int blocked = 0;  // calls waiting for the release
  };
  void set_held(Hold& h, bool held) {
    {
      std::lock_guard lock(mutex_);
      h.held = held;
    }
    cv_.notify_all();
  }
  bool wait_blocked(const Hold& h, Duration timeout) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return h.blocked > 0; });
  }
  void pass(Hold& h, std::unique_lock<std::mutex>& lock) {  // a call waits while h is held
    ++h.blocked;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !h.held; });
    --h.blocked;
  }
  bool on_down_part(const ChunkKey& key) const {  // mutex held
    return std::ranges::find(down_keys_, key) != down_keys_.end();
  }

  const std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<ChunkKey, std::vector<std::byte>> chunks_;
  bool unreachable_ = false;
  bool out_of_memory_ = false;
  Hold puts_;
  Hold gets_;
  std::vector<size_t> get_sizes_;
  int pings_ = 0;
  std::vector<DownPart> down_parts_;
  std::vector<ChunkKey> down_keys_;
  bool recover_parts_ = false;
  int part_probes_ = 0;
};

}  // namespace kvtier::testing
