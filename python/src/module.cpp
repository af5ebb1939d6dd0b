// The `kvtier` module: its exceptions, its plain result types, the exception translation and the
// value conversions every binding shares.
#include <pybind11/eval.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "binding.h"
#include "kv_memory.h"
#include "kvtier/connector/connector_counter_names.h"
#include "kvtier/device/device_fault.h"

namespace kvtier::python {
namespace {

// Defined in Python so that they are ordinary classes: picklable, printable, comparable.
constexpr const char* kTypesSource = R"PY(
import collections as _collections

class Error(Exception):
    """A kvtier error. ``code`` is kvtier's error code ("invalid_argument", "not_found",
    "resource_exhausted", "failed_precondition", "device_fault", "deadline_exceeded",
    "unavailable", "unimplemented", "internal"); ``message`` says what failed."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class FailStop(Exception):
    """F7: a transfer's copies cannot be proven to have stopped (Unprovable), a rank
    fail-stopped, or a job outlived its deadline. The engine must stop serving: its KV memory
    may still be written. Not a subclass of Error, so ``except kvtier.Error`` never hides it.
    ``reason`` says why."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason

    def __reduce__(self):
        return (type(self), (self.reason,))


Match = _collections.namedtuple("Match", "tokens ask_later")
Match.__doc__ = """get_num_new_matched_tokens' answer: ``tokens`` beyond num_computed that a
load would provide; ``ask_later``: a chunk it needs is being stored or loaded, ask next step."""

ScheduledRequest = _collections.namedtuple(
    "ScheduledRequest", "id tokens num_prompt_tokens new_blocks num_computed_after_step")
ScheduledRequest.__doc__ = """One request a step computes (build_step_metadata). ``tokens``:
every token known so far; ``new_blocks``: blocks appended to its block table since the connector
last saw it (one list per group, or one flat list for a single group);
``num_computed_after_step``: tokens whose KV is in the cache once the step ran."""

LoadFinished = _collections.namedtuple("LoadFinished", "request num_computed outcome")
LoadFinished.__doc__ = """A load that ended: the request now has ``num_computed`` tokens of KV
and computes from there (F4). ``outcome``: "completed" or "failed"."""

StepOutcome = _collections.namedtuple("StepOutcome", "loads released")
StepOutcome.__doc__ = """update_from_worker_output's answer: ``loads`` (LoadFinished) that
ended this step, and ``released``: finished requests whose last transfer ended, whose blocks
the engine may free now."""

JobVerdict = _collections.namedtuple("JobVerdict", "job outcome error")
JobVerdict.__doc__ = """One job's verdict on one rank: ``outcome`` "completed", "failed" or
"unprovable"; ``error`` empty when completed."""

WorkerOutput = _collections.namedtuple(
    "WorkerOutput", "rank finished invalid_blocks fail_stop fail_stop_reason")
WorkerOutput.__doc__ = """One rank's report for one step: ``finished`` verdicts (JobVerdict),
``invalid_blocks``: destination blocks of its failed loads, per group (F4); ``fail_stop``: the
rank saw an Unprovable transfer (F7)."""

TransferJob = _collections.namedtuple("TransferJob", "job request chunks")
TransferJob.__doc__ = """A load or store of one request (StepMetadata.loads / .stores)."""

ChunkTransfer = _collections.namedtuple("ChunkTransfer", "group blocks slot first_block")
ChunkTransfer.__doc__ = """One chunk of a job: device ``blocks`` of ``group`` <-> host ``slot``."""

LookupReply = _collections.namedtuple("LookupReply", "hits pending lock")
LookupReply.__doc__ = """CacheClient.lookup's answer: ``hits`` leading keys are ready in kvtierd;
``pending``: the next key is being stored or fetched from a lower tier (ask again later);
``lock``: the read lock on the hits (0: none), for retrieve() or release()."""
)PY";

PyTypes* g_types = nullptr;

}  // namespace

