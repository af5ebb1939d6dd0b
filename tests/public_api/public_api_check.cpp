// The public API is enough: this program includes only kvtier/kvtier.h (its target has no src/
// on the include path) and drives the connector end to end on the host device, the way an
// embedding engine would: one scheduler side, one worker side, a request that computes and
// stores a prefix, and a second request that loads it. Exits 0 when every step went as the
// contract says.
#include <cstdio>
#include <cstring>
#include <vector>

#include "kvtier/kvtier.h"

namespace {

int fail(const char* what) {
  std::fprintf(stderr, "public API check: %s\n", what);
  return 1;
}

}  // namespace

int main() {
  using namespace kvtier;
  Config config;
  config.layout.block_size = 4;
  config.layout.blocks_per_chunk = 2;
  config.layout.layers = 2;
  config.layout.kv_heads = 1;
  config.layout.head_dim = 8;
  config.cache.host_bytes = 1 << 20;
  const KvLayout layout = config.kv_layout();
  const ConnectorFactory factory(
      config,
      ConnectorShape{.world_size = 1, .layout = layout, .model = "public-api", .host_slots = 16});
  SchedulerSide scheduler = factory.scheduler_side();
  HostDevice device;
  const StreamHandle compute = device.create_stream();
  std::unique_ptr<WorkerConnector> worker = factory.worker(
      WorkerSetup{.rank = 0, .device_blocks = 32, .device = &device, .compute_stream = compute});

  // One engine step: metadata from the scheduler side, the worker's calls, the verdicts back.
  auto step = [&](uint64_t n, std::vector<ScheduledRequest> requests) {
    const StepMetadata meta = scheduler.connector->build_step_metadata(
        StepInput{.step = n, .requests = std::move(requests)});
    worker->start_load(meta);
    worker->queue_stores(meta);  // the "forward pass" wrote nothing: the KV is the zeroed cache
    device.quiesce();
    std::vector<WorkerOutput> outputs{worker->take_output()};
    return scheduler.connector->update_from_worker_output(outputs);
  };

  const std::vector<TokenId> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
  // Request a: nothing cached; it computes its 17 tokens in one step and its chunks are stored.
  ConnectorRequest a{.id = "a", .tokens = prompt, .num_prompt_tokens = prompt.size()};
  if (scheduler.connector->get_num_new_matched_tokens(a, 0).tokens != 0) return fail("a hit");
  const std::vector<uint32_t> a_blocks = {0, 1, 2, 3, 4};
  scheduler.connector->update_state_after_alloc("a", GroupBlocks{a_blocks}, 0);
  step(1, {ScheduledRequest{.id = "a",
                            .tokens = prompt,
                            .num_prompt_tokens = prompt.size(),
                            .new_blocks = GroupBlocks{a_blocks},
                            .num_computed_after_step = prompt.size()}});
  scheduler.connector->request_finished("a");
  for (int i = 2; i < 10 && scheduler.connector->counters().jobs_in_flight > 0; ++i) step(i, {});
  if (scheduler.connector->counters().stores_completed == 0) return fail("nothing was stored");

  // Request b shares the prefix: its first 16 tokens (two chunks) load from the host cache.
  ConnectorRequest b{.id = "b", .tokens = prompt, .num_prompt_tokens = prompt.size()};
  const Match match = scheduler.connector->get_num_new_matched_tokens(b, 0);
  if (match.ask_later || match.tokens != 16) return fail("b did not match the stored prefix");
  const std::vector<uint32_t> b_blocks = {8, 9, 10, 11, 12};
  scheduler.connector->update_state_after_alloc("b", GroupBlocks{b_blocks}, match.tokens);
  bool loaded = false;
  for (int i = 10; i < 20 && !loaded; ++i) {
    for (const LoadFinished& l : step(i, {}).loads) {
      if (l.request != "b" || l.outcome != Outcome::kCompleted || l.num_computed != 16) {
        return fail("b's load did not complete with 16 tokens");
      }
      loaded = true;
    }
  }
  if (!loaded) return fail("b's load never ended");
  scheduler.connector->request_finished("b");
  if (!scheduler.connector->audit() || !worker->audit()) return fail("audit failed (F12)");
  worker.reset();
  std::puts("public API check: ok");
  return 0;
}
