// WorkerConnector: the worker side of the engine contract, one per tensor-parallel rank. It runs
// the jobs the scheduler side put in each step's metadata and reports their verdicts. Two
// implement it: LocalWorkerConnector (local_worker_connector.h: the rank's TransferEngine and
// its share of an in-process host pool) and RemoteWorkerConnector (remote_worker_connector.h:
// kvtierd copies through the rank's shared KV memory). ConnectorFactory (connector_factory.h)
// builds the one the config asks for, with the rank's KV caches.
//
// Each step the rank's worker loop calls, in order:
//   start_load(metadata)   before it enqueues the forward pass: stores from earlier steps that
//                          are not sent yet go, the flush set is fenced (F10), loads start
//   for each layer, in the forward pass's order (layer-wise transfers, see below):
//     wait_for_layer_load(layer)  before it enqueues the layer's attention
//     save_layer(layer)           after it enqueued the work that writes the layer's KV
//   queue_stores(metadata) after it enqueued the forward pass: this step's stores, which read
//                          what that pass writes; each implementation says when they are sent
//   take_output()          the verdicts decided so far, the blocks of failed loads, fail-stop
//
// Layer-wise transfers (connector.transfer_granularity: layer, LocalWorkerConnector): the loads
// of every layer are issued in start_load, layer by layer, and complete layer by layer;
// wait_for_layer_load(layer) makes the compute stream wait for that layer's part of every load
// of the step (the host does not block), so the engine may compute a loading request in the
// step its load starts. save_layer(layer) sends that layer's part of the step's stores, fenced
// behind the compute enqueued so far: stores of layer L copy while layer L+1 computes. A job's
// verdict covers all its layers: it is reported once every layer ended, Completed only when
// every layer completed; a failed layer fails the job and reports every block of the load, in
// every group, invalid (F4). An implementation that moves whole requests does nothing in these
// two calls; its loading requests are computed only after their load's verdict, unless
// (connector.load_in_step) its start_load orders the step's loads before the forward pass:
// LocalWorkerConnector fences the compute stream behind them, RemoteWorkerConnector waits for
// them.
//
// Contract:
// - Every job handed to this rank gets exactly one verdict (F1).
// - A failed load's destination blocks are reported in the same output as its verdict, or
//   earlier (F4), per group.
// - flush: the forward pass enqueued after start_load cannot write a block before every store
//   in the flush set finished reading it (F10); a store that cannot be fenced makes this rank
//   fail-stop (F7), and fail_stopped() is then true when start_load returns: the worker must not
//   enqueue the forward pass (the store may still read what it would write).
// - A load's blocks hold its bytes before the forward pass that reads them: the engine computes
//   a loading request only after the load's verdict was reported, or (layer-wise) reads a
//   layer's loaded blocks only after wait_for_layer_load(layer), or after a start_load that
//   ended the load; in the latter cases what it computed from a load whose verdict is not
//   Completed is discarded (F4).
// - Layer-wise, a store of layer L reads only KV that the compute enqueued before
//   save_layer(L) finished writing (F10, per layer).
// - An Unprovable outcome sets fail_stop in every later output (F7).
// - Copies may still use the KV caches (and a local host pool) until the device drained:
//   destroy the connector only after that (the rank's device quiesced).
//
// Not thread-safe: the rank's worker loop calls it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/connector/step_metadata.h"
#include "kvtier/core/status.h"
#include "kvtier/transfer/copy_descriptors.h"

namespace kvtier {

// One layer of one KV-cache group: `layer` counts the group's layers (KvGroup::layers) in the
// order the model computes them.
struct KvLayer {
  uint32_t group = 0;
  uint32_t layer = 0;
};

class WorkerConnector {
 public:
  virtual ~WorkerConnector() = default;

  virtual uint32_t rank() const = 0;
  // The rank's KV caches, every group in the layout's device layout: the forward pass reads and
  // writes its KV there, the connector's copies read and write the same blocks.
  virtual const KvCacheAddresses& kv_caches() const = 0;

  virtual void start_load(const StepMetadata& metadata) = 0;
  // Layer-wise transfers (above); both do nothing by default (whole-request transfers).
  virtual void wait_for_layer_load(KvLayer layer) { static_cast<void>(layer); }
  virtual void save_layer(KvLayer layer) { static_cast<void>(layer); }
  virtual void queue_stores(const StepMetadata& metadata) = 0;
  virtual WorkerOutput take_output() = 0;

  virtual bool fail_stopped() const = 0;
  // Jobs handed to this rank without a verdict yet (stores not sent yet included).
  virtual size_t in_flight() const = 0;
  // F12 at quiescence (no job in flight): nothing of a job outlives its verdict, and the
  // copy engine behind the rank agrees; an error describes the first violation found.
  virtual Status audit() const = 0;
};

}  // namespace kvtier
