#include "kvtier/cache/host_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <stdexcept>
#include <system_error>

#include "kvtier/device/device_fault.h"

namespace kvtier {

namespace {

std::string os_error(int err) {
  return std::system_category().message(err);
}

std::string size_text(size_t slot_bytes, size_t num_slots) {
  return std::to_string(num_slots) + " slots x " + std::to_string(slot_bytes) + " bytes";
}

Status check_sizes(size_t slot_bytes, size_t num_slots) {
  if (slot_bytes == 0 || num_slots == 0) {
    return make_error(
        ErrorCode::kInvalidArgument,
        "host pool: slot_bytes and num_slots must be > 0, got " + size_text(slot_bytes, num_slots));
  }
  if (num_slots > std::numeric_limits<SlotId>::max()) {
    return make_error(
        ErrorCode::kInvalidArgument,
        "host pool: num_slots " + std::to_string(num_slots) + " does not fit a SlotId");
  }
  if (slot_bytes > std::numeric_limits<size_t>::max() / num_slots) {
    return make_error(ErrorCode::kInvalidArgument,
                      "host pool: " + size_text(slot_bytes, num_slots) + " overflows size_t");
  }
  return {};
}

Status check_name(std::string_view name) {
  const bool ok = name.size() >= 2 && name.size() <= 255 && name.front() == '/' &&
                  name.find('/', 1) == std::string_view::npos;
  if (!ok) {
    return make_error(ErrorCode::kInvalidArgument,
                      "host pool: shared-memory name must be '/' followed by 1 to 254 "
                      "characters other than '/', got '" +
                          std::string(name) + "'");
  }
  return {};
}

}  // namespace

HostPool::HostPool(Device* device, size_t slot_bytes, size_t num_slots, std::string shm_name,
                   bool owns_name)
    : device_(device),
      slot_bytes_(slot_bytes),
      num_slots_(num_slots),
      shm_name_(std::move(shm_name)),
      owns_name_(owns_name) {}

HostPool::~HostPool() {
  if (registered_) {
    try {
      device_->unregister_host(base_);
    } catch (const DeviceFault&) {
      // ignored: a faulted device context is being torn down; the mapping goes regardless.
    }
  }
  if (base_) munmap(base_, bytes());
  unlink_name();
}

void HostPool::unlink_name() {
  if (owns_name_) shm_unlink(shm_name_.c_str());
  owns_name_ = false;
}

Result<std::unique_ptr<HostPool>> HostPool::create(Device& device, size_t slot_bytes,
                                                   size_t num_slots, std::string_view shm_name) {
  if (auto st = check_sizes(slot_bytes, num_slots); !st) return std::unexpected(st.error());
  if (shm_name.empty()) {
    return map_and_register(
        std::unique_ptr<HostPool>(new HostPool(&device, slot_bytes, num_slots, "", false)), -1);
  }
  return create_named(&device, slot_bytes, num_slots, shm_name);
}

Result<std::unique_ptr<HostPool>> HostPool::create_unregistered(size_t slot_bytes, size_t num_slots,
                                                                std::string_view shm_name) {
  if (auto st = check_sizes(slot_bytes, num_slots); !st) return std::unexpected(st.error());
  return create_named(nullptr, slot_bytes, num_slots, shm_name);
}

Result<std::unique_ptr<HostPool>> HostPool::create_named(Device* device, size_t slot_bytes,
                                                         size_t num_slots,
                                                         std::string_view shm_name) {
  if (auto st = check_name(shm_name); !st) return std::unexpected(st.error());
  const std::string name(shm_name);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    const int err = errno;
    return make_error(
        err == EEXIST ? ErrorCode::kFailedPrecondition : ErrorCode::kResourceExhausted,
        "host pool: cannot create shared memory " + name + ": " + os_error(err));
  }
  // From here the pool owns the name: any error below unlinks it.
  std::unique_ptr<HostPool> pool(new HostPool(device, slot_bytes, num_slots, name, true));
  // Reserve the memory now, so that a too small /dev/shm is an error here rather than a SIGBUS
  // on first touch.
  int err = posix_fallocate(fd, 0, static_cast<off_t>(pool->bytes()));
  if (err == EOPNOTSUPP || err == EINVAL) {
    err = ftruncate(fd, static_cast<off_t>(pool->bytes())) == 0 ? 0 : errno;
  }
  if (err != 0) {
    close(fd);
    return make_error(ErrorCode::kResourceExhausted,
                      "host pool: cannot reserve " + std::to_string(pool->bytes()) + " bytes (" +
                          size_text(slot_bytes, num_slots) + ") of shared memory " + name + ": " +
                          os_error(err));
  }
  return map_and_register(std::move(pool), fd);
}

