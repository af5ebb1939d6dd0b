#include "kvtier/engine/worker_process.h"

#include <unistd.h>

#include <chrono>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>

#include "kvtier/cache/host_pool.h"
#include "kvtier/connector/worker_connector.h"
#include "kvtier/device/fault_injecting_device.h"
#include "kvtier/device/host_device.h"
#include "kvtier/engine/byte_vocab.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtier/engine/server_worker_connector.h"
#include "kvtier/engine/step_messages.h"
#include "kvtier/engine/tiny_model.h"
#include "kvtier/engine/wire.h"
#include "kvtier/engine/zmq_collective.h"
#include "kvtier/transfer/transfer_engine.h"

namespace kvtier {
namespace {

std::optional<CopyKind> only_kind(const std::string& direction) {
  if (direction == "load") return CopyKind::kHostToDevice;
  if (direction == "store") return CopyKind::kDeviceToHost;
  return std::nullopt;
}

FaultPlan fault_plan(const FaultsConfig& f, uint32_t rank) {
  if (f.submit_failure_rate == 0 && f.latched_error_rate == 0 && f.delay_rate == 0 &&
      f.record_failure_rate == 0) {
    return FaultPlan{};
  }
  return FaultPlan::random(uint64_t{f.seed} * 1000 + rank,
                           RandomFaultRates{.submit_failure = f.submit_failure_rate,
                                            .latched_error = f.latched_error_rate,
                                            .record_failure = f.record_failure_rate,
                                            .delay = f.delay_rate,
                                            .only_kind = only_kind(f.direction)});
}

// The rank's device memory for its KV caches, in the layout's shape.
KvCacheAddresses allocate_caches(Device& device, const KvLayout& layout, uint32_t num_blocks) {
  KvCacheAddresses caches;
  for (const KvGroup& g : layout.groups) {
    GroupCacheAddresses group{.num_blocks = num_blocks};
    const bool per_layer = layout.device_layout == DeviceLayout::kPerLayer;
    const size_t tensors = per_layer ? g.layers : 1;
    const size_t bytes = size_t{num_blocks} * (per_layer ? g.layer_block_bytes() : g.block_bytes());
    for (size_t i = 0; i < tensors; ++i) group.bases.push_back(device.allocate(bytes));
    caches.groups.push_back(std::move(group));
  }
  return caches;
}

class Worker {
 public:
  Worker(const Config& config, uint32_t core, uint32_t rank, const std::string& run_dir)
      : config_(config),
        rank_(rank),
        shape_(engine_shape(config)),
        fault_(host_, fault_plan(config.faults, rank)),
        model_(shape_.model, rank, shape_.world_size),
        connector_(rank),
        socket_(context_, zmq::socket_type::dealer) {
    compute_ = fault_.create_stream();
    step_done_ = fault_.create_event();
    if (config.connector.enabled && config.cache.mode == "server") {
      // kvtierd holds the cache: the KV caches live in shared memory it maps.
      server_ = std::make_unique<ServerWorkerConnector>(rank, shape_.layout, shape_.device_blocks,
                                                        config);
      caches_ = server_->caches();
      // A server that is not up yet only makes this rank's loads and stores fail (H7).
      server_->wait_until_ok(seconds_to_duration(config.server.connect_timeout_s));
    } else {
      caches_ = allocate_caches(fault_, shape_.layout, shape_.device_blocks);
      auto pool = HostPool::create(fault_, shape_.layout.max_chunk_bytes(), shape_.host_slots);
      if (!pool) throw std::runtime_error("host pool: " + pool.error().message);
      pool_ = std::move(*pool);
      connector_.register_kv_caches(
          fault_, shape_.layout, caches_,
          HostSlots{pool_->slot_address(0), pool_->slot_bytes(), shape_.host_slots}, compute_,
          transfer_options(config.transfer));
    }
    if (shape_.world_size == 1) {
      collective_ = std::make_unique<SingleRankCollective>();
    } else {
      collective_ = std::make_unique<ZmqCollective>(context_, collective_endpoint(run_dir, core), rank,
                                                    shape_.world_size, std::chrono::seconds(60));
    }
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::routing_id, "w" + std::to_string(rank));
    socket_.connect(core_endpoint(run_dir, core));
  }

  ~Worker() {
    // Copies may still run: the device drains before the pool and caches go.
    connector_ = WorkerConnector(rank_);
    server_.reset();
    fault_.release_hangs();
    host_.quiesce();
  }

