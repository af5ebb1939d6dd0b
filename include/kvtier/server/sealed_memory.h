// SealedMemory: client KV memory as kvtierd accepts it (docs/protocol.md, "memory"): an
// anonymous memfd of a fixed size, sealed with F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL before
// it is registered, and mapped read/write in this process.
//
// Why sealed: kvtierd maps the client's memory and copies into and out of it. Had the client
// shrunk an unsealed object, the server's next copy would touch pages past its end and die of
// SIGBUS, taking every other client with it. Once F_SEAL_SHRINK is set no process can shrink
// the file (ftruncate fails with EPERM), and F_SEAL_SEAL keeps anyone from changing the seals.
//
// The server reaches the memfd by opening /proc/<pid>/fd/<fd> of the registering process (the
// registration names both), which reopens the same file: no descriptor travels over the socket.
// The descriptor stays open for the life of this object; destroy it only once no server copy can
// touch it any more (the client that registered it is gone).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/core/status.h"
#include "kvtier/server/protocol.h"

namespace kvtier::server {

class SealedMemory {
 public:
  // A zero-filled, sealed memfd of `bytes` bytes (> 0), mapped read/write. `name` shows in
  // /proc/<pid>/fd only (it is not a file-system name).
  static Result<std::unique_ptr<SealedMemory>> create(size_t bytes, const std::string& name);
  ~SealedMemory();
  SealedMemory(const SealedMemory&) = delete;
  SealedMemory& operator=(const SealedMemory&) = delete;

  std::byte* data() const { return base_; }
  size_t size() const { return bytes_; }
  int fd() const { return fd_; }
  // REGISTER's `memory` for this object: this process's pid, the memfd's descriptor, its size.
  SharedKvMemory describe(std::vector<GroupTensors> groups) const;

 private:
  SealedMemory(int fd, std::byte* base, size_t bytes) : fd_(fd), base_(base), bytes_(bytes) {}

  int fd_;
  std::byte* base_;
  size_t bytes_;
};

}  // namespace kvtier::server