Result<std::unique_ptr<HostPool>> HostPool::open_existing(Device& device, std::string_view shm_name,
                                                          size_t slot_bytes, size_t num_slots) {
  if (auto st = check_sizes(slot_bytes, num_slots); !st) return std::unexpected(st.error());
  if (auto st = check_name(shm_name); !st) return std::unexpected(st.error());
  const std::string name(shm_name);
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int err = errno;
    return make_error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kUnavailable,
                      "host pool: cannot open shared memory " + name + ": " + os_error(err));
  }
  std::unique_ptr<HostPool> pool(new HostPool(&device, slot_bytes, num_slots, name, false));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return make_error(ErrorCode::kUnavailable,
                      "host pool: cannot stat shared memory " + name + ": " + os_error(err));
  }
  if (static_cast<uint64_t>(st.st_size) != pool->bytes()) {
    close(fd);
    return make_error(ErrorCode::kInvalidArgument,
                      "host pool: shared memory " + name + " has " + std::to_string(st.st_size) +
                          " bytes, expected " + std::to_string(pool->bytes()) + " (" +
                          size_text(slot_bytes, num_slots) + ")");
  }
  return map_and_register(std::move(pool), fd);
}

Result<std::unique_ptr<HostPool>> HostPool::map_and_register(std::unique_ptr<HostPool> pool,
                                                             int fd) {
  const int flags = fd < 0 ? MAP_PRIVATE | MAP_ANONYMOUS : MAP_SHARED;
  void* p = mmap(nullptr, pool->bytes(), PROT_READ | PROT_WRITE, flags, fd, 0);
  const int err = errno;
  if (fd >= 0) close(fd);  // the mapping keeps the object alive
  if (p == MAP_FAILED) {
    return make_error(ErrorCode::kResourceExhausted,
                      "host pool: cannot map " + std::to_string(pool->bytes()) + " bytes (" +
                          size_text(pool->slot_bytes_, pool->num_slots_) + "): " + os_error(err));
  }
  pool->base_ = static_cast<std::byte*>(p);
  if (pool->device_ == nullptr) return pool;
  try {
    pool->base_address_ = pool->device_->register_host(pool->base_, pool->bytes());
  } catch (const DeviceFault& fault) {
    return make_error(ErrorCode::kDeviceFault,
                      "host pool: " + pool->device_->name() + " cannot register " +
                          std::to_string(pool->bytes()) + " bytes: " + fault.what());
  }
  pool->registered_ = true;
  return pool;
}

void HostPool::check_slot(SlotId slot) const {
  if (slot >= num_slots_) {
    throw std::out_of_range("HostPool: slot " + std::to_string(slot) + " of " +
                            std::to_string(num_slots_));
  }
}

std::byte* HostPool::slot_ptr(SlotId slot) const {
  check_slot(slot);
  return base_ + size_t{slot} * slot_bytes_;
}

DeviceAddress HostPool::slot_address(SlotId slot) const {
  check_slot(slot);
  if (!registered_)
    throw std::logic_error("HostPool: " + shm_name_ + " is registered with no device");
  return base_address_ + uint64_t{slot} * slot_bytes_;
}

}  // namespace kvtier
