#include "kvtier/engine/worker_process.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "kvtier/connector/connector_factory.h"
#include "kvtier/connector/worker_connector.h"
#include "kvtier/core/log.h"
#include "kvtier/core/stop_signals.h"
#include "kvtier/device/fault_injecting_device.h"
#include "kvtier/device/host_device.h"
#include "kvtier/engine/byte_vocab.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtier/engine/layered_forward.h"
#include "kvtier/engine/step_messages.h"
#include "kvtier/engine/tiny_model.h"
#include "kvtier/engine/wire.h"
#include "kvtier/engine/zmq_collective.h"

namespace kvtier {
namespace {

class Worker {
 public:
  Worker(const Config& config, uint32_t core, uint32_t rank, const std::string& run_dir,
         const std::atomic<bool>& stop_requested)
      : stop_requested_(stop_requested),
        config_(config),
        rank_(rank),
        shape_(engine_shape(config)),
        fault_(host_, fault_plan_from_config(config.faults, rank)),
        injects_faults_(injects_device_faults(config.faults)),
        model_(shape_.model, rank, shape_.world_size),
        socket_(context_, zmq::socket_type::dealer) {
    compute_ = fault_.create_stream();
    step_done_ = fault_.create_event();
    // The connector's worker side for the configured cache, with the rank's KV caches (and,
    // with tiers, the rank's share of the host pool its engine core, the parent, created).
    ConnectorShape cshape = connector_shape(shape_);
    cshape.host_pool_name = host_pool_name(config, getppid());
    connector_ = ConnectorFactory(config, std::move(cshape))
                     .worker(WorkerSetup{.rank = rank,
                                         .device_blocks = shape_.device_blocks,
                                         .device = &fault_,
                                         .compute_stream = compute_,
                                         .while_waiting = [this] { heartbeat_if_due(); }});
    caches_ = connector_->kv_caches();
    if (shape_.world_size == 1) {
      collective_ = std::make_unique<SingleRankCollective>();
    } else {
      collective_ =
          std::make_unique<ZmqCollective>(context_, collective_endpoint(run_dir, core), rank,
                                          shape_.world_size, std::chrono::seconds(60));
    }
    socket_.set(zmq::sockopt::linger, 0);
    lossless_queues(socket_);
    socket_.set(zmq::sockopt::routing_id, "w" + std::to_string(rank));
    socket_.connect(core_endpoint(run_dir, core));
  }

  ~Worker() {
    // Copies may still run: the device drains before the connector (and its memory) goes.
    fault_.release_hangs();
    host_.quiesce();
    connector_.reset();
  }

  int run() {
    send_message(socket_, {{"t", "hello"}, {"rank", rank_}, {"pid", getpid()}});
    for (;;) {
      if (stop_requested_.load()) return 0;  // SIGINT/SIGTERM: as a shutdown message
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, heartbeat_) == 0) {
        send_heartbeat();
        continue;
      }
      auto msg = try_receive(socket_, false);
      if (!msg) continue;
      if (!*msg) {
        log_warning(msg->error().message);
        continue;
      }
      const std::string type = (*msg)->body["t"];
      if (type == "shutdown") return 0;
      if (type != "step") continue;
      try {
        run_step((*msg)->body);
      } catch (const std::exception& e) {
        leave(e.what());
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
    connector_->start_load(meta);
    if (connector_->fail_stopped()) {
      leave("fail-stop (F7) before the forward pass: " +
            connector_->take_output().fail_stop_reason);
    }
    std::vector<TokenId> sampled;
    if (!inputs.empty()) {
      // The forward pass runs on the compute stream, one layer at a time, in order with the
      // connector's fences (F10): flushed stores finish before it writes; layer L's attention
      // waits for layer L's loads (wait_for_layer_load), and layer L's stores, sent right after
      // it (save_layer), read what it wrote while layer L+1 computes. Whole-request transfers
      // do nothing per layer: their loading requests are not in the batch, or
      // (connector.load_in_step) start_load ordered their loads before this pass.
      LayeredForward forward;
      enqueue_forward(fault_, compute_, model_, inputs, shape_.layout, caches_, *collective_,
                      *connector_, forward,
                      seconds_to_duration(std::max(0.0, config_.faults.slow_forward_s)));
      fault_.record(step_done_, compute_);
      wait_for_forward_pass();
      if (forward.error) std::rethrow_exception(forward.error);
      for (const auto& l : forward.logits) sampled.push_back(greedy_token(l));
    }
    connector_->queue_stores(meta);
    const WorkerOutput out = connector_->take_output();
    nlohmann::json done = {
        {"t", "done"}, {"step", body.at("step")}, {"tokens", sampled}, {"output", to_json(out)}};
    if (injects_faults_) done["faults"] = to_json(fault_.counts());
    send_message(socket_, done);
  }

