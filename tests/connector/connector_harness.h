// ConnectorHarness: a scheduler side and N worker sides (ranks) driven step by step the way an
// engine drives them, over host devices behind fault injectors. A deterministic stand-in for the
// forward pass writes each position's KV, on the rank's compute stream, as a pure function of
// the token prefix, the group, the layer and the rank; so the bytes a fault-free run produces
// are known for every device block and every host slot, and the harness checks them.
//
// Each step(): waiting requests are looked up and given blocks (a match becomes a load), running
// requests compute a prefill chunk or one decode token, every rank runs start_load, the forward
// pass layer by layer (wait_for_layer_load, the layer's KV, save_layer) and queue_stores, the
// devices run whatever can run (quiesce), and the ranks' outputs go to the scheduler side. No
// sleeps: the clock is a ManualClock the harness advances per step.
//
// With TransferGranularity::kLayer a request whose load starts is computed in the same step,
// from the load's end; what that step computed is kept only if the load completes (F4), as an
// engine does with layer-wise loads.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/cache/cache_manager.h"
#include "kvtier/connector/local_worker_connector.h"
#include "kvtier/connector/scheduler_connector.h"
#include "kvtier/device/fault_injecting_device.h"
#include "kvtier/device/host_device.h"
#include "support/byte_pattern.h"

namespace kvtier::testing {

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Deterministic test prompts: `n` tokens drawn from `seed`, and a prefix with such a suffix.
inline std::vector<TokenId> make_tokens(size_t n, uint32_t seed) {
  std::vector<TokenId> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<TokenId>(mix64(seed * 1000003ULL + i) % 50000);
  return t;
}

inline std::vector<TokenId> with_suffix(std::vector<TokenId> prefix, size_t n, uint32_t seed) {
  const auto suffix = make_tokens(n, seed);
  prefix.insert(prefix.end(), suffix.begin(), suffix.end());
  return prefix;
}

// Two groups with different block sizes (a hybrid model): group 0 blocks of 4 tokens, group 1
// blocks of 8 tokens with fewer layers.
inline KvLayout hybrid_layout(DeviceLayout device_layout = DeviceLayout::kPerLayer) {
  KvLayout layout{.device_layout = device_layout};
  layout.groups.push_back(KvGroup{.layers = 2,
                                  .kv_heads = 1,
                                  .head_dim = 4,
                                  .dtype_bytes = 2,
                                  .block_size = 4,
                                  .blocks_per_chunk = 2});
  layout.groups.push_back(KvGroup{.layers = 1,
                                  .kv_heads = 1,
                                  .head_dim = 4,
                                  .dtype_bytes = 2,
                                  .block_size = 8,
                                  .blocks_per_chunk = 2});
  return layout;
}

inline KvLayout single_group_layout(DeviceLayout device_layout = DeviceLayout::kPerLayer) {
  KvLayout layout{.device_layout = device_layout};
  layout.groups.push_back(KvGroup{.layers = 2,
                                  .kv_heads = 1,
                                  .head_dim = 4,
                                  .dtype_bytes = 2,
                                  .block_size = 4,
                                  .blocks_per_chunk = 2});
  return layout;
}

struct HarnessOptions {
  uint32_t world_size = 1;
  KvLayout layout = single_group_layout();
  uint32_t num_blocks = 256;  // per group, per rank
  uint32_t num_slots = 32;
  uint32_t prefill_chunk = 16;  // tokens per prefill step
  size_t max_running = 8;
  bool store_decode = false;
  uint32_t store_threshold = 1;
  uint32_t admission_window = SchedulerOptions{}.admission_window;
  size_t max_store_chunks_in_flight = 64;
  Duration job_timeout = std::chrono::seconds(40);
  TransferOptions transfer{.deadline = std::chrono::seconds(30)};
  std::vector<FaultPlan> plans;  // per rank; none for missing ranks
  Duration step_time = std::chrono::milliseconds(100);
  bool reuse_freed_blocks_first = false;  // hand out the most recently freed block first
  TransferGranularity granularity = TransferGranularity::kRequest;
};

// One rank: its device, its KV caches, its share of the host pool, its worker side.
class Rank {
 public:
  Rank(uint32_t rank, const KvLayout& layout, const HarnessOptions& o, FaultPlan plan,
       const Clock& clock)
      : index(rank), layout_(layout), fault(host, std::move(plan)) {
    for (size_t g = 0; g < layout.groups.size(); ++g) {
      GroupCacheAddresses cache{.num_blocks = o.num_blocks};
      const size_t bytes = layout.tensor_bytes(g, o.num_blocks).value();
      for (size_t i = 0; i < layout.tensors_per_group(g); ++i) {
        DeviceAddress a = fault.allocate(bytes);
        std::memset(reinterpret_cast<void*>(a), 0, bytes);
        cache.bases.push_back(a);
      }
      caches.groups.push_back(cache);
    }
    slot_bytes = layout.max_chunk_bytes();
    const size_t pool = (slot_bytes * o.num_slots + 4095) / 4096 * 4096;
    host_memory = static_cast<std::byte*>(std::aligned_alloc(4096, pool));
    std::memset(host_memory, 0, pool);
    slots = HostSlots{fault.register_host(host_memory, slot_bytes * o.num_slots), slot_bytes,
                      o.num_slots};
    compute = fault.create_stream();
    worker = std::make_unique<LocalWorkerConnector>(rank, o.granularity);
    worker->register_kv_caches(fault, layout, caches, slots, compute, o.transfer, clock);
  }

