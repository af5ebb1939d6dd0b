// A minimal engine embedding kvtier through its installed package, on the host device (a
// software accelerator: its "device memory" is host memory and its streams are threads). It
// does per step what docs/embedding.md describes, in one process with one rank:
//
//   scheduler process   ConnectorFactory::scheduler_side(): the host cache and the
//                       SchedulerConnector that decides loads and stores
//   worker (rank 0)     the engine's own KV caches and compute stream, registered with a
//                       LocalWorkerConnector that runs the copies
//
// Request "a" computes a 17-token prompt; its two full chunks are stored. Request "b" has the
// same prompt: the cache matches 16 tokens, loads them into b's blocks, and the engine computes
// only the 17th. The program checks that b's loaded KV is byte for byte a's, obeys every
// verdict as an engine must (a failed load is recomputed, F4; fail-stop stops, F7), and exits 0
// when everything went as the contract says.
#include <kvtier/connector/local_worker_connector.h>
#include <kvtier/kvtier.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace kvtier;

constexpr uint32_t kDeviceBlocks = 32;
constexpr uint32_t kHostSlots = 16;

int fail(const std::string& what) {
  std::fprintf(stderr, "kvtier_embed: %s\n", what.c_str());
  return 1;
}

// The engine's side of one rank: its KV caches (one tensor per layer) on its device, the compute
// stream its forward pass runs on, and the host pool the rank's share of the cache lives in.
class Rank {
 public:
  Rank(const Config& config, const KvLayout& layout) : layout_(layout) {
    compute_ = device_.create_stream();
    const KvGroup& g = layout.groups.at(0);
    GroupCacheAddresses group{.num_blocks = kDeviceBlocks};
    for (uint32_t l = 0; l < g.layers; ++l) {
      group.bases.push_back(device_.allocate(size_t{kDeviceBlocks} * g.layer_block_bytes()));
    }
    caches_.groups.push_back(group);
    auto pool = HostPool::create(device_, layout.max_chunk_bytes(), kHostSlots);
    if (!pool) throw std::runtime_error("host pool: " + pool.error().message);
    pool_ = std::move(*pool);
    // Register the engine's KV caches: the connector's copies read and write these blocks and
    // are fenced behind the work enqueued on `compute_` (F10).
    connector_.register_kv_caches(
        device_, layout, caches_,
        HostSlots{pool_->slot_address(0), pool_->slot_bytes(), kHostSlots}, compute_,
        transfer_options(config.transfer));
  }
  ~Rank() {
    // The device must be drained before the KV caches and the pool go: no job in flight (every
    // job has its verdict) and the compute stream finished.
    finish_compute();
    connector_ = LocalWorkerConnector(0);
    pool_.reset();
    for (DeviceAddress base : caches_.groups[0].bases) device_.free(base);
    device_.destroy_stream(compute_);
  }

  WorkerConnector& connector() { return connector_; }

  // The "forward pass": writes the KV of tokens [from, to) of `tokens` into `blocks`, as work on
  // the compute stream. A token's KV depends on the token and its position only, so two requests
  // with the same prefix hold the same bytes.
  void forward(const std::vector<TokenId>& tokens, const std::vector<uint32_t>& blocks, size_t from,
               size_t to) {
    const KvGroup g = layout_.groups[0];
    const std::vector<DeviceAddress> bases = caches_.groups[0].bases;
    device_.launch_host_func(compute_, [=] {
      const size_t token_bytes = size_t{g.kv_heads} * g.head_dim * g.dtype_bytes;
      for (size_t p = from; p < to; ++p) {
        for (uint32_t l = 0; l < g.layers; ++l) {
          auto* block = reinterpret_cast<unsigned char*>(bases[l]) +
                        size_t{blocks[p / g.block_size]} * g.layer_block_bytes();
          for (uint32_t kv = 0; kv < 2; ++kv) {  // [2, block_size, kv_heads, head_dim]
            unsigned char* dst = block + (kv * g.block_size + p % g.block_size) * token_bytes;
            std::memset(dst, static_cast<int>((tokens[p] * 31 + p * 7 + l * 3 + kv) & 0xff),
                        token_bytes);
          }
        }
      }
    });
  }

  // Layer `l`'s bytes of one block (host device: device memory is host memory).
  const unsigned char* block_bytes(uint32_t l, uint32_t block) const {
    return reinterpret_cast<const unsigned char*>(caches_.groups[0].bases[l]) +
           size_t{block} * layout_.groups[0].layer_block_bytes();
  }

  void finish_compute() {
    const EventHandle done = device_.create_event();
    device_.record(done, compute_);
    device_.synchronize(done);
    device_.destroy_event(done);
  }

 private:
  HostDevice device_;
  KvLayout layout_;
  StreamHandle compute_;
  KvCacheAddresses caches_;
  std::unique_ptr<HostPool> pool_;
  LocalWorkerConnector connector_{0};
};

}  // namespace

