// A client's KV memory as the server sees it: the client's shared-memory object mapped into
// this process and adopted by the host device as device memory (the host device's stand-in for
// a CUDA IPC handle).
//
// Lifetime (F7): a mapping that an Unprovable transfer may still touch must never be unmapped;
// the owner then calls retain_forever() and the destructor leaves the mapping in place.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "kvtier/core/status.h"
#include "kvtier/device/host_device.h"
#include "kvtier/server/protocol.h"
#include "kvtier/transfer/copy_descriptors.h"

namespace kvtier::server {

class SharedKvMapping {
 public:
  // Opens and maps the client's memory (a memfd sealed with F_SEAL_SHRINK of exactly
  // memory.bytes bytes, else kFailedPrecondition / kInvalidArgument), checks that every
  // tensor of `layout` fits, and adopts it. kInvalidArgument / kNotFound name what is wrong.
  //
  // `client_uid` is the user the registering client runs as. The server opens the memory with
  // its own privileges, which may reach further than the client's (a root kvtierd, or one
  // serving clients of several users through server.ipc_group), so it opens only what the
  // client could open itself: memory of a process whose real, effective and saved uids are all
  // `client_uid` (uid 0 may name any process). Any other process is kPermissionDenied, before
  // its descriptor is opened.
  static Result<std::unique_ptr<SharedKvMapping>> open(HostDevice& device,
                                                       const SharedKvMemory& memory,
                                                       const KvLayout& layout, uid_t client_uid);
  ~SharedKvMapping();
  SharedKvMapping(const SharedKvMapping&) = delete;
  SharedKvMapping& operator=(const SharedKvMapping&) = delete;

  const KvCacheAddresses& addresses() const { return addresses_; }
  void retain_forever() { retained_ = true; }

 private:
  SharedKvMapping(HostDevice& device, void* base, size_t bytes)
      : device_(device), base_(base), bytes_(bytes) {}

  HostDevice& device_;
  void* base_;
  size_t bytes_;
  KvCacheAddresses addresses_;
  bool retained_ = false;
};

}  // namespace kvtier::server
