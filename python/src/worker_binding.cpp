// kvtier.Worker: one rank's worker side of the connector for the local host cache, over KV
// caches the engine holds (PyTorch tensors or buffers), zero-copy. The rank's "device" is a
// HostDevice (copies on its own threads) behind the FaultInjectingDevice that the config's
// faults section drives, as in kvtier's own engine; the KV memory is adopted, never copied.
//
// The engine's forward pass runs on the host, outside the device's compute stream. So that F10
// holds, start_load returns only once the compute stream passed the step's flush fences: when it
// returns, the forward pass may write every block. Every call that can wait releases the GIL.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "binding.h"
#include "kv_cache_buffers.h"
#include "kv_memory.h"
#include "kvtier/connector/local_worker_connector.h"

namespace kvtier::python {
namespace {

py::dict stats_dict(const TransferStats& s) {
  py::dict d;
  d["submitted"] = s.submitted;
  d["completed"] = s.completed;
  d["failed"] = s.failed;
  d["unprovable"] = s.unprovable;
  d["bytes_completed"] = s.bytes_completed;
  d["descriptors_submitted"] = s.descriptors_submitted;
  d["copy_calls"] = s.copy_calls;
  return d;
}

py::dict fault_dict(const InjectedFaultCounts& c) {
  py::dict d;
  d["copy_calls"] = c.copy_calls;
  d["submit_failures"] = c.submit_failures;
  d["latched_errors"] = c.latched_errors;
  d["query_faults"] = c.query_faults;
  d["record_failures"] = c.record_failures;
  d["hangs"] = c.hangs;
  d["delays"] = c.delays;
  d["non_device_errors"] = c.non_device_errors;
  return d;
}

uint32_t leading_extent(py::handle obj, const char* what) {
  py::tuple shape;
  if (py::hasattr(obj, "shape")) {
    shape = py::tuple(obj.attr("shape"));
  } else if (py::hasattr(obj, "__array_interface__")) {
    shape = py::tuple(obj.attr("__array_interface__")["shape"]);
  } else {
    throw KvError(ErrorCode::kInvalidArgument,
                  std::string(what) + ": has no shape; pass num_blocks");
  }
  if (shape.size() == 0) throw KvError(ErrorCode::kInvalidArgument, std::string(what) + ": 0-d");
  return shape[0].cast<uint32_t>();
}

// cache.mode server: the rank's worker side and the shared memory its KV caches live in (which
// kvtierd maps). Owned jointly by the Worker and every KvMemory the engine wraps in tensors, so
// that the memory stays mapped while a tensor over it exists.
struct RemoteKv {
  std::unique_ptr<WorkerConnector> connector;
};

class Worker {
 public:
  Worker(const Config& config, py::object kv_caches, uint32_t rank, uint32_t world_size,
         std::optional<uint32_t> num_blocks, std::optional<uint32_t> host_slots)
      : layout_(config.kv_layout()),
        fault_(host_, fault_plan_from_config(config.faults, rank)),
        connector_(rank, config.connector.transfer_granularity, config.connector.load_in_step) {
    if (!config.connector.enabled) {
      throw KvError(ErrorCode::kFailedPrecondition,
                    "connector.enabled is false: there is no worker side (run the engine "
                    "without kvtier)");
    }
    if (rank >= world_size) {
      throw KvError(
          ErrorCode::kInvalidArgument,
          "rank " + std::to_string(rank) + " of world_size " + std::to_string(world_size));
    }
    if (config.cache.mode == CacheMode::kServer) {
      init_remote(config, kv_caches, rank, world_size, num_blocks);
      return;
    }
    if (kv_caches.is_none() || !py::isinstance<py::sequence>(kv_caches)) {
      throw KvError(ErrorCode::kInvalidArgument, "kv_caches: a sequence of tensors");
    }
    init_local(config, py::reinterpret_borrow<py::sequence>(kv_caches), num_blocks, host_slots);
  }