  ~Rank() {
    worker.reset();
    fault.release_hangs();
    host.quiesce();
    std::free(host_memory);
  }

  size_t row_bytes(uint32_t g) const {
    const KvGroup& k = layout_.groups[g];
    return size_t{k.kv_heads} * k.head_dim * k.dtype_bytes;
  }
  // The KV row of one position: K (kv = 0) or V (kv = 1) of `layer`, offset `off` in `block`.
  std::byte* device_row(uint32_t g, uint32_t block, uint32_t layer, uint32_t kv,
                        uint32_t off) const {
    const KvGroup& k = layout_.groups[g];
    const size_t in_layer = (size_t{kv} * k.block_size + off) * row_bytes(g);
    if (layout_.device_layout == DeviceLayout::kPerLayer) {
      return reinterpret_cast<std::byte*>(caches.groups[g].bases[layer] +
                                          size_t{block} * k.layer_block_bytes() + in_layer);
    }
    return reinterpret_cast<std::byte*>(caches.groups[g].bases[0] +
                                        size_t{block} * k.block_bytes() +
                                        size_t{layer} * k.layer_block_bytes() + in_layer);
  }
  // The same row inside a host slot holding chunk-relative block `j` of group g.
  std::byte* slot_row(SlotId slot, uint32_t g, uint32_t j, uint32_t layer, uint32_t kv,
                      uint32_t off) const {
    const KvGroup& k = layout_.groups[g];
    std::byte* base = host_memory + size_t{slot} * slot_bytes;
    const size_t in_layer = (size_t{kv} * k.block_size + off) * row_bytes(g);
    if (layout_.device_layout == DeviceLayout::kPerLayer) {
      return base + (size_t{layer} * k.blocks_per_chunk + j) * k.layer_block_bytes() + in_layer;
    }
    return base + size_t{j} * k.block_bytes() + size_t{layer} * k.layer_block_bytes() + in_layer;
  }

