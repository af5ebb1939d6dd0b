#include "kv_cache_buffers.h"

#include <cstdint>
#include <functional>
#include <numeric>
#include <string>

namespace kvtier::python {
namespace {

std::string shape_text(const std::vector<size_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

size_t product(const std::vector<size_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), size_t{1}, std::multiplies<>());
}

std::vector<size_t> to_shape(py::handle shape) {
  return shape.cast<std::vector<size_t>>();
}

// C-contiguous strides in bytes; strides of extent-1 dimensions do not matter.
bool c_contiguous(const std::vector<size_t>& shape, const std::vector<ssize_t>& strides,
                  size_t itemsize) {
  if (strides.size() != shape.size()) return false;
  ssize_t expected = static_cast<ssize_t>(itemsize);
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= static_cast<ssize_t>(shape[i]);
  }
  return true;
}

}  // namespace

KvCacheBuffer::KvCacheBuffer(py::handle obj, const std::vector<size_t>& shape, size_t itemsize,
                             std::string what)
    : what_(std::move(what)), obj_(py::reinterpret_borrow<py::object>(obj)), shape_(shape) {
  try {
    if (py::hasattr(obj, "data_ptr") && py::hasattr(obj, "element_size") &&
        py::hasattr(obj, "is_contiguous")) {
      from_torch(shape, itemsize);
    } else if (PyObject_CheckBuffer(obj.ptr())) {
      from_buffer(shape, itemsize);
    } else if (py::hasattr(obj, "__array_interface__")) {
      from_array_interface(shape, itemsize);
    } else {
      bad("expected a torch.Tensor, a buffer (e.g. numpy array) or an object with "
          "__array_interface__, got " +
          std::string(py::str(py::type::of(obj).attr("__name__"))));
    }
  } catch (const py::error_already_set& e) {
    bad(e.what());
  } catch (const py::cast_error& e) {
    bad(e.what());
  }
  if (bytes_ == 0 || data_ == nullptr) bad("empty");
}

KvCacheBuffer::~KvCacheBuffer() {
  release();
}

void KvCacheBuffer::bad(const std::string& why) const {
  throw KvError(ErrorCode::kInvalidArgument, what_ + ": " + why);
}

void KvCacheBuffer::from_torch(const std::vector<size_t>& shape, size_t itemsize) {
  kind_ = Kind::kTorch;
  const std::string device = py::str(obj_.attr("device").attr("type"));
  if (device != "cpu") bad("a " + device + " tensor; the Python module registers CPU tensors");
  if (std::string(py::str(obj_.attr("layout"))) != "torch.strided") bad("not a strided tensor");
  const std::vector<size_t> got = to_shape(obj_.attr("shape"));
  if (got != shape) bad("shape " + shape_text(got) + ", the layout needs " + shape_text(shape));
  const size_t element = obj_.attr("element_size")().cast<size_t>();
  if (element != itemsize) {
    bad(std::to_string(element) + "-byte elements (" + std::string(py::str(obj_.attr("dtype"))) +
        "), layout.dtype_bytes is " + std::to_string(itemsize));
  }
  if (!obj_.attr("is_contiguous")().cast<bool>()) bad("not contiguous");
  data_ = reinterpret_cast<void*>(obj_.attr("data_ptr")().cast<uintptr_t>());
  bytes_ = product(shape) * itemsize;
  // The storage object keeps the memory alive even if the tensor is later set_() to another.
  storage_ = py::hasattr(obj_, "untyped_storage") ? obj_.attr("untyped_storage")()
                                                  : obj_.attr("storage")();
}

