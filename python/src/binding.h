// Shared parts of the `kvtier` Python module: how kvtier's errors become Python exceptions, the
// plain Python types (named tuples) that verdicts and outcomes come back as, and the conversions
// between them and the connector's C++ values.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kvtier/kvtier.h"

namespace kvtier::python {

namespace py = pybind11;

// A kvtier error on its way to Python: raised as kvtier.Error with `code` (to_string(ErrorCode)).
class KvError : public std::runtime_error {
 public:
  KvError(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  explicit KvError(const Error& error) : KvError(error.code, error.message) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// F7 on its way to Python: raised as kvtier.FailStop.
class FailStopError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void check(const Status& status) {
  if (!status) throw KvError(status.error());
}
template <class T>
T value_or_raise(Result<T> result) {
  if (!result) throw KvError(result.error());
  return std::move(*result);
}

// The Python classes the module defines in Python (exceptions, named tuples); made once at
// import and never freed (they live as long as the interpreter's module does).
struct PyTypes {
  py::object error;      // kvtier.Error
  py::object fail_stop;  // kvtier.FailStop
  py::object match;
  py::object load_finished;
  py::object step_outcome;
  py::object job_verdict;
  py::object worker_output;
  py::object transfer_job;
  py::object chunk_transfer;
  py::object lookup_reply;
};
const PyTypes& types();
void init_types(py::module_& m);

// Conversions between Python values and the connector's C++ values. A bad value is
// kvtier.Error(invalid_argument) naming `what`.
GroupBlocks to_group_blocks(py::handle blocks, size_t groups, const char* what);
py::list from_group_blocks(const GroupBlocks& blocks);
std::vector<TokenId> to_tokens(py::handle tokens, const char* what);
WorkerOutput to_worker_output(py::handle output);
py::object from_worker_output(const WorkerOutput& output);
py::dict counters_dict(const ConnectorCounters& c);
py::dict counters_dict(const CacheCounters& c);

// StepMetadata as bytes, so that an engine can send it to worker processes (pickle uses it).
std::string encode_step_metadata(const StepMetadata& metadata);
StepMetadata decode_step_metadata(std::string_view bytes);

// Slots of the local host cache the config holds: cache.host_bytes / the chunk size.
uint32_t default_host_slots(const Config& config);

void bind_config(py::module_& m);
void bind_scheduler(py::module_& m);
void bind_worker(py::module_& m);
void bind_cache_client(py::module_& m);

}  // namespace kvtier::python