  // This rank cannot go on (a step threw, or F7 below): it tells the engine core why, then waits,
  // computing nothing and without unwinding (copies may still touch this rank's memory), until
  // the core's shutdown or kill. The socket stays open, so the message is delivered: a process
  // that closed it and exited at once could be reaped before its message arrived, and the core
  // would report only the exit.
  //
  // F7: a rank that cannot prove its copies stopped writes no more KV. When the fail-stop shows
  // in start_load, a store of the flush set may still be reading the blocks this step's forward
  // pass would write (kvtierd would publish what it wrote), so the pass is never enqueued.
  [[noreturn]] void leave(const std::string& message) {
    log_error("fatal: " + message);
    send_message(socket_, {{"t", "fatal"}, {"rank", rank_}, {"message", message}});
    for (;;) {
      if (stop_requested_.load()) std::_Exit(1);
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, heartbeat_) == 0) continue;
      auto msg = try_receive(socket_, false);
      if (msg && *msg && (**msg).body["t"] == "shutdown") std::_Exit(1);
    }
  }

  void send_heartbeat() {
    send_message(socket_, {{"t", "hb"}, {"rank", rank_}});
    next_heartbeat_ = std::chrono::steady_clock::now() + heartbeat_;
  }
  void heartbeat_if_due() {
    if (std::chrono::steady_clock::now() >= next_heartbeat_) send_heartbeat();
  }

  // Waits for the forward pass on the compute stream, heartbeating meanwhile: the engine core's
  // stall check (H6) hears from this process while it is scheduled at all, also during a step
  // longer than the heartbeat interval or one waiting in the collective for a peer. A forward
  // pass that never ends is the engine core's progress watchdog's to report (H8).
  void wait_for_forward_pass() {
    auto backoff = std::chrono::microseconds(10);
    while (!fault_.query(step_done_)) {
      heartbeat_if_due();
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(1000));
    }
  }

  const std::atomic<bool>& stop_requested_;
  const Config config_;
  uint32_t rank_;
  EngineShape shape_;
  HostDevice host_;
  FaultInjectingDevice fault_;
  const bool injects_faults_;  // the done message then carries fault_'s counts
  TinyModel model_;
  StreamHandle compute_;
  EventHandle step_done_;
  std::unique_ptr<WorkerConnector> connector_;
  KvCacheAddresses caches_;  // connector_'s
  zmq::context_t context_;
  std::unique_ptr<Collective> collective_;
  zmq::socket_t socket_;
  const std::chrono::milliseconds heartbeat_{
      std::max<int64_t>(1, static_cast<int64_t>(config_.engine.heartbeat_interval_s * 1000))};
  std::chrono::steady_clock::time_point next_heartbeat_{};
};

}  // namespace

int run_worker(const Config& config, uint32_t core, uint32_t rank, const std::string& run_dir) {
  std::atomic<bool> stop_requested{false};
  // Before any thread starts (ZeroMQ's, the device's copy threads).
  StopSignals stop_signals;
  stop_signals.deliver_to([&stop_requested] { stop_requested.store(true); });
  std::unique_ptr<Worker> worker;
  try {
    worker = std::make_unique<Worker>(config, core, rank, run_dir, stop_requested);
    return worker->run();
  } catch (const std::exception& e) {
    // Setup failed; the engine core sees this process exit and reports it.
    log_error(std::string("fatal: ") + e.what(),
              {{"core", std::to_string(core)}, {"rank", std::to_string(rank)}});
    std::_Exit(1);
  }
}

}  // namespace kvtier