  uint32_t index;
  KvLayout layout_;
  HostDevice host;
  FaultInjectingDevice fault;
  KvCacheAddresses caches;
  size_t slot_bytes = 0;
  std::byte* host_memory = nullptr;
  HostSlots slots;
  StreamHandle compute;
  std::unique_ptr<LocalWorkerConnector> worker;
};

enum class SimState { kWaiting, kLoading, kRunning, kFinishing, kAborted };

struct SimRequest {
  RequestId id;
  std::vector<TokenId> tokens;
  std::vector<uint64_t> prefix_hash;  // [p]: hash of tokens[0..p]
  size_t prompt = 0;
  size_t max_new = 0;
  size_t computed = 0;  // tokens whose KV every rank holds, as the engine believes
  GroupBlocks blocks;
  std::vector<size_t> blocks_given;  // per group: blocks the connector has seen
  SimState state = SimState::kWaiting;
  size_t loads = 0;  // loads it completed or failed
  // Layer-wise: computed up to here in its load's step; valid once the load completed.
  size_t held_to = 0;
  uint64_t load_step = UINT64_MAX;  // the step its load started in
};

class ConnectorHarness {
 public:
  explicit ConnectorHarness(HarnessOptions o) : options(std::move(o)) {
    cache = std::make_unique<CacheManager>(options.num_slots, options.layout.max_chunk_bytes(),
                                           *make_eviction_policy("lru", options.num_slots));
    scheduler = std::make_unique<SchedulerConnector>(
        SchedulerOptions{.world_size = options.world_size,
                         .layout = options.layout,
                         .model = "harness",
                         .store_decode = options.store_decode,
                         .store_threshold = options.store_threshold,
                         .admission_window = options.admission_window,
                         .max_store_chunks_in_flight = options.max_store_chunks_in_flight,
                         .job_timeout = options.job_timeout},
        *cache, clock);
    for (uint32_t r = 0; r < options.world_size; ++r) {
      FaultPlan plan = r < options.plans.size() ? options.plans[r] : FaultPlan{};
      ranks.push_back(std::make_unique<Rank>(r, options.layout, options, std::move(plan), clock));
    }
    free_blocks.resize(options.layout.groups.size());
    for (auto& f : free_blocks) {
      for (uint32_t b = 0; b < options.num_blocks; ++b) f.push_back(b);
    }
  }

  ~ConnectorHarness() {
    scheduler.reset();
    ranks.clear();
  }

  const KvGroup& group(size_t g) const { return options.layout.groups[g]; }
  size_t groups() const { return options.layout.groups.size(); }

  RequestId add_request(std::vector<TokenId> prompt, size_t max_new) {
    char id[32];
    std::snprintf(id, sizeof id, "r%06zu", next_request_++);
    SimRequest r{.id = id, .tokens = std::move(prompt), .max_new = max_new};
    r.prompt = r.tokens.size();
    r.blocks.resize(groups());
    r.blocks_given.assign(groups(), 0);
    extend_hashes(r);
    order.push_back(r.id);
    requests.emplace(r.id, std::move(r));
    return order.back();
  }

  static void extend_hashes(SimRequest& r) {
    while (r.prefix_hash.size() < r.tokens.size()) {
      const uint64_t prev = r.prefix_hash.empty() ? 0x1234 : r.prefix_hash.back();
      r.prefix_hash.push_back(
          mix64(prev ^ (uint64_t{r.tokens[r.prefix_hash.size()]} + 1) * 0x9e3779b97f4a7c15ULL));
    }
  }

  // The seed of one KV row: a pure function of the prefix up to position p, and where it lives.
  static uint64_t row_seed(uint64_t prefix_hash, uint32_t g, uint32_t layer, uint32_t kv,
                           uint32_t rank) {
    return mix64(prefix_hash ^ mix64((uint64_t{g} << 48) | (uint64_t{layer} << 32) |
                                     (uint64_t{kv} << 31) | rank));
  }

  bool allocate(SimRequest& r, size_t tokens) {
    std::vector<size_t> need(groups());
    for (size_t g = 0; g < groups(); ++g) {
      const size_t want = (tokens + group(g).block_size - 1) / group(g).block_size;
      need[g] = want > r.blocks[g].size() ? want - r.blocks[g].size() : 0;
      if (free_blocks[g].size() < need[g]) return false;
    }
    for (size_t g = 0; g < groups(); ++g) {
      for (size_t i = 0; i < need[g]; ++i) {
        r.blocks[g].push_back(free_blocks[g].front());
        free_blocks[g].pop_front();
      }
    }
    return true;
  }

