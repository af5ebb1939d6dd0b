#include "kvtier/engine/layered_forward.h"

#include <thread>

namespace kvtier {

void enqueue_forward(Device& device, StreamHandle stream, const TinyModel& model,
                     std::span<const ForwardInput> inputs, const KvLayout& layout,
                     const KvCacheAddresses& caches, Collective& collective,
                     WorkerConnector& connector, LayeredForward& out,
                     std::chrono::nanoseconds delay) {
  device.launch_host_func(stream, [&, inputs, delay] {
    try {
      if (delay.count() > 0) std::this_thread::sleep_for(delay);
      out.pass.emplace(model.begin(inputs, layout, caches, collective));
    } catch (...) {
      out.error = std::current_exception();
    }
  });
  const ModelConfig& c = model.config();
  for (uint32_t l = 0; l < c.layers; ++l) {
    const KvLayer layer{c.group_of_layer(l), c.index_in_group(l)};
    // F10: layer l's attention reads its loaded blocks only after their copies ended.
    connector.wait_for_layer_load(layer);
    device.launch_host_func(stream, [&out, l] {
      if (out.error) return;
      try {
        out.pass->run_layer(l);
      } catch (...) {
        out.error = std::current_exception();
      }
    });
    // F10: layer l's stores are fenced behind the work enqueued so far, which wrote layer l.
    connector.save_layer(layer);
  }
  device.launch_host_func(stream, [&out] {
    if (out.error) return;
    try {
      out.logits = out.pass->logits();
    } catch (...) {
      out.error = std::current_exception();
    }
  });
}

}  // namespace kvtier
