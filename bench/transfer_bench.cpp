#include "transfer_bench.h"

#include "bench_row.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <numeric>
#include <random>
#include <thread>

#include "kvtier/device/host_device.h"
#include "kvtier/transfer/transfer_engine.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A model shape whose block is 16 KiB over 4 layers (4 KiB per layer-block); the chunk size
// is set by blocks_per_chunk.
KvLayout bench_layout(DeviceLayout device_layout, size_t chunk_bytes) {
  KvGroup g{.layers = 4, .kv_heads = 1, .head_dim = 64, .dtype_bytes = 2, .block_size = 16};
  g.blocks_per_chunk = static_cast<uint32_t>(std::max<size_t>(1, chunk_bytes / g.block_bytes()));
  return KvLayout{device_layout, {g}};
}

struct Setup {
  Setup(HostDevice& device, const KvLayout& layout, size_t total_bytes) : device(device) {
    const KvGroup& g = layout.groups[0];
    num_chunks = static_cast<uint32_t>(std::max<size_t>(1, total_bytes / g.chunk_bytes()));
    const uint32_t num_blocks = num_chunks * g.blocks_per_chunk;
    GroupCacheAddresses cache{.num_blocks = num_blocks};
    const bool per_layer = layout.device_layout == DeviceLayout::kPerLayer;
    const size_t tensors = per_layer ? g.layers : 1;
    const size_t tensor_bytes = size_t{num_blocks} * (per_layer ? g.layer_block_bytes() : g.block_bytes());
    for (size_t i = 0; i < tensors; ++i) {
      cache.bases.push_back(device.allocate(tensor_bytes));
      std::memset(reinterpret_cast<void*>(cache.bases.back()), int(i + 1), tensor_bytes);
    }
    caches.groups.push_back(cache);
    const size_t pool_bytes = size_t{num_chunks} * g.chunk_bytes();
    host = static_cast<std::byte*>(std::aligned_alloc(4096, (pool_bytes + 4095) / 4096 * 4096));
    std::memset(host, 0, pool_bytes);
    slots = HostSlots{device.register_host(host, pool_bytes), g.chunk_bytes(), num_chunks};
    // Consecutive blocks inside a chunk (as prefill allocates them); chunks land in shuffled
    // slots, as a warm pool hands them out.
    std::vector<uint32_t> slot_order(num_chunks);
    std::iota(slot_order.begin(), slot_order.end(), 0);
    std::shuffle(slot_order.begin(), slot_order.end(), std::mt19937(1234));
    for (uint32_t c = 0; c < num_chunks; ++c) {
      ChunkTransfer t{.group = 0, .slot = slot_order[c]};
      for (uint32_t j = 0; j < g.blocks_per_chunk; ++j) t.blocks.push_back(c * g.blocks_per_chunk + j);
      chunks.push_back(std::move(t));
    }
  }
  ~Setup() {
    device.unregister_host(host);
    std::free(host);
    for (DeviceAddress a : caches.groups[0].bases) device.free(a);
  }
  HostDevice& device;
  uint32_t num_chunks = 0;
  KvCacheAddresses caches;
  std::byte* host = nullptr;
  HostSlots slots;
  std::vector<ChunkTransfer> chunks;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Submits every chunk in jobs of `chunks_per_job` and polls until all completed.
double time_engine(TransferEngine& engine, const Setup& s, Direction dir, JobId& next_job) {
  constexpr size_t kChunksPerJob = 16;
  const std::span<const ChunkTransfer> all(s.chunks);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < all.size(); i += kChunksPerJob) {
    engine.submit(next_job++, dir, all.subspan(i, std::min(kChunksPerJob, all.size() - i)));
  }
  while (engine.in_flight() > 0) {
    for (const TransferResult& r : engine.poll()) {
      if (r.outcome != Outcome::kCompleted) throw std::runtime_error("bench transfer: " + r.error);
    }
    std::this_thread::yield();
  }
  return seconds_since(t0);
}