  void init_remote(const Config& config, py::object kv_caches, uint32_t rank, uint32_t world_size,
                   std::optional<uint32_t> num_blocks) {
    if (!kv_caches.is_none()) {
      throw KvError(ErrorCode::kInvalidArgument,
                    "cache.mode server: the KV caches live in shared memory kvtierd maps; pass "
                    "kv_caches=None and num_blocks, and build the tensors over worker.kv_caches");
    }
    if (!num_blocks || *num_blocks == 0) {
      throw KvError(ErrorCode::kInvalidArgument, "cache.mode server: pass num_blocks");
    }
    num_blocks_ = *num_blocks;
    remote_ = std::make_shared<RemoteKv>();
    const ConnectorShape shape{.world_size = world_size, .layout = layout_};
    {
      py::gil_scoped_release release;  // waits server.connect_timeout_s at most for kvtierd
      remote_->connector = ConnectorFactory(config, shape)
                               .worker(WorkerSetup{.rank = rank, .device_blocks = num_blocks_});
    }
    const KvGroup& g = layout_.groups.at(0);
    const bool per_layer = layout_.device_layout == DeviceLayout::kPerLayer;
    const size_t bytes =
        size_t{num_blocks_} * (per_layer ? g.layer_block_bytes() : g.block_bytes());
    for (DeviceAddress base : remote_->connector->kv_caches().groups.at(0).bases) {
      memory_.append(py::cast(KvMemory{remote_, reinterpret_cast<void*>(base), bytes}));
    }
  }

  void init_local(const Config& config, py::sequence kv_caches, std::optional<uint32_t> num_blocks,
                  std::optional<uint32_t> host_slots) {
    const KvGroup& g = layout_.groups.at(0);
    const bool per_layer = layout_.device_layout == DeviceLayout::kPerLayer;
    const size_t tensors = per_layer ? g.layers : 1;
    if (py::len(kv_caches) != tensors) {
      throw KvError(ErrorCode::kInvalidArgument,
                    "kv_caches: " + std::to_string(py::len(kv_caches)) + " tensors, the " +
                        std::string(to_string(layout_.device_layout)) + " layout needs " +
                        std::to_string(tensors));
    }
    num_blocks_ = num_blocks ? *num_blocks : leading_extent(kv_caches[0], "kv_caches[0]");
    if (num_blocks_ == 0) throw KvError(ErrorCode::kInvalidArgument, "kv_caches: 0 blocks");
    std::vector<size_t> shape = {num_blocks_, 2, g.block_size, g.kv_heads, g.head_dim};
    if (!per_layer) shape.insert(shape.begin() + 1, g.layers);

    GroupCacheAddresses group{.num_blocks = num_blocks_};
    for (size_t i = 0; i < tensors; ++i) {
      buffers_.push_back(std::make_shared<KvCacheBuffer>(kv_caches[i], shape, g.dtype_bytes,
                                                         "kv_caches[" + std::to_string(i) + "]"));
      group.bases.push_back(
          host_.adopt_device_memory(buffers_.back()->data(), buffers_.back()->bytes()));
      adopted_.push_back(buffers_.back()->data());
    }
    slots_ = host_slots ? *host_slots : default_host_slots(config);
    auto pool = HostPool::create(fault_, layout_.max_chunk_bytes(), slots_);
    if (!pool) throw KvError(pool.error());
    pool_ = std::move(*pool);
    compute_ = fault_.create_stream();
    fence_ = fault_.create_event();
    connector_.register_kv_caches(fault_, layout_, KvCacheAddresses{.groups = {group}},
                                  HostSlots{pool_->slot_address(0), pool_->slot_bytes(), slots_},
                                  compute_, transfer_options(config.transfer));
    transfer_deadline_ = transfer_options(config.transfer).deadline;
  }

  ~Worker() { close(); }

  WorkerConnector& conn() {
    if (remote_) return *remote_->connector;
    return connector_;
  }

  void start_load(const StepMetadata& meta) {
    check_usable();
    py::gil_scoped_release release;
    const std::unique_lock lock = lock_open();
    try {
      conn().start_load(meta);
    } catch (const std::invalid_argument&) {
      // A job refused: the rest of the step was started (the flush set's fences among it), and
      // the engine goes on, so its fences are waited for all the same before this raises.
      fence_forward_pass(meta);
      throw;
    }
    fence_forward_pass(meta);
  }

