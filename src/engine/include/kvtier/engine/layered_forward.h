// enqueue_forward: one forward pass of the tiny model on a rank's compute stream, layer by
// layer, with the connector's per-layer calls in between (worker_connector.h):
//   for each model layer L:  wait_for_layer_load(L's KV layer)   the stream waits for L's loads
//                            run_layer(L) on the stream          writes L's KV, attends
//                            save_layer(L's KV layer)            L's stores go, fenced behind it
// then the logits. With whole-request transfers the two connector calls do nothing. The worker
// process and the in-process scheduler rig both run their forward passes through it.
#pragma once

#include <chrono>
#include <exception>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/connector/worker_connector.h"
#include "kvtier/device/device.h"
#include "kvtier/engine/tiny_model.h"

namespace kvtier {

// What the stream writes: valid once an event recorded on the stream after enqueue_forward
// completed. Must outlive that.
struct LayeredForward {
  std::optional<ForwardPass> pass;
  std::vector<std::vector<float>> logits;
  std::exception_ptr error;  // the model's exception, if any (later layers are skipped)
};

// `inputs`, `layout`, `caches` and `collective` must outlive the enqueued work too. `delay`
// (faults.slow_forward_s) sleeps on the stream before the first layer.
void enqueue_forward(Device& device, StreamHandle stream, const TinyModel& model,
                     std::span<const ForwardInput> inputs, const KvLayout& layout,
                     const KvCacheAddresses& caches, Collective& collective,
                     WorkerConnector& connector, LayeredForward& out,
                     std::chrono::nanoseconds delay = {});

}  // namespace kvtier