double time_memcpy(const std::vector<CopyDescriptor>& descriptors) {
  const auto t0 = Clock::now();
  for (const CopyDescriptor& d : descriptors) {
    std::memcpy(reinterpret_cast<void*>(d.dst), reinterpret_cast<const void*>(d.src), d.bytes);
  }
  return seconds_since(t0);
}

}  // namespace

int run_transfer_bench(const TransferBenchOptions& o, std::ostream& out) {
  HostDevice device(o.max_batch_descriptors);
  const StreamHandle compute = device.create_stream();
  JobId next_job = 1;
  if (!o.json) out << "transfer engine on the host device vs memcpy of the same descriptors\n";
  for (DeviceLayout layout_kind : {DeviceLayout::kPerLayer, DeviceLayout::kCrossLayer}) {
    for (size_t chunk_bytes : o.chunk_bytes) {
      const KvLayout layout = bench_layout(layout_kind, chunk_bytes);
      Setup s(device, layout, o.total_bytes);
      TransferEngine engine(device, layout, s.caches, s.slots, compute,
                            TransferOptions{.max_batch_descriptors = o.max_batch_descriptors});
      for (Direction dir : {Direction::kStore, Direction::kLoad}) {
        const auto descriptors =
            build_copy_descriptors(layout, s.caches, s.slots, dir, s.chunks, true);
        double best_engine = 1e30, best_memcpy = 1e30;
        time_engine(engine, s, dir, next_job);  // warm pools and pages
        for (int r = 0; r < o.repeat; ++r) {    // interleaved: both sides see the same noise
          best_memcpy = std::min(best_memcpy, time_memcpy(descriptors));
          best_engine = std::min(best_engine, time_engine(engine, s, dir, next_job));
        }
        const double bytes = double(s.num_chunks) * layout.groups[0].chunk_bytes();
        const double kvtier_gbps = bytes / best_engine / 1e9;
        const double memcpy_gbps = bytes / best_memcpy / 1e9;
        emit(out, o.json,
             {{"bench", "transfer"},
              {"layout", to_string(layout_kind)},
              {"chunk_bytes", layout.groups[0].chunk_bytes()},
              {"direction", to_string(dir)},
              {"descriptors", descriptors.size()},
              {"kvtier_gbps", kvtier_gbps},
              {"memcpy_gbps", memcpy_gbps},
              {"ratio", kvtier_gbps / memcpy_gbps}});
      }
    }
  }
  // Submission cost with and without coalescing: the same store, descriptor-bound.
  if (!o.json) out << "\ndescriptor throughput with and without coalescing (store)\n";
  for (DeviceLayout layout_kind : {DeviceLayout::kPerLayer, DeviceLayout::kCrossLayer}) {
    const size_t chunk_bytes = 256 << 10;
    const KvLayout layout = bench_layout(layout_kind, chunk_bytes);
    Setup s(device, layout, o.total_bytes);
    for (bool coalesce : {false, true}) {
      TransferEngine engine(device, layout, s.caches, s.slots, compute,
                            TransferOptions{.max_batch_descriptors = o.max_batch_descriptors,
                                            .coalesce = coalesce});
      const size_t descriptors =
          build_copy_descriptors(layout, s.caches, s.slots, Direction::kStore, s.chunks, coalesce)
              .size();
      double best = 1e30;
      time_engine(engine, s, Direction::kStore, next_job);
      for (int r = 0; r < o.repeat; ++r) {
        best = std::min(best, time_engine(engine, s, Direction::kStore, next_job));
      }
      const double bytes = double(s.num_chunks) * layout.groups[0].chunk_bytes();
      emit(out, o.json,
           {{"bench", "transfer_coalescing"},
            {"layout", to_string(layout_kind)},
            {"chunk_bytes", layout.groups[0].chunk_bytes()},
            {"coalesce", coalesce},
            {"descriptors", descriptors},
            {"descriptors_per_s", descriptors / best},
            {"chunks_per_s", s.num_chunks / best},
            {"kvtier_gbps", bytes / best / 1e9}});
    }
  }
  return 0;
}

}  // namespace kvtier::bench