  // A FAILED engine (F7) hands out no freed block again: copies that cannot be proven stopped
  // may still read or write it.
  void free_request_blocks(SimRequest& r) {
    const bool failed = scheduler->fail_stopped();
    for (size_t g = 0; g < groups(); ++g) {
      for (uint32_t b : r.blocks[g]) {
        if (failed) continue;
        if (options.reuse_freed_blocks_first) {
          free_blocks[g].push_front(b);
        } else {
          free_blocks[g].push_back(b);
        }
      }
      r.blocks[g].clear();
      r.blocks_given[g] = 0;
    }
  }

  GroupBlocks take_new_blocks(SimRequest& r) {
    GroupBlocks added(groups());
    for (size_t g = 0; g < groups(); ++g) {
      added[g].assign(r.blocks[g].begin() + static_cast<ptrdiff_t>(r.blocks_given[g]),
                      r.blocks[g].end());
      r.blocks_given[g] = r.blocks[g].size();
    }
    return added;
  }

  // The engine frees a running request's blocks and sends it back to waiting.
  void preempt(const RequestId& id) {
    SimRequest& r = requests.at(id);
    ASSERT_EQ(r.state, SimState::kRunning);
    scheduler->request_preempted(id);
    free_request_blocks(r);
    r.computed = 0;
    r.state = SimState::kWaiting;
  }

  size_t running() const {
    size_t n = 0;
    for (const auto& [id, r] : requests)
      n += r.state == SimState::kRunning || r.state == SimState::kLoading;
    return n;
  }

  void step() {
    StepInput input{.step = step_no};
    // Admit waiting requests: a cache match becomes a load.
    for (const RequestId& id : order) {
      SimRequest& r = requests.at(id);
      if (r.state != SimState::kWaiting || running() >= options.max_running) continue;
      const Match m = scheduler->get_num_new_matched_tokens(
          ConnectorRequest{.id = id, .tokens = r.tokens, .num_prompt_tokens = r.prompt}, 0);
      if (m.ask_later) {
        ++deferred;
        continue;
      }
      if (!allocate(r, r.tokens.size())) continue;
      take_new_blocks(r);
      if (after_match) after_match();
      scheduler->update_state_after_alloc(id, r.blocks, m.tokens);
      r.state = m.tokens > 0 ? SimState::kLoading : SimState::kRunning;
      // Layer-wise: computed in this step from the load's end, if the load still starts.
      if (m.tokens > 0 && layerwise()) {
        r.held_to = m.tokens;
        r.load_step = step_no;
      }
    }
    // Running requests compute a prefill chunk or one decode token.
    struct Scheduled {
      SimRequest* r;
      size_t from, to;
    };
    std::vector<Scheduled> scheduled;
    for (const RequestId& id : order) {
      SimRequest& r = requests.at(id);
      if (r.state == SimState::kLoading && r.load_step == step_no) {
        const size_t to = std::min<size_t>(r.held_to + options.prefill_chunk, r.tokens.size());
        scheduled.push_back({&r, r.held_to, to});
        input.requests.push_back(ScheduledRequest{.id = id,
                                                  .tokens = r.tokens,
                                                  .num_prompt_tokens = r.prompt,
                                                  .new_blocks = GroupBlocks(groups()),
                                                  .num_computed_after_step = to});
        continue;
      }
      if (r.state != SimState::kRunning) continue;
      const size_t n = std::min<size_t>(options.prefill_chunk, r.tokens.size() - r.computed);
      if (!allocate(r, r.computed + n)) continue;
      scheduled.push_back({&r, r.computed, r.computed + n});
      input.requests.push_back(ScheduledRequest{.id = id,
                                                .tokens = r.tokens,
                                                .num_prompt_tokens = r.prompt,
                                                .new_blocks = take_new_blocks(r),
                                                .num_computed_after_step = r.computed + n});
    }
    last_metadata = scheduler->build_step_metadata(input);
    for (const TransferJob& load : last_metadata.loads) load_jobs.emplace(load.job, load);
    for (auto& rank : ranks) {
      rank->worker->start_load(last_metadata);
      enqueue_forward(*rank, scheduled);
      rank->worker->queue_stores(last_metadata);
    }
    // The engine's bookkeeping of the step: KV computed, tokens sampled.
    std::vector<RequestId> finished;
    for (Scheduled& s : scheduled) {
      SimRequest& r = *s.r;
      if (r.state == SimState::kLoading) {
        r.held_to = s.to;  // kept until the load's verdict
        continue;
      }
      advance(r, s.to, finished);
    }
    collect_outputs(silent_ranks, std::move(finished));
    clock.advance(options.step_time);
    ++step_no;
  }