const PyTypes& types() {
  return *g_types;
}

void init_types(py::module_& m) {
  py::dict scope = m.attr("__dict__");
  py::exec(kTypesSource, scope);
  // Never freed: the module's classes live as long as the interpreter.
  g_types = new PyTypes{
      .error = m.attr("Error"),
      .fail_stop = m.attr("FailStop"),
      .match = m.attr("Match"),
      .load_finished = m.attr("LoadFinished"),
      .step_outcome = m.attr("StepOutcome"),
      .job_verdict = m.attr("JobVerdict"),
      .worker_output = m.attr("WorkerOutput"),
      .transfer_job = m.attr("TransferJob"),
      .chunk_transfer = m.attr("ChunkTransfer"),
      .lookup_reply = m.attr("LookupReply"),
  };
  py::delattr(m, "_collections");
}

namespace {

void set_error(ErrorCode code, const char* message) {
  py::object e = types().error(std::string(to_string(code)), message);
  PyErr_SetObject(types().error.ptr(), e.ptr());
}

}  // namespace

GroupBlocks to_group_blocks(py::handle blocks, size_t groups, const char* what) {
  GroupBlocks out;
  try {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(blocks);
    const bool flat = seq.size() == 0 || !py::isinstance<py::sequence>(seq[0]);
    if (flat) {
      if (groups != 1 && seq.size() != 0) {
        throw KvError(ErrorCode::kInvalidArgument, std::string(what) +
                                                       ": one list of blocks per group (" +
                                                       std::to_string(groups) + " groups)");
      }
      out.assign(groups, {});
      if (groups == 1) out[0] = blocks.cast<std::vector<uint32_t>>();
      return out;
    }
    out = blocks.cast<GroupBlocks>();
  } catch (const py::cast_error&) {
    throw KvError(ErrorCode::kInvalidArgument,
                  std::string(what) +
                      ": expected a list of block ids (non-negative ints), or "
                      "one such list per group");
  } catch (const py::error_already_set& e) {
    // Not a sequence at all (an int, a set): len() or [0] raised in Python.
    throw KvError(ErrorCode::kInvalidArgument,
                  std::string(what) + ": expected a list of block ids, or one list per group (" +
                      e.what() + ")");
  }
  if (out.size() != groups) {
    throw KvError(ErrorCode::kInvalidArgument, std::string(what) + ": " +
                                                   std::to_string(out.size()) +
                                                   " groups, the "
                                                   "layout has " +
                                                   std::to_string(groups));
  }
  return out;
}

py::list from_group_blocks(const GroupBlocks& blocks) {
  py::list out;
  for (const std::vector<uint32_t>& g : blocks) out.append(py::cast(g));
  return out;
}

std::vector<TokenId> to_tokens(py::handle tokens, const char* what) {
  // A numpy array of 32-bit token ids (or any such buffer) is copied at once.
  if (PyObject_CheckBuffer(tokens.ptr()) && !py::isinstance<py::bytes>(tokens) &&
      !py::isinstance<py::bytearray>(tokens)) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(tokens).request();
    const bool u32 = info.format == "I" || info.format == "=I" || info.format == "<I";
    const bool i32 = info.format == "i" || info.format == "=i" || info.format == "<i";
    if (info.ndim == 1 && info.itemsize == 4 && (u32 || i32) && info.strides[0] == info.itemsize) {
      const auto* p = static_cast<const TokenId*>(info.ptr);
      std::vector<TokenId> out(p, p + info.size);
      if (i32 && std::any_of(out.begin(), out.end(), [](TokenId t) { return t >> 31; })) {
        throw KvError(ErrorCode::kInvalidArgument, std::string(what) + ": negative token id");
      }
      return out;
    }
  }
  try {
    // A torch tensor or numpy array of token ids converts through tolist().
    if (py::hasattr(tokens, "tolist") && !py::isinstance<py::list>(tokens)) {
      return tokens.attr("tolist")().cast<std::vector<TokenId>>();
    }
    return tokens.cast<std::vector<TokenId>>();
  } catch (const py::cast_error&) {
    throw KvError(ErrorCode::kInvalidArgument,
                  std::string(what) + ": expected a sequence of token ids (ints in [0, 2^32))");
  }
}

