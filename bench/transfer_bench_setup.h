// Pieces the transfer benchmarks share: the benchmark's model shape, a device cache + pinned
// host slots for it, timing the transfer engine over them, and printing one row.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <numeric>
#include <ostream>
#include <random>
#include <sstream>
#include <thread>

#include "bench_row.h"
#include "kvtier/device/device.h"
#include "kvtier/transfer/transfer_engine.h"

namespace kvtier::bench {

using BenchClock = std::chrono::steady_clock;

// A model shape whose block is 16 KiB over 4 layers (4 KiB per layer-block); the chunk size
// is set by blocks_per_chunk.
inline KvLayout bench_layout(DeviceLayout device_layout, size_t chunk_bytes) {
  KvGroup g{.layers = 4, .kv_heads = 1, .head_dim = 64, .dtype_bytes = 2, .block_size = 16};
  g.blocks_per_chunk = static_cast<uint32_t>(std::max<size_t>(1, chunk_bytes / g.block_bytes()));
  return KvLayout{device_layout, {g}};
}

// A device cache of `total_bytes` (one group) and a pinned host pool of as many chunk slots.
// `touch_device_memory`: write the device tensors through their addresses (the host device,
// whose device memory is process memory), so every page is real before timing.
struct Setup {
  Setup(Device& device, const KvLayout& layout, size_t total_bytes, bool touch_device_memory)
      : device(device) {
    const KvGroup& g = layout.groups[0];
    num_chunks = static_cast<uint32_t>(std::max<size_t>(1, total_bytes / g.chunk_bytes()));
    const uint32_t num_blocks = num_chunks * g.blocks_per_chunk;
    GroupCacheAddresses cache{.num_blocks = num_blocks};
    const size_t tensor_bytes = layout.tensor_bytes(0, num_blocks).value();
    for (size_t i = 0; i < layout.tensors_per_group(0); ++i) {
      cache.bases.push_back(device.allocate(tensor_bytes));
      if (touch_device_memory) {
        std::memset(reinterpret_cast<void*>(cache.bases.back()), int(i + 1), tensor_bytes);
      }
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
      for (uint32_t j = 0; j < g.blocks_per_chunk; ++j)
        t.blocks.push_back(c * g.blocks_per_chunk + j);
      chunks.push_back(std::move(t));
    }
  }
  ~Setup() {
    device.unregister_host(host);
    std::free(host);
    for (DeviceAddress a : caches.groups[0].bases) device.free(a);
  }
  Device& device;
  uint32_t num_chunks = 0;
  KvCacheAddresses caches;
  std::byte* host = nullptr;
  HostSlots slots;
  std::vector<ChunkTransfer> chunks;
};

inline double seconds_since(BenchClock::time_point t0) {
  return std::chrono::duration<double>(BenchClock::now() - t0).count();
}

// Submits every chunk in jobs of `chunks_per_job` and polls until all completed.
inline double time_engine(TransferEngine& engine, const Setup& s, Direction dir, JobId& next_job) {
  constexpr size_t kChunksPerJob = 16;
  const std::span<const ChunkTransfer> all(s.chunks);
  const auto t0 = BenchClock::now();
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

}  // namespace kvtier::bench