  bool layerwise() const { return options.granularity == TransferGranularity::kLayer; }

  // The engine's bookkeeping once `r` computed up to `to`: sample a token or finish.
  void advance(SimRequest& r, size_t to, std::vector<RequestId>& finished) {
    r.computed = to;
    if (r.computed < r.tokens.size()) return;
    if (r.tokens.size() - r.prompt >= r.max_new) {
      finished.push_back(r.id);
      return;
    }
    r.tokens.push_back(static_cast<TokenId>(mix64(r.prefix_hash.back()) % 50000));
    extend_hashes(r);
  }

  // The forward pass, layer by layer in model order (layer 0 of every group, then layer 1, …):
  // wait for the layer's loads, write the layer's KV on the compute stream, save the layer.
  // `before_layer(kv_layer)`, if set, runs on the compute stream before the layer's KV is
  // written (tests hold a layer's compute there).
  void enqueue_forward(Rank& rank, const std::vector<auto>& scheduled) {
    struct Row {
      std::byte* dst;
      size_t bytes;
      uint64_t seed;
    };
    uint32_t most_layers = 0;
    for (size_t g = 0; g < groups(); ++g) most_layers = std::max(most_layers, group(g).layers);
    for (uint32_t l = 0; l < most_layers; ++l) {
      for (uint32_t g = 0; g < groups(); ++g) {
        const KvGroup& k = group(g);
        if (l >= k.layers) continue;
        std::vector<Row> rows;
        for (const auto& s : scheduled) {
          const SimRequest& r = *s.r;
          for (size_t p = s.from; p < s.to; ++p) {
            const uint32_t block = r.blocks[g][p / k.block_size];
            for (uint32_t kv = 0; kv < 2; ++kv) {
              rows.push_back({rank.device_row(g, block, l, kv, p % k.block_size), rank.row_bytes(g),
                              row_seed(r.prefix_hash[p], g, l, kv, rank.index)});
            }
          }
        }
        rank.worker->wait_for_layer_load({g, l});
        rank.fault.launch_host_func(rank.compute, [this, g, l, rows = std::move(rows)] {
          if (before_layer) before_layer(KvLayer{g, l});
          for (const Row& row : rows) fill_pattern(row.dst, row.bytes, row.seed);
        });
        rank.worker->save_layer({g, l});
      }
    }
  }

