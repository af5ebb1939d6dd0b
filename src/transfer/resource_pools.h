// Pools of the per-transfer resources: streams, events and descriptor buffers (internal to
// TransferEngine; their counts are public as PoolCounts in TransferStats).
//
// F6: a resource that saw a fault is never returned to its pool. It is either discarded
// (destroyed or freed, once nothing can still use it: the transfer's end marker completed) or
// quarantined (kept, unused, for the life of the process: the transfer is Unprovable and
// something may still use it). Not thread-safe: owned by one TransferEngine.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "kvtier/device/device.h"
#include "kvtier/device/device_fault.h"
#include "kvtier/transfer/transfer_engine.h"  // PoolCounts

namespace kvtier {

template <class Resource>
class ResourcePool {
 public:
  ResourcePool(std::function<Resource()> create, std::function<void(Resource&)> destroy)
      : create_(std::move(create)), destroy_(std::move(destroy)) {}
  // Destroys pooled resources; quarantined and in-use ones are deliberately left alone. One the
  // device cannot destroy (a DeviceFault: CUDA reports an earlier error there) is kept forever.
  ~ResourcePool() {
    for (Resource& r : free_) {
      try {
        destroy_(r);
      } catch (const DeviceFault&) {
        keep_forever(std::move(r));
      }
    }
  }
  ResourcePool(const ResourcePool&) = delete;
  ResourcePool& operator=(const ResourcePool&) = delete;

  Resource acquire() {
    if (!free_.empty()) {
      Resource r = std::move(free_.back());
      free_.pop_back();
      --counts_.pooled;
      ++counts_.in_use;
      return r;
    }
    Resource r = create_();  // may throw: counted only once it exists
    ++counts_.created;
    ++counts_.in_use;
    return r;
  }
  // Only for a resource that saw no fault.
  void release(Resource r) {
    --counts_.in_use;
    ++counts_.pooled;
    free_.push_back(std::move(r));
  }
  // It saw a fault and nothing can still use it. Never raises: one the device cannot destroy
  // (a DeviceFault) is kept as a quarantined one is, never used again (F1: a fault releasing a
  // finished transfer's resources must not escape poll()).
  void discard(Resource r) {
    try {
      destroy_(r);
    } catch (const DeviceFault&) {
      quarantine(std::move(r));
      return;
    }
    --counts_.in_use;
    ++counts_.discarded;
  }
  // It saw a fault and something may still use it: keep it for the life of the process,
  // beyond this pool's own (F7).
  void quarantine(Resource r) {
    --counts_.in_use;
    ++counts_.quarantined;
    keep_forever(std::move(r));
  }

  const PoolCounts& counts() const { return counts_; }

 private:
  static void keep_forever(Resource r) {
    static std::mutex mu;
    static auto* forever = new std::vector<Resource>();  // never freed, by design
    std::lock_guard lock(mu);
    forever->push_back(std::move(r));
  }

  std::function<Resource()> create_;
  std::function<void(Resource&)> destroy_;
  std::vector<Resource> free_;
  PoolCounts counts_;
};

// A buffer of copy descriptors that the device reads while the copies execute.
using DescriptorBuffer = std::unique_ptr<std::vector<CopyDescriptor>>;

inline ResourcePool<StreamHandle> make_stream_pool(Device& device) {
  return {[&device] { return device.create_stream(); },
          [&device](StreamHandle& s) { device.destroy_stream(s); }};
}
inline ResourcePool<EventHandle> make_event_pool(Device& device) {
  return {[&device] { return device.create_event(); },
          [&device](EventHandle& e) { device.destroy_event(e); }};
}
inline ResourcePool<DescriptorBuffer> make_descriptor_buffer_pool() {
  return {[] { return std::make_unique<std::vector<CopyDescriptor>>(); },
          [](DescriptorBuffer& b) { b.reset(); }};
}

}  // namespace kvtier
