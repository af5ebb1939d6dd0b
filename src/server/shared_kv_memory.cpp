#include "shared_kv_memory.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>

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

// The real, effective and saved uids of the process whose /proc directory is `proc_dir`
// (its status file's "Uid:" line).
Result<std::array<uid_t, 3>> process_uids(int proc_dir, const std::string& what) {
  const int fd = openat(proc_dir, "status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return make_error(
        errno == ESRCH || errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
        "cannot read " + what + "/status: " + std::strerror(errno));
  }
  std::string text(8192, '\0');
  size_t filled = 0;
  while (filled < text.size()) {
    const ssize_t n = read(fd, text.data() + filled, text.size() - filled);
    if (n <= 0) break;
    filled += static_cast<size_t>(n);
  }
  close(fd);
  text.resize(filled);
  const size_t at = text.find("\nUid:");
  if (at == std::string::npos) {
    return make_error(ErrorCode::kNotFound, what + "/status has no Uid line: the process ended?");
  }
  std::array<uid_t, 3> uids{};
  const char* p = text.data() + at + 5;
  const char* const end = text.data() + text.size();
  for (uid_t& uid : uids) {
    while (p < end && (*p == ' ' || *p == '\t')) ++p;
    const auto [next, ec] = std::from_chars(p, end, uid);
    if (ec != std::errc{}) {
      return make_error(ErrorCode::kInternal, what + "/status: unreadable Uid line");
    }
    p = next;
  }
  return uids;
}

// Opens the client's memfd read/write through /proc/<pid>/fd/<fd> (the same open file,
// reopened). The process's uids are read, and the link read, through the /proc/<pid> directory
// the descriptor is then opened through: should the process end and its pid be reused
// meanwhile, that directory stays the ended process's and the open fails. Only a memfd is
// opened: opening another file can wait on whatever serves it (a FIFO, a device, a FUSE
// filesystem that never answers) and stall the service thread; reading the link cannot. The
// descriptor is pinned first (O_PATH opens nothing), and the pinned file is checked and then
// opened: the client cannot swap another file in between (a dup2 onto its fd).
Result<int> open_client_memory(const SharedKvMemory& memory, uid_t client_uid) {
  if (!memory.shm_name.empty()) {
    return make_error(ErrorCode::kFailedPrecondition,
                      "a POSIX shared-memory object (shm_name) cannot be sealed against "
                      "shrinking: register a memfd sealed with F_SEAL_SHRINK (docs/protocol.md)");
  }
  if (memory.pid == 0) return make_error(ErrorCode::kInvalidArgument, "memory.pid is 0");
  const std::string dir = "/proc/" + std::to_string(memory.pid);
  const int proc_dir = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (proc_dir < 0) {
    return make_error(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                      "cannot open the client's memory: " + dir + ": " + std::strerror(errno));
  }
  Result<int> opened = [&]() -> Result<int> {
    auto uids = process_uids(proc_dir, dir);
    if (!uids) return std::unexpected(uids.error());
    if (client_uid != 0 && std::ranges::any_of(*uids, [&](uid_t u) { return u != client_uid; })) {
      return make_error(ErrorCode::kPermissionDenied,
                        "process " + std::to_string(memory.pid) + " does not run as your user (" +
                            std::to_string(client_uid) +
                            "): register memory of your own user's processes");
    }
    const std::string fd = "fd/" + std::to_string(memory.fd);
    const std::string shown = dir + "/" + fd;
    const auto cannot_open = [&](int error) {
      return make_error(error == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                        "cannot open the client's memory " + shown + ": " + std::strerror(error));
    };
    // O_NOFOLLOW does not apply: fd/<n> is a magic link by design.
    const int pinned = openat(proc_dir, fd.c_str(), O_PATH | O_CLOEXEC);
    if (pinned < 0) return cannot_open(errno);
    const std::string pinned_path = "/proc/self/fd/" + std::to_string(pinned);
    std::array<char, 256> target{};
    const ssize_t length = readlink(pinned_path.c_str(), target.data(), target.size() - 1);
    if (length < 0) {
      const int error = errno;
      close(pinned);
      return cannot_open(error);
    }
    const std::string_view file(target.data(), static_cast<size_t>(length));
    if (!file.starts_with("/memfd:")) {
      close(pinned);
      return make_error(ErrorCode::kInvalidArgument,
                        "the client's memory " + shown + " is " + std::string(file) +
                            ", not a memfd: register a sealed memfd (docs/protocol.md)");
    }
    const int opened_fd = open(pinned_path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    const int error = errno;
    close(pinned);
    if (opened_fd < 0) return cannot_open(error);
    return opened_fd;
  }();
  close(proc_dir);
  return opened;
}

// The client must never be able to shrink the memory while it is mapped here (a copy past the
// end of a shrunk file is SIGBUS): F_SEAL_SHRINK must be set. The seals are read before the
// size, so the size read is one that can no longer decrease. The memory must be an ordinary
// (tmpfs) memfd: in a hugetlbfs one (MFD_HUGETLB) the client can punch a hole and use up the
// huge pages that would refill it, and the server's next copy there is SIGBUS too.
Status check_sealed(int fd, uint64_t expected_bytes) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::kInvalidArgument, "the client's memory is not a regular file");
  }
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the client's memory is not an ordinary memfd (a huge-page one, "
                      "MFD_HUGETLB, is refused): register a memfd without MFD_HUGETLB");
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
                                                               const KvLayout& layout,
                                                               uid_t client_uid) {
  if (memory.bytes == 0) return make_error(ErrorCode::kInvalidArgument, "memory.bytes is 0");
  if (Status st = check_fits(memory, layout); !st) return std::unexpected(st.error());
  auto opened = open_client_memory(memory, client_uid);
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
