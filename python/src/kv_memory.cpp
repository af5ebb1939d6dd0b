#include "kv_memory.h"

#include <cstdint>

namespace kvtier::python {

void bind_kv_memory(py::module_& m) {
  py::class_<KvMemory>(m, "KvMemory", py::buffer_protocol(),
                       "One KV-cache tensor's bytes in the shared memory kvtierd maps (a Worker "
                       "with cache.mode server, a CacheClient), as a writable buffer: "
                       "torch.frombuffer(memory, dtype=...).view(shape). The memory stays mapped "
                       "while this object is referenced.")
      .def_buffer([](KvMemory& k) {
        return py::buffer_info(k.data, 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<ssize_t>(k.bytes)}, {ssize_t{1}});
      })
      .def("__len__", [](const KvMemory& k) { return k.bytes; });
}

}  // namespace kvtier::python
