#include "shared_kv_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvtier::server {
namespace {

Status check_fits(const SharedKvMemory& memory, const KvLayout& layout) {
  if (Status st = layout.validate(); !st) return st;
  if (memory.groups.size() != layout.groups.size()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "memory describes " + std::to_string(memory.groups.size()) +
                          " groups, the layout " + std::to_string(layout.groups.size()));
  }
  for (size_t i = 0; i < layout.groups.size(); ++i) {
    const GroupTensors& t = memory.groups[i];
    const size_t tensors = layout.tensors_per_group(i);
    if (t.offsets.size() != tensors) {
      return make_error(ErrorCode::kInvalidArgument,
                        "group " + std::to_string(i) + " needs " + std::to_string(tensors) +
                            " tensor offsets, got " + std::to_string(t.offsets.size()));
    }
    if (t.num_blocks == 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        "group " + std::to_string(i) + " has no blocks");
    }
    Result<size_t> bytes = layout.tensor_bytes(i, t.num_blocks);
    if (!bytes) return std::unexpected(bytes.error());
    const size_t span = *bytes;
    for (uint64_t offset : t.offsets) {
      if (offset > memory.bytes || span > memory.bytes - offset) {
        return make_error(ErrorCode::kInvalidArgument,
                          "group " + std::to_string(i) + ": tensor at offset " +
                              std::to_string(offset) + " (" + std::to_string(span) +
                              " bytes) exceeds the memory's " + std::to_string(memory.bytes) +
                              " bytes");
      }
    }
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<SharedKvMapping>> SharedKvMapping::open(HostDevice& device,
                                                               const SharedKvMemory& memory,
                                                               const KvLayout& layout) {
  const std::string& name = memory.shm_name;
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return make_error(ErrorCode::kInvalidArgument,
                      "shm_name must be '/name' with no other '/': '" + name.substr(0, 64) + "'");
  }
  if (memory.bytes == 0) return make_error(ErrorCode::kInvalidArgument, "memory.bytes is 0");
  if (Status st = check_fits(memory, layout); !st) return std::unexpected(st.error());
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return make_error(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                      "shm_open('" + name + "'): " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != memory.bytes) {
    close(fd);
    return make_error(ErrorCode::kInvalidArgument,
                      "shared memory '" + name + "' has " + std::to_string(st.st_size) +
                          " bytes, the registration says " + std::to_string(memory.bytes));
  }
  void* base = mmap(nullptr, memory.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return make_error(ErrorCode::kResourceExhausted,
                      "mmap of '" + name + "' failed: " + std::strerror(errno));
  }
  DeviceAddress address = 0;
  try {
    address = device.adopt_device_memory(base, memory.bytes);
  } catch (const std::invalid_argument& e) {
    munmap(base, memory.bytes);
    return make_error(ErrorCode::kInvalidArgument, e.what());
  }
  std::unique_ptr<SharedKvMapping> mapping(new SharedKvMapping(device, base, memory.bytes));
  for (size_t i = 0; i < layout.groups.size(); ++i) {
    GroupCacheAddresses group{.num_blocks = memory.groups[i].num_blocks};
    for (uint64_t offset : memory.groups[i].offsets) group.bases.push_back(address + offset);
    mapping->addresses_.groups.push_back(std::move(group));
  }
  return mapping;
}

SharedKvMapping::~SharedKvMapping() {
  if (retained_) return;  // F7: an Unprovable transfer may still touch it
  device_.release_adopted_memory(base_);
  munmap(base_, bytes_);
}

}  // namespace kvtier::server
