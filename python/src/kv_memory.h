// kvtier.KvMemory: one KV-cache tensor's bytes in shared memory that kvtierd maps (a Worker with
// cache.mode server, a CacheClient), as a writable 1-D byte buffer an engine builds a tensor over
// (torch.frombuffer). `owner` is whatever keeps the memory mapped (and its kvtierd client alive):
// the memory stays valid while the KvMemory, or a tensor over it, is referenced.
#pragma once

#include <cstddef>
#include <memory>

#include "binding.h"

namespace kvtier::python {

struct KvMemory {
  std::shared_ptr<const void> owner;
  void* data = nullptr;
  size_t bytes = 0;
};

void bind_kv_memory(py::module_& m);

}  // namespace kvtier::python
