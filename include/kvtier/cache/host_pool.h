// HostPool: `num_slots` chunk slots of `slot_bytes` each, in one page-aligned mapping that is
// registered with a Device so that slots can be copy sources and destinations.
//
// The mapping is anonymous memory, or, when a shared-memory name is given, a POSIX shared
// memory object (shm_open) that another process maps with open_existing(). The creating pool
// owns the name and unlinks it on destruction; a pool from open_existing() only unmaps.
//
// Slot i occupies bytes [i * slot_bytes, (i + 1) * slot_bytes) of the mapping. Which slot holds
// what is the CacheManager's business; the pool only owns memory.
//
// A pool from create_unregistered() is shared memory registered with no device: the process
// that owns a host cache's memory but copies nothing through a device (an engine's scheduler
// side, whose ranks map it with open_existing and copy through their devices) reads and writes
// its slots with slot_ptr(); slot_address() is an error there.
//
// Lifetime: the Device must outlive the pool, and the pool must outlive every transfer that may
// touch it; a pool with quarantined slots (F7) therefore lives as long as the process.
// Thread-safety: the accessors are const and may be called from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "kvtier/cache/slot_id.h"
#include "kvtier/core/status.h"
#include "kvtier/device/device.h"

namespace kvtier {

class HostPool {
 public:
  // Maps and registers num_slots * slot_bytes bytes. `shm_name` empty: anonymous memory;
  // otherwise a new shared-memory object "/name" (one leading '/', no other, at most 255
  // characters), which must not exist yet. Errors (never a silently smaller pool):
  // kInvalidArgument for a zero or overflowing size or a bad name, kFailedPrecondition when the
  // name exists, kResourceExhausted when the memory cannot be had, kDeviceFault when the device
  // refuses the registration with a DeviceFault. Each names the size or name that failed.
  static Result<std::unique_ptr<HostPool>> create(Device& device, size_t slot_bytes,
                                                  size_t num_slots, std::string_view shm_name = "");

  // A new shared-memory object as create() makes it, mapped but registered with no device.
  static Result<std::unique_ptr<HostPool>> create_unregistered(size_t slot_bytes, size_t num_slots,
                                                               std::string_view shm_name);

  // Maps, read/write, the shared-memory object a pool in another process created with the same
  // name, slot_bytes and num_slots, and registers it with `device`. The object's size must be
  // exactly num_slots * slot_bytes (kInvalidArgument otherwise); kNotFound when there is none.
  static Result<std::unique_ptr<HostPool>> open_existing(Device& device, std::string_view shm_name,
                                                         size_t slot_bytes, size_t num_slots);

  // Unregisters from the device, unmaps, and (creator only) unlinks the shared-memory name.
  ~HostPool();

  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  size_t slot_bytes() const { return slot_bytes_; }
  size_t num_slots() const { return num_slots_; }
  size_t bytes() const { return slot_bytes_ * num_slots_; }
  // Empty for anonymous memory.
  const std::string& shm_name() const { return shm_name_; }
  bool owns_name() const { return owns_name_; }
  // Creator only (a no-op otherwise, and once done): removes the shared-memory name now. The
  // memory stays mapped wherever it is and goes with the last mapping, so once every process
  // that needs it has mapped it, no crash can leave it behind.
  void unlink_name();

  std::byte* base() const { return base_; }
  // Throws std::out_of_range when slot >= num_slots().
  std::byte* slot_ptr(SlotId slot) const;
  // Also std::logic_error for a pool registered with no device.
  DeviceAddress slot_address(SlotId slot) const;

 private:
  HostPool(Device* device, size_t slot_bytes, size_t num_slots, std::string shm_name,
           bool owns_name);
  static Result<std::unique_ptr<HostPool>> create_named(Device* device, size_t slot_bytes,
                                                        size_t num_slots,
                                                        std::string_view shm_name);
  static Result<std::unique_ptr<HostPool>> map_and_register(std::unique_ptr<HostPool> pool, int fd);
  void check_slot(SlotId slot) const;

  Device* const device_;  // null: registered with no device
  const size_t slot_bytes_;
  const size_t num_slots_;
  const std::string shm_name_;
  bool owns_name_;
  std::byte* base_ = nullptr;  // null until mapped
  DeviceAddress base_address_ = 0;
  bool registered_ = false;
};

}  // namespace kvtier
