#include "kvtier/server/sealed_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvtier::server {

Result<std::unique_ptr<SealedMemory>> SealedMemory::create(size_t bytes, const std::string& name) {
  if (bytes == 0) return make_error(ErrorCode::kInvalidArgument, "sealed memory of 0 bytes");
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return make_error(ErrorCode::kResourceExhausted,
                      "memfd_create('" + name + "'): " + std::strerror(errno));
  }
  auto fail = [&](const char* what) -> Result<std::unique_ptr<SealedMemory>> {
    const int err = errno;
    close(fd);
    return make_error(ErrorCode::kResourceExhausted,
                      std::string(what) + " of memfd '" + name + "': " + std::strerror(err));
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("ftruncate");
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return fail("F_ADD_SEALS");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail("mmap");
  return std::unique_ptr<SealedMemory>(new SealedMemory(fd, static_cast<std::byte*>(p), bytes));
}

SealedMemory::~SealedMemory() {
  munmap(base_, bytes_);
  close(fd_);
}

SharedKvMemory SealedMemory::describe(std::vector<GroupTensors> groups) const {
  return SharedKvMemory{.pid = static_cast<uint32_t>(getpid()),
                        .fd = static_cast<uint32_t>(fd_),
                        .bytes = bytes_,
                        .groups = std::move(groups)};
}

}  // namespace kvtier::server
