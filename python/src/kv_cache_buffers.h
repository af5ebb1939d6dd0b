// KvCacheBuffer: one KV-cache tensor an engine registers with a Worker, zero-copy. A PyTorch
// tensor (CPU, strided, contiguous), any object with the buffer protocol (a numpy array, an
// mmap), or any object with __array_interface__. The buffer holds a reference to the object
// (and, for the buffer protocol, the export itself, which keeps numpy and bytearray from
// resizing), so the memory cannot be freed while registered; changed() sees a tensor whose
// memory moved anyway (resize_, set_) before another copy is submitted. Needs the GIL.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "binding.h"

namespace kvtier::python {

class KvCacheBuffer {
 public:
  // kvtier.Error(invalid_argument) naming `what` unless `obj` is writable CPU memory of exactly
  // `shape` (C-contiguous) with `itemsize`-byte elements, or a 1-D byte buffer of that size.
  KvCacheBuffer(py::handle obj, const std::vector<size_t>& shape, size_t itemsize,
                std::string what);
  ~KvCacheBuffer();
  KvCacheBuffer(const KvCacheBuffer&) = delete;
  KvCacheBuffer& operator=(const KvCacheBuffer&) = delete;

  void* data() const { return data_; }
  py::object object() const { return obj_; }
  size_t bytes() const { return bytes_; }
  // Why the object no longer is the memory that was registered (empty while it is).
  std::string changed() const;
  // Drops the references (the object may be freed after this).
  void release();

 private:
  enum class Kind { kTorch, kBuffer, kArrayInterface };

  void from_torch(const std::vector<size_t>& shape, size_t itemsize);
  void from_buffer(const std::vector<size_t>& shape, size_t itemsize);
  void from_array_interface(const std::vector<size_t>& shape, size_t itemsize);
  [[noreturn]] void bad(const std::string& why) const;

  Kind kind_ = Kind::kBuffer;
  std::string what_;
  py::object obj_;
  py::object storage_;  // torch: the storage, alive even if the tensor is pointed elsewhere
  std::unique_ptr<py::buffer_info> view_;
  std::vector<size_t> shape_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kvtier::python