  // Lets every rank's device run what can run, then hands the ranks' outputs to the scheduler.
  void collect_outputs(std::set<uint32_t> silent_ranks = {}, std::vector<RequestId> finished = {}) {
    std::vector<WorkerOutput> outputs;
    for (auto& rank : ranks) {
      rank->host.quiesce();
      WorkerOutput out = rank->worker->take_output();
      check_invalid_blocks_reported(out);
      if (silent_ranks.contains(rank->index)) {
        withheld.push_back(std::move(out));
        continue;
      }
      outputs.push_back(std::move(out));
    }
    if (silent_ranks.empty() && !extra_outputs.empty()) {
      outputs.insert(outputs.end(), extra_outputs.begin(), extra_outputs.end());
      extra_outputs.clear();
    }
    last_outcome = scheduler->update_from_worker_output(outputs);
    for (const LoadFinished& lf : last_outcome.loads) {
      SimRequest& r = requests.at(lf.request);
      ++r.loads;
      if (lf.outcome == Outcome::kUnprovable) {
        r.state = SimState::kAborted;  // F7: its blocks are never written or reused
        continue;
      }
      if (lf.outcome == Outcome::kFailed) ++failed_loads;
      r.computed = lf.num_computed;
      const size_t held = std::exchange(r.held_to, 0);
      if (r.state == SimState::kLoading) r.state = SimState::kRunning;
      // Layer-wise: what its load's step computed counts only if the load completed (F4).
      if (lf.outcome == Outcome::kCompleted && held > r.computed) advance(r, held, finished);
    }
    for (const RequestId& id : finished) {
      if (requests.contains(id)) finish(id);
    }
    for (const RequestId& id : last_outcome.released) {
      SimRequest& r = requests.at(id);
      free_request_blocks(r);
      erase(id);
    }
  }

  void finish(const RequestId& id) {
    SimRequest& r = requests.at(id);
    if (!hangs_injected()) check_request_bytes(r);
    if (scheduler->request_finished(id)) {
      r.state = SimState::kFinishing;
      return;
    }
    free_request_blocks(r);
    erase(id);
  }

  void erase(const RequestId& id) {
    order.erase(std::ranges::find(order, id));
    requests.erase(id);
  }

  bool hangs_injected() const {
    for (const auto& rank : ranks) {
      if (rank->fault.counts().hangs > 0) return true;
    }
    return false;
  }

  // F4: a rank that fails a load reports its destination blocks no later than the verdict.
  void check_invalid_blocks_reported(const WorkerOutput& out) {
    for (size_t g = 0; g < out.invalid_blocks.size(); ++g) {
      for (uint32_t b : out.invalid_blocks[g]) reported_invalid[out.rank].insert({g, b});
    }
    for (const JobVerdict& v : out.finished) {
      auto it = load_jobs.find(v.job);
      if (it == load_jobs.end() || v.outcome == Outcome::kCompleted) continue;
      for (const ChunkTransfer& c : it->second.chunks) {
        for (uint32_t b : c.blocks) {
          EXPECT_TRUE(reported_invalid[out.rank].erase({c.group, b}) == 1)
              << "rank " << out.rank << " failed load job " << v.job << " without reporting block "
              << b << " of group " << c.group;
        }
      }
    }
  }

  // The device rows of [0, computed) of `r` on every rank hold the fault-free bytes.
  void check_request_bytes(const SimRequest& r) const {
    for (const auto& rank : ranks) {
      for (size_t p = 0; p < r.computed; ++p) {
        for (uint32_t g = 0; g < groups(); ++g) {
          const KvGroup& k = group(g);
          const uint32_t block = r.blocks[g][p / k.block_size];
          for (uint32_t l = 0; l < k.layers; ++l) {
            for (uint32_t kv = 0; kv < 2; ++kv) {
              if (!has_pattern(rank->device_row(g, block, l, kv, p % k.block_size),
                               rank->row_bytes(g),
                               row_seed(r.prefix_hash[p], g, l, kv, rank->index))) {
                ADD_FAILURE() << "request " << r.id << " rank " << rank->index << " group " << g
                              << " position " << p << " layer " << l << " holds wrong KV";
                return;
              }
            }
          }
        }
      }
    }
  }

  // Keys of every full chunk of `tokens` in group g, as the scheduler side names them.
  std::vector<ChunkKey> keys_of(const std::vector<TokenId>& tokens, uint32_t g) const {
    return chunk_keys(
        KeyNamespace{
            .model = "harness", .layout_fingerprint = options.layout.fingerprint(), .group = g},
        tokens, group(g).chunk_tokens());
  }