  int run() {
    send_message(socket_, {{"t", "hello"}, {"rank", rank_}, {"pid", getpid()}});
    const auto heartbeat = std::chrono::milliseconds(
        std::max<int64_t>(1, static_cast<int64_t>(config_.engine.heartbeat_interval_s * 1000)));
    for (;;) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, heartbeat) == 0) {
        send_message(socket_, {{"t", "hb"}, {"rank", rank_}});
        continue;
      }
      auto msg = try_receive(socket_, false);
      if (!msg) continue;
      if (!*msg) {
        std::cerr << "worker " << rank_ << ": " << msg->error().message << "\n";
        continue;
      }
      const std::string type = (*msg)->body["t"];
      if (type == "shutdown") return 0;
      if (type != "step") continue;
      try {
        run_step((*msg)->body);
      } catch (const std::exception& e) {
        // Tell the engine core why, then leave without unwinding: copies may still touch this
        // rank's memory.
        std::cerr << "worker " << rank_ << ": fatal: " << e.what() << "\n";
        send_message(socket_, {{"t", "fatal"}, {"rank", rank_}, {"message", e.what()}});
        socket_.set(zmq::sockopt::linger, 1000);
        socket_.close();
        std::_Exit(1);
      }
    }
  }

 private:
  void run_step(const nlohmann::json& body) {
    const StepMetadata meta = step_metadata_from_json(body.at("meta"));
    // The batch's token and block-table storage outlives the forward pass.
    std::vector<std::vector<TokenId>> tokens;
    std::vector<std::vector<std::vector<uint32_t>>> tables;
    for (const auto& seq : body.at("batch")) {
      tokens.push_back(seq.at("tokens").get<std::vector<TokenId>>());
      tables.push_back(seq.at("tables").get<std::vector<std::vector<uint32_t>>>());
    }
    std::vector<ForwardInput> inputs;
    size_t i = 0;
    for (const auto& seq : body.at("batch")) {
      ForwardInput in{.start = seq.at("start").get<uint32_t>(), .tokens = tokens[i]};
      for (const auto& t : tables[i]) in.block_tables.emplace_back(t);
      inputs.push_back(std::move(in));
      ++i;
    }
    if (server_) {
      server_->start_load(meta);
    } else {
      connector_.start_load(meta);
    }
    std::vector<TokenId> sampled;
    if (!inputs.empty()) {
      // The forward pass runs on the compute stream, in order with the connector's fences
      // (F10): stores queued below read what it wrote, flushed stores finish before it writes.
      std::vector<std::vector<float>> logits;
      std::exception_ptr error;
      fault_.launch_host_func(compute_, [&] {
        try {
          logits = model_.forward_batch(inputs, shape_.layout, caches_, *collective_);
        } catch (...) {
          error = std::current_exception();
        }
      });
      fault_.record(step_done_, compute_);
      fault_.synchronize(step_done_);
      if (error) std::rethrow_exception(error);
      for (const auto& l : logits) sampled.push_back(greedy_token(l));
    }
    if (server_) {
      server_->queue_stores(meta);
    } else {
      connector_.queue_stores(meta);
    }
    const WorkerOutput out = server_ ? server_->take_output() : connector_.take_output();
    send_message(socket_, {{"t", "done"},
                           {"step", body.at("step")},
                           {"tokens", sampled},
                           {"output", to_json(out)}});
  }

  const Config config_;
  uint32_t rank_;
  EngineShape shape_;
  HostDevice host_;
  FaultInjectingDevice fault_;
  TinyModel model_;
  KvCacheAddresses caches_;
  std::unique_ptr<HostPool> pool_;
  StreamHandle compute_;
  EventHandle step_done_;
  WorkerConnector connector_;                      // cache.mode: local
  std::unique_ptr<ServerWorkerConnector> server_;  // cache.mode: server
  zmq::context_t context_;
  std::unique_ptr<Collective> collective_;
  zmq::socket_t socket_;
};

}  // namespace

int run_worker(const Config& config, uint32_t core, uint32_t rank, const std::string& run_dir) {
  std::unique_ptr<Worker> worker;
  try {
    worker = std::make_unique<Worker>(config, core, rank, run_dir);
    return worker->run();
  } catch (const std::exception& e) {
    // Setup failed; the engine core sees this process exit and reports it.
    std::cerr << "worker " << core << "/" << rank << ": fatal: " << e.what() << "\n";
    std::_Exit(1);
  }
}

}  // namespace kvtier