namespace {

Outcome to_outcome(const std::string& name) {
  for (Outcome o : {Outcome::kCompleted, Outcome::kFailed, Outcome::kUnprovable}) {
    if (to_string(o) == name) return o;
  }
  throw KvError(ErrorCode::kInvalidArgument,
                "outcome '" + name + "': expected completed, failed or unprovable");
}

}  // namespace

WorkerOutput to_worker_output(py::handle output) {
  WorkerOutput out;
  try {
    out.rank = output.attr("rank").cast<uint32_t>();
    for (py::handle v : output.attr("finished")) {
      out.finished.push_back(
          JobVerdict{.job = v.attr("job").cast<JobId>(),
                     .outcome = to_outcome(v.attr("outcome").cast<std::string>()),
                     .error = v.attr("error").cast<std::string>()});
    }
    out.invalid_blocks = output.attr("invalid_blocks").cast<GroupBlocks>();
    out.fail_stop = output.attr("fail_stop").cast<bool>();
    out.fail_stop_reason = output.attr("fail_stop_reason").cast<std::string>();
  } catch (const py::error_already_set& e) {
    throw KvError(ErrorCode::kInvalidArgument,
                  std::string("worker output: expected a kvtier.WorkerOutput (") + e.what() + ")");
  } catch (const py::cast_error& e) {
    throw KvError(ErrorCode::kInvalidArgument,
                  std::string("worker output: expected a kvtier.WorkerOutput (") + e.what() + ")");
  }
  return out;
}

py::object from_worker_output(const WorkerOutput& output) {
  py::list finished;
  for (const JobVerdict& v : output.finished) {
    finished.append(types().job_verdict(v.job, std::string(to_string(v.outcome)), v.error));
  }
  return types().worker_output(output.rank, finished, from_group_blocks(output.invalid_blocks),
                               output.fail_stop, output.fail_stop_reason);
}

py::dict counters_dict(const ConnectorCounters& c) {
  py::dict d;
  visit_counters(c, [&](const char* name, uint64_t value, CounterKind) { d[name] = value; });
  return d;
}

py::dict counters_dict(const CacheCounters& c) {
  py::dict d;
  visit_counters(c, [&](const char* name, uint64_t value, CounterKind) { d[name] = value; });
  return d;
}

}  // namespace kvtier::python

PYBIND11_MODULE(kvtier, m) {
  using namespace kvtier::python;
  m.doc() =
      "kvtier: KV-cache offload for LLM inference. The connector's scheduler side "
      "(Scheduler) and worker side (Worker, over KV caches held in PyTorch tensors or any "
      "buffer), a kvtierd client (CacheClient, with the tiers' status), its configuration "
      "(Config) and counters. docs/python.md describes the API.";
  m.attr("__version__") = KVTIER_VERSION;
  init_types(m);

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const KvError& e) {
      set_error(e.code(), e.what());
    } catch (const FailStopError& e) {
      py::object f = types().fail_stop(std::string(e.what()));
      PyErr_SetObject(types().fail_stop.ptr(), f.ptr());
    } catch (const kvtier::DeviceFault& e) {
      set_error(kvtier::ErrorCode::kDeviceFault, e.what());
    } catch (const std::invalid_argument& e) {
      // kvtier's programming errors (bad arguments) carry no code of their own.
      set_error(kvtier::ErrorCode::kInvalidArgument, e.what());
    }
  });

  bind_config(m);
  bind_kv_memory(m);
  bind_scheduler(m);
  bind_worker(m);
  bind_cache_client(m);
}