  // Layer-wise (connector.transfer_granularity: layer; no-ops otherwise and with kvtierd).
  void wait_for_layer_load(uint32_t layer) {
    check_usable();
    check_layer(layer);
    py::gil_scoped_release release;
    const std::unique_lock lock = lock_open();
    conn().wait_for_layer_load(KvLayer{.group = 0, .layer = layer});
    if (!remote_ && connector_.granularity() == TransferGranularity::kLayer) {
      // The forward pass runs on the host: wait here for what the compute stream now waits
      // for (the layer's loads, F10).
      wait_for_compute();
    }
  }

  void save_layer(uint32_t layer) {
    check_usable();
    check_layer(layer);
    py::gil_scoped_release release;
    const std::unique_lock lock = lock_open();
    conn().save_layer(KvLayer{.group = 0, .layer = layer});
  }

  void queue_stores(const StepMetadata& meta) {
    check_usable();
    py::gil_scoped_release release;
    const std::unique_lock lock = lock_open();
    conn().queue_stores(meta);
  }

  py::object take_output() {
    check_open();
    WorkerOutput out;
    {
      py::gil_scoped_release release;
      const std::unique_lock lock = lock_open();
      out = conn().take_output();
    }
    return from_worker_output(out);
  }

  void drain() {
    check_usable();  // it submits the stores queued for the next step
    py::gil_scoped_release release;
    const std::unique_lock lock = lock_open();
    if (remote_) {
      // kvtierd's verdicts arrive with take_output; yield instead of spinning.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    connector_.flush({});  // stores queued for the next step go now
    fault_.release_hangs();
    host_.quiesce();
  }

  bool fail_stopped() {
    check_open();
    py::gil_scoped_release release;  // another thread may hold the lock across a long call
    const std::unique_lock lock = lock_open();
    return conn().fail_stopped();
  }
  size_t in_flight() {
    check_open();
    py::gil_scoped_release release;
    const std::unique_lock lock = lock_open();
    return conn().in_flight();
  }
  void audit() {
    check_open();
    Status s;
    {
      py::gil_scoped_release release;
      const std::unique_lock lock = lock_open();
      s = conn().audit();
    }
    check(s);
  }
  py::dict stats() {
    check_open();
    TransferStats s;
    {
      py::gil_scoped_release release;
      const std::unique_lock lock = lock_open();
      if (!remote_) s = connector_.engine().stats();
    }
    return stats_dict(s);
  }
  py::dict fault_counts() { return fault_dict(fault_.counts()); }
  py::list kv_caches() const {
    if (!memory_.empty()) return memory_;  // cache.mode server (remote_ is close()'s, under mu_)
    py::list out;
    for (const auto& b : buffers_) out.append(b->object());
    return out;
  }

  // Waits for every copy to end, then forgets the KV caches (their references are dropped).
  void close() {
    if (closed_.exchange(true)) return;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mu_);
      // kvtierd's copies end first: each of its transfers has its verdict by its deadline (F8),
      // which drops it from in_flight(); the verdicts are not wanted any more.
      if (remote_) {
        WorkerConnector& remote = *remote_->connector;
        while (remote.in_flight() > 0) {
          (void)remote.take_output();
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      // kvtierd's side lives on while a KvMemory (a tensor over it) does.
      remote_.reset();
      fault_.release_hangs();
      host_.quiesce();
      connector_ = LocalWorkerConnector(connector_.rank(), connector_.granularity(),
                                        connector_.loads_in_step());  // its engine goes first
      pool_.reset();
      for (void* p : adopted_) host_.release_adopted_memory(p);
      adopted_.clear();
    }
    // Releasing a buffer may run Python code (a finalizer) that calls this Worker again.
    const std::vector<std::shared_ptr<KvCacheBuffer>> buffers = std::exchange(buffers_, {});
    for (const auto& b : buffers) b->release();
    memory_ = py::list();
  }

  uint32_t rank() const { return connector_.rank(); }
  uint32_t num_blocks() const { return num_blocks_; }
  uint32_t host_slots() const { return slots_; }
  const KvLayout& layout() const { return layout_; }
  bool closed() const { return closed_; }

 private:
  void check_open() const {
    if (closed_) throw KvError(ErrorCode::kFailedPrecondition, "the Worker is closed");
  }
  // mu_, for a call that found the Worker open: close() may have run since (on another thread,
  // or from Python code that check_usable ran), so it is checked again under the lock.
  std::unique_lock<std::mutex> lock_open() {
    std::unique_lock lock(mu_);
    check_open();
    return lock;
  }
  // Before copies are submitted: the registered memory is still what the engine's tensors
  // hold. Once it is not, the worker refuses every further copy (they would miss the tensors).
  // The checks run Python code (attributes of the registered objects), which may close this
  // Worker: they go over a copy of the buffers, and the Worker must still be open after them.
  void check_usable() {
    check_open();
    if (stuck_set_.load(std::memory_order_acquire)) throw FailStopError(stuck_);
    if (moved_.empty()) {
      const std::vector<std::shared_ptr<KvCacheBuffer>> buffers = buffers_;
      for (const auto& b : buffers) {
        if (std::string why = b->changed(); !why.empty()) {
          moved_ = why;
          break;
        }
      }
    }
    check_open();
    if (!moved_.empty()) throw KvError(ErrorCode::kFailedPrecondition, moved_);
  }
  // The forward pass runs on the host: start_load waits here for what the pass would wait for
  // on the compute stream (the flush set's fences, F10, and with load_in_step whole-request
  // loads).
  void fence_forward_pass(const StepMetadata& meta) {
    const bool loads_fenced = connector_.granularity() == TransferGranularity::kRequest &&
                              connector_.loads_in_step() && !meta.loads.empty();
    if (!remote_ && (!meta.flush.empty() || loads_fenced)) wait_for_compute();
  }
  // Until the compute stream passed what it waits for now, at most the transfer deadline (F8).
  // Past it, those copies are not ending: the worker fail-stops (F7), and this call and every
  // later one raise kvtier.FailStop, so the engine never runs a forward pass over blocks that
  // the copies may still write or read.
  void wait_for_compute() {
    fault_.record(fence_, compute_);
    const auto deadline = std::chrono::steady_clock::now() + transfer_deadline_;
    auto pause = std::chrono::microseconds(10);
    while (!fault_.query(fence_)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        if (!stuck_set_.load(std::memory_order_relaxed)) {  // written once, under mu_
          stuck_ = "rank " + std::to_string(connector_.rank()) +
                   ": the forward pass's fences did not pass within the transfer deadline (F8): "
                   "copies they wait for may still run";
          stuck_set_.store(true, std::memory_order_release);
        }
        throw FailStopError(stuck_);
      }
      std::this_thread::sleep_for(pause);  // the host device's copies run on other threads
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
  void check_layer(uint32_t layer) const {
    if (layer >= layout_.groups.at(0).layers) {
      throw KvError(ErrorCode::kInvalidArgument,
                    "layer " + std::to_string(layer) + " of a layout with " +
                        std::to_string(layout_.groups.at(0).layers) + " layers");
    }
  }

  std::mutex mu_;
  KvLayout layout_;
  HostDevice host_;
  FaultInjectingDevice fault_;
  std::vector<std::shared_ptr<KvCacheBuffer>> buffers_;
  std::vector<void*> adopted_;
  std::unique_ptr<HostPool> pool_;
  LocalWorkerConnector connector_;
  StreamHandle compute_{};
  EventHandle fence_{};
  uint32_t num_blocks_ = 0;
  uint32_t slots_ = 0;
  std::atomic<bool> closed_ = false;  // set by close() before it takes mu_
  std::string moved_;                 // why the registered memory is no longer the tensors'
  std::string stuck_;  // why the worker fail-stopped waiting for its fences; once stuck_set_
  std::atomic<bool> stuck_set_{false};  // read without mu_ (check_usable)
  Duration transfer_deadline_{};
  std::shared_ptr<RemoteKv> remote_;  // cache.mode server
  py::list memory_;                   // cache.mode server: KvMemory per tensor
};

}  // namespace

void bind_worker(py::module_& m) {
  py::class_<Worker>(
      m, "Worker",
      "One rank's worker side of the connector (cache.mode local), over the rank's KV caches, "
      "zero-copy.\n\n"
      "Each step the rank calls, in order: start_load(metadata) before its forward pass, "
      "(layer-wise, in the forward pass: wait_for_layer_load(l) before layer l's attention, "
      "save_layer(l) after layer l's KV is written), "
      "queue_stores(metadata) after it, take_output() for the verdicts, which go to "
      "Scheduler.update_from_worker_output. Thread-safe (calls are serialized); the GIL is "
      "released while kvtier works. close() (or leaving a `with` block) waits for the copies "
      "and drops the references to the KV caches.")
      .def(py::init<const Config&, py::object, uint32_t, uint32_t, std::optional<uint32_t>,
                    std::optional<uint32_t>>(),
           py::arg("config"), py::arg("kv_caches"), py::kw_only(), py::arg("rank") = 0,
           py::arg("world_size") = 1, py::arg("num_blocks") = py::none(),
           py::arg("host_slots") = py::none(),
           "`kv_caches`: one tensor per layer (per_layer: [num_blocks, 2, block_size, "
           "kv_heads, head_dim]) or one tensor (cross_layer: [num_blocks, layers, 2, "
           "block_size, kv_heads, head_dim]); CPU, contiguous, layout.dtype_bytes per "
           "element. Any object with the buffer protocol or __array_interface__ works too. "
           "They are registered without a copy and kept referenced until close(). "
           "`host_slots` must match the Scheduler's. cache.mode server (kvtierd): pass "
           "kv_caches=None and num_blocks; the KV caches are allocated in shared memory that "
           "kvtierd maps, and worker.kv_caches holds one KvMemory buffer per tensor to build "
           "the engine's tensors over.")
      .def("start_load", &Worker::start_load, py::arg("metadata"),
           "Before the forward pass: stores from earlier steps go, loads start, and it returns "
           "once the forward pass may write every block (the flush set's fences, F10).")
      .def("wait_for_layer_load", &Worker::wait_for_layer_load, py::arg("layer"),
           "Layer-wise (connector.transfer_granularity: layer): before the layer's attention, "
           "returns once the step's loads of that layer landed (F10). A no-op in request "
           "granularity and with kvtierd, where a request computes only after its load's "
           "verdict.")
      .def("save_layer", &Worker::save_layer, py::arg("layer"),
           "Layer-wise: after the forward pass wrote the layer's KV, the step's stores of that "
           "layer start (the layers not saved go at queue_stores). A no-op in request "
           "granularity.")
      .def("queue_stores", &Worker::queue_stores, py::arg("metadata"),
           "After the forward pass wrote its KV: this step's stores, sent at the next "
           "start_load (or drain).")
      .def("take_output", &Worker::take_output,
           "The verdicts decided so far, the blocks of failed loads (F4) and the fail-stop "
           "state: a kvtier.WorkerOutput for Scheduler.update_from_worker_output.")
      .def("drain", &Worker::drain,
           "Sends the queued stores and waits until every copy that can run has run (an "
           "engine with nothing to compute calls it instead of spinning).")
      .def_property_readonly("fail_stopped", &Worker::fail_stopped,
                             "F7: a transfer of this rank was Unprovable.")
      .def_property_readonly("in_flight", &Worker::in_flight,
                             "Jobs handed to this rank without a verdict yet.")
      .def("audit", &Worker::audit, "F12 at quiescence: raises kvtier.Error on a leak.")
      .def("stats", &Worker::stats, "The rank's transfer-engine counters, name -> int.")
      .def("fault_counts", &Worker::fault_counts,
           "Faults injected so far (the config's faults section), name -> int.")
      .def_property_readonly("kv_caches", &Worker::kv_caches,
                             "The registered objects (empty once closed).")
      .def_property_readonly("rank", &Worker::rank)
      .def_property_readonly("num_blocks", &Worker::num_blocks)
      .def_property_readonly("host_slots", &Worker::host_slots)
      .def_property_readonly("layout", &Worker::layout)
      .def_property_readonly("closed", &Worker::closed)
      .def("close", &Worker::close)
      .def("__enter__", [](Worker& w) -> Worker& { return w; })
      .def("__exit__", [](Worker& w, py::args) { w.close(); });
}

}  // namespace kvtier::python