int main() {
  Config config;
  config.layout.block_size = 4;
  config.layout.blocks_per_chunk = 2;
  config.layout.layers = 2;
  config.layout.kv_heads = 2;
  config.layout.head_dim = 8;
  config.cache.host_bytes = 1 << 20;
  const KvLayout layout = config.kv_layout();

  // The scheduler process: one factory, its scheduler side (host cache, index, connector).
  const ConnectorFactory factory(
      config,
      ConnectorShape{
          .world_size = 1, .layout = layout, .model = "embed-example", .host_slots = kHostSlots});
  SchedulerSide scheduler = factory.scheduler_side();
  SchedulerConnector& sched = *scheduler.connector;
  // The worker process of rank 0 (here the same process).
  Rank rank(config, layout);
  WorkerConnector& worker = rank.connector();

  // One engine step. A ScheduledRequest's new_blocks are the blocks the connector has not seen
  // yet (none here: update_state_after_alloc was given each request's table). The forward pass
  // (`compute`) is enqueued between start_load and queue_stores: the loads start before it, this
  // step's stores read what it writes.
  uint64_t step_no = 0;
  auto step = [&](std::vector<ScheduledRequest> requests, const auto& compute) {
    const StepMetadata meta =
        sched.build_step_metadata(StepInput{.step = ++step_no, .requests = std::move(requests)});
    worker.start_load(meta);
    compute();
    worker.queue_stores(meta);
    const std::vector<WorkerOutput> outputs{worker.take_output()};
    return sched.update_from_worker_output(outputs);
  };
  auto idle_step = [&] { return step({}, [] {}); };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto timed_out = [&] { return std::chrono::steady_clock::now() > deadline; };

  const std::vector<TokenId> prompt = {5,   8,   13,  21,   34,   55,   89,   144,  233,
                                       377, 610, 987, 1597, 2584, 4181, 6765, 10946};
  const size_t n = prompt.size();

  // Request a: nothing cached; it computes all 17 tokens in one step, its chunks are stored.
  const ConnectorRequest a{.id = "a", .tokens = prompt, .num_prompt_tokens = n};
  if (sched.get_num_new_matched_tokens(a, 0).tokens != 0)
    return fail("a matched on an empty cache");
  const std::vector<uint32_t> a_blocks = {0, 1, 2, 3, 4};
  sched.update_state_after_alloc("a", GroupBlocks{a_blocks}, 0);
  StepOutcome out =
      step({ScheduledRequest{
               .id = "a", .tokens = prompt, .num_prompt_tokens = n, .num_computed_after_step = n}},
           [&] { rank.forward(prompt, a_blocks, 0, n); });
  // a finished: its blocks may be freed once the connector released it (stores still read them).
  bool a_released = !sched.request_finished("a");  // true: no transfer reads its blocks
  while (!a_released || sched.counters().jobs_in_flight > 0) {
    if (out.fail_stop) return fail("fail-stop (F7): " + sched.fail_stop_reason());
    for (const RequestId& r : out.released) a_released |= r == "a";
    if (timed_out()) return fail("a's stores never ended");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    out = idle_step();
  }
  const ConnectorCounters after_a = sched.counters();
  if (after_a.stores_completed == 0 || after_a.stores_failed != 0) return fail("a was not stored");

  // Request b shares a's prompt: 16 tokens (two chunks) load from the host cache.
  const ConnectorRequest b{.id = "b", .tokens = prompt, .num_prompt_tokens = n};
  const Match match = sched.get_num_new_matched_tokens(b, 0);
  if (match.ask_later || match.tokens != 16) return fail("b did not match a's stored prefix");
  const std::vector<uint32_t> b_blocks = {8, 9, 10, 11, 12};
  sched.update_state_after_alloc("b", GroupBlocks{b_blocks}, match.tokens);
  // The engine computes a loading request only after its load's verdict.
  size_t b_computed = 0;
  bool b_loaded = false;
  while (!b_loaded) {
    if (timed_out()) return fail("b's load never ended");
    out = idle_step();
    if (out.fail_stop) return fail("fail-stop (F7): " + sched.fail_stop_reason());
    for (const LoadFinished& l : out.loads) {
      if (l.request != "b") continue;
      // Completed: the KV of l.num_computed tokens is in b's blocks. Failed (F4): the engine
      // recomputes from l.num_computed (the blocks of the failed chunks hold nothing valid).
      std::printf("kvtier_embed: b's load %s, %zu tokens\n",
                  std::string(to_string(l.outcome)).c_str(), l.num_computed);
      if (l.outcome != Outcome::kCompleted) return fail("b's load failed on a fault-free device");
      b_computed = l.num_computed;
      b_loaded = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (b_computed != 16) return fail("b's load did not bring 16 tokens");
  for (uint32_t l = 0; l < layout.groups[0].layers; ++l) {
    for (size_t i = 0; i < 4; ++i) {
      if (std::memcmp(rank.block_bytes(l, b_blocks[i]), rank.block_bytes(l, a_blocks[i]),
                      layout.groups[0].layer_block_bytes()) != 0) {
        return fail("b's loaded KV differs from a's");
      }
    }
  }
  // b computes only the 17th token, then finishes.
  out =
      step({ScheduledRequest{
               .id = "b", .tokens = prompt, .num_prompt_tokens = n, .num_computed_after_step = n}},
           [&] { rank.forward(prompt, b_blocks, b_computed, n); });
  bool b_released = !sched.request_finished("b");
  while (!b_released || sched.counters().jobs_in_flight > 0 || worker.in_flight() > 0) {
    if (out.fail_stop) return fail("fail-stop (F7): " + sched.fail_stop_reason());
    for (const RequestId& r : out.released) b_released |= r == "b";
    if (timed_out()) {
      return fail("b never released: released " + std::to_string(b_released) + ", jobs " +
                  std::to_string(sched.counters().jobs_in_flight) + ", worker " +
                  std::to_string(worker.in_flight()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    out = idle_step();
  }

  rank.finish_compute();
  if (Status s = sched.audit(); !s) return fail("scheduler audit (F12): " + s.error().message);
  if (Status s = worker.audit(); !s) return fail("worker audit (F12): " + s.error().message);
  const ConnectorCounters c = sched.counters();
  std::printf(
      "kvtier_embed: ok: %llu jobs, %llu stores and %llu loads completed, %llu tokens loaded\n",
      static_cast<unsigned long long>(c.jobs_issued),
      static_cast<unsigned long long>(c.stores_completed),
      static_cast<unsigned long long>(c.loads_completed),
      static_cast<unsigned long long>(c.loaded_tokens));
  return 0;
}
