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
//   queue_stores(metadata) after it enqueued the forward pass: this step's stores, which read
//                          what that pass writes; each implementation says when they are sent
//   take_output()          the verdicts decided so far, the blocks of failed loads, fail-stop
//
// Contract:
// - Every job handed to this rank gets exactly one verdict (F1).
// - A failed load's destination blocks are reported in the same output as its verdict, or
//   earlier (F4), per group.
// - flush: the forward pass enqueued after start_load cannot write a block before every store
//   in the flush set finished reading it (F10); a store that cannot be fenced makes this rank
//   fail-stop (F7).
// - A load's blocks hold its bytes before the forward pass that reads them: the engine computes
//   a loading request only after the load's verdict was reported.
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

class WorkerConnector {
 public:
  virtual ~WorkerConnector() = default;

  virtual uint32_t rank() const = 0;
  // The rank's KV caches, every group in the layout's device layout: the forward pass reads and
  // writes its KV there, the connector's copies read and write the same blocks.
  virtual const KvCacheAddresses& kv_caches() const = 0;

  virtual void start_load(const StepMetadata& metadata) = 0;
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