void KvCacheBuffer::from_buffer(const std::vector<size_t>& shape, size_t itemsize) {
  kind_ = Kind::kBuffer;
  py::buffer buffer = py::reinterpret_borrow<py::buffer>(obj_);
  try {
    view_ = std::make_unique<py::buffer_info>(buffer.request(/*writable=*/true));
  } catch (const py::error_already_set& e) {
    bad(std::string("not a writable buffer (") + e.what() + ")");
  } catch (const py::buffer_error& e) {
    bad(std::string("not a writable buffer (") + e.what() + ")");
  }
  const size_t want = product(shape) * itemsize;
  std::vector<size_t> got(view_->shape.begin(), view_->shape.end());
  const bool raw_bytes = view_->ndim == 1 && view_->itemsize == 1 &&
                         (view_->format == "B" || view_->format == "b" || view_->format == "c") &&
                         static_cast<size_t>(view_->size) == want;
  if (!raw_bytes) {
    if (got != shape) bad("shape " + shape_text(got) + ", the layout needs " + shape_text(shape));
    if (static_cast<size_t>(view_->itemsize) != itemsize) {
      bad(std::to_string(view_->itemsize) + "-byte elements, layout.dtype_bytes is " +
          std::to_string(itemsize));
    }
  }
  if (!c_contiguous(got, view_->strides, view_->itemsize)) bad("not C-contiguous");
  if (view_->readonly) bad("read-only");
  data_ = view_->ptr;
  bytes_ = want;
}

void KvCacheBuffer::from_array_interface(const std::vector<size_t>& shape, size_t itemsize) {
  kind_ = Kind::kArrayInterface;
  py::dict ai = obj_.attr("__array_interface__");
  const std::vector<size_t> got = to_shape(ai["shape"]);
  if (got != shape) bad("shape " + shape_text(got) + ", the layout needs " + shape_text(shape));
  const std::string typestr = py::str(ai["typestr"]);
  const size_t element = typestr.size() > 2 ? std::stoul(typestr.substr(2)) : 0;
  if (element != itemsize) {
    bad("typestr " + typestr + ", layout.dtype_bytes is " + std::to_string(itemsize));
  }
  if (ai.contains("strides") && !ai["strides"].is_none()) {
    if (!c_contiguous(got, ai["strides"].cast<std::vector<ssize_t>>(), element)) {
      bad("not C-contiguous");
    }
  }
  py::tuple data = ai["data"];
  if (data[1].cast<bool>()) bad("read-only");
  data_ = reinterpret_cast<void*>(data[0].cast<uintptr_t>());
  bytes_ = product(shape) * itemsize;
}

std::string KvCacheBuffer::changed() const {
  // Local copies: the attributes read below may run Python code, and that code may release()
  // this buffer (by closing its Worker).
  const py::object obj = obj_;
  if (!obj) return what_ + ": released";
  const size_t itemsize = view_ ? view_->itemsize : 0;
  try {
    switch (kind_) {
      case Kind::kTorch: {
        if (reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>()) != data_) {
          return what_ + ": the tensor's memory moved (set_ or resize_ while registered)";
        }
        if (to_shape(obj.attr("shape")) != shape_ || !obj.attr("is_contiguous")().cast<bool>()) {
          return what_ + ": the tensor was reshaped in place while registered";
        }
        return {};
      }
      case Kind::kBuffer:
        // The export we hold keeps a bytearray or mmap from resizing; numpy does not honor it
        // when told not to check (resize(refcheck=False)), so look at where its data is.
        if (!py::hasattr(obj, "__array_interface__")) return {};
        [[fallthrough]];
      case Kind::kArrayInterface: {
        py::dict ai = obj.attr("__array_interface__");
        py::tuple data = ai["data"];
        if (reinterpret_cast<void*>(data[0].cast<uintptr_t>()) != data_ ||
            (kind_ == Kind::kArrayInterface && to_shape(ai["shape"]) != shape_) ||
            (kind_ == Kind::kBuffer && product(to_shape(ai["shape"])) * itemsize != bytes_)) {
          return what_ + ": the array's memory moved (resized while registered)";
        }
        return {};
      }
    }
  } catch (const py::error_already_set& e) {
    return what_ + ": " + e.what();
  }
  return {};
}

void KvCacheBuffer::release() {
  view_.reset();
  storage_ = py::object();
  obj_ = py::object();
}

}  // namespace kvtier::python