  // F3: every readable chunk of `tokens` holds, on every rank, the bytes a fault-free run
  // writes. Returns the number of readable chunks checked.
  size_t check_readable_chunks(const std::vector<TokenId>& tokens) const {
    SimRequest shape;
    shape.tokens = tokens;
    extend_hashes(shape);
    size_t checked = 0;
    for (uint32_t g = 0; g < groups(); ++g) {
      const KvGroup& k = group(g);
      const std::vector<ChunkKey> keys = keys_of(tokens, g);
      for (size_t c = 0; c < keys.size(); ++c) {
        if (cache->state(keys[c]) != LookupState::kHit) continue;
        const SlotId slot = *cache->slot_of(keys[c]);
        ++checked;
        for (const auto& rank : ranks) {
          for (uint32_t j = 0; j < k.blocks_per_chunk; ++j) {
            for (uint32_t off = 0; off < k.block_size; ++off) {
              const size_t p = (c * k.blocks_per_chunk + j) * k.block_size + off;
              for (uint32_t l = 0; l < k.layers; ++l) {
                for (uint32_t kv = 0; kv < 2; ++kv) {
                  if (!has_pattern(rank->slot_row(slot, g, j, l, kv, off), rank->row_bytes(g),
                                   row_seed(shape.prefix_hash[p], g, l, kv, rank->index))) {
                    ADD_FAILURE() << "readable chunk " << c << " of group " << g << " (slot "
                                  << slot << ") holds wrong bytes on rank " << rank->index;
                    return checked;
                  }
                }
              }
            }
          }
        }
      }
    }
    return checked;
  }

  // Runs steps until every request finished (bounded; a failure names how many are left).
  void run_until_done(int max_steps = 300) {
    for (int i = 0; i < max_steps && !requests.empty(); ++i) step();
    ASSERT_TRUE(requests.empty()) << requests.size() << " requests left";
  }

  // Runs steps with no new work until every job reached a verdict (bounded).
  void drain(int max_steps = 400) {
    for (int i = 0; i < max_steps; ++i) {
      bool busy = scheduler->counters().jobs_in_flight > 0;
      for (const auto& rank : ranks) busy = busy || rank->worker->in_flight() > 0;
      if (!busy) return;
      StepMetadata empty{.step = step_no++};
      for (auto& rank : ranks) rank->worker->start_load(empty);
      collect_outputs();
      clock.advance(options.step_time);
    }
    ADD_FAILURE() << "jobs still in flight after " << max_steps << " steps";
  }

  // F12 at quiescence: scheduler side, cache manager and every rank's transfer engine.
  void expect_leases_conserved() {
    drain();
    Status s = scheduler->audit();
    EXPECT_TRUE(s) << s.error().message;
    for (const auto& rank : ranks) {
      Status w = rank->worker->audit();
      EXPECT_TRUE(w) << "rank " << rank->index << ": " << w.error().message;
    }
  }

  HarnessOptions options;
  ManualClock clock;
  std::unique_ptr<CacheManager> cache;
  std::unique_ptr<SchedulerConnector> scheduler;
  std::vector<std::unique_ptr<Rank>> ranks;
  std::vector<std::deque<uint32_t>> free_blocks;
  std::map<RequestId, SimRequest> requests;
  std::vector<RequestId> order;  // admission order
  StepMetadata last_metadata;
  StepOutcome last_outcome;
  std::map<JobId, TransferJob> load_jobs;  // every load job ever issued, for checks
  std::map<uint32_t, std::set<std::pair<size_t, uint32_t>>> reported_invalid;
  std::set<uint32_t> silent_ranks;            // their outputs are withheld from the scheduler
  std::vector<WorkerOutput> withheld;         // outputs of silent ranks
  std::vector<WorkerOutput> extra_outputs;    // handed to the scheduler with the next step's
  std::function<void(KvLayer)> before_layer;  // on the compute stream, see enqueue_forward
  std::function<void()> after_match;          // between a request's lookup and its blocks' load
  uint64_t step_no = 0;
  uint64_t deferred = 0;
  uint64_t failed_loads = 0;
  size_t next_request_ = 0;
};

}  // namespace kvtier::testing
