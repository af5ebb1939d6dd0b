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

// Opens the client's memory read/write: its memfd through /proc/<pid>/fd/<fd> (the same open
// file, reopened), or a POSIX shm object by name (refused below: it cannot be sealed).
Result<int> open_client_memory(const SharedKvMemory& memory) {
  std::string path;
  if (memory.shm_name.empty()) {
    if (memory.pid == 0) return make_error(ErrorCode::kInvalidArgument, "memory.pid is 0");
    path = "/proc/" + std::to_string(memory.pid) + "/fd/" + std::to_string(memory.fd);
  } else {
    const std::string& name = memory.shm_name;
    if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos) {
      return make_error(ErrorCode::kInvalidArgument, "shm_name must be '/name' with no other '/'");
    }
    path = "/dev/shm" + name;
  }
  // O_NOFOLLOW does not apply: /proc/<pid>/fd/<n> is a magic link by design. O_NONBLOCK: a
  // client naming a FIFO or a device must not stall the service thread.
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    return make_error(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                      "cannot open the client's memory " + path + ": " + std::strerror(errno));
  }
  return fd;
}

// The client must never be able to shrink the memory while it is mapped here (a copy past the
// end of a shrunk file is SIGBUS): F_SEAL_SHRINK must be set. The seals are read before the
// size, so the size read is one that can no longer decrease.
Status check_sealed(int fd, uint64_t expected_bytes) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::kInvalidArgument, "the client's memory is not a regular file");
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return make_error(ErrorCode::kFailedPrecondition,
                      "the client's memory is not sealed against shrinking: register a memfd "
                      "sealed with F_SEAL_SHRINK (docs/protocol.md)");
  }
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != expected_bytes) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the client's memory has " + std::to_string(st.st_size) +
                          " bytes, the registration says " + std::to_string(expected_bytes));
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<SharedKvMapping>> SharedKvMapping::open(HostDevice& device,
                                                               const SharedKvMemory& memory,
                                                               const KvLayout& layout) {
  if (memory.bytes == 0) return make_error(ErrorCode::kInvalidArgument, "memory.bytes is 0");
  if (Status st = check_fits(memory, layout); !st) return std::unexpected(st.error());
  auto opened = open_client_memory(memory);
  if (!opened) return std::unexpected(opened.error());
  const int fd = *opened;
  if (Status st = check_sealed(fd, memory.bytes); !st) {
    close(fd);
    return std::unexpected(st.error());
  }
  void* base = mmap(nullptr, memory.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return make_error(
        ErrorCode::kInvalidArgument,
        std::string("cannot map the client's memory read/write: ") + std::strerror(map_errno));
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
