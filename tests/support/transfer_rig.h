// TransferRig: a host device behind the fault injector, one KV-cache group on the device, a
// registered host slot area, a compute stream and a TransferEngine over them, plus helpers to
// write and check block and slot bytes. Layer order matters for teardown: the engine goes
// first, then the injector (which releases hung copies), then the device.
#pragma once

#include <cstdlib>
#include <memory>
#include <vector>

#include "kvtier/device/fault_injecting_device.h"
#include "kvtier/device/host_device.h"
#include "kvtier/transfer/transfer_engine.h"
#include "support/byte_pattern.h"

namespace kvtier::testing {

inline KvLayout small_layout(DeviceLayout device_layout, uint32_t blocks_per_chunk = 4) {
  KvLayout layout;
  layout.device_layout = device_layout;
  layout.groups.push_back(KvGroup{.layers = 3,
                                  .kv_heads = 2,
                                  .head_dim = 8,
                                  .dtype_bytes = 2,
                                  .block_size = 4,
                                  .blocks_per_chunk = blocks_per_chunk});
  return layout;
}

struct RigOptions {
  DeviceLayout device_layout = DeviceLayout::kPerLayer;
  uint32_t blocks_per_chunk = 4;
  uint32_t num_blocks = 64;
  uint32_t num_slots = 16;
  TransferOptions transfer{};
  FaultPlan plan{};
};

class TransferRig {
 public:
  explicit TransferRig(RigOptions options = {})
      : layout(small_layout(options.device_layout, options.blocks_per_chunk)),
        fault(host, std::move(options.plan)) {
    GroupCacheAddresses cache{.num_blocks = options.num_blocks};
    const size_t tensor_bytes = layout.tensor_bytes(0, options.num_blocks).value();
    for (size_t i = 0; i < layout.tensors_per_group(0); ++i) {
      cache.bases.push_back(fault.allocate(tensor_bytes));
    }
    caches.groups.push_back(cache);
    slot_bytes = layout.max_chunk_bytes();
    host_memory = static_cast<std::byte*>(
        std::aligned_alloc(4096, (slot_bytes * options.num_slots + 4095) / 4096 * 4096));
    std::memset(host_memory, 0, slot_bytes * options.num_slots);
    slots = HostSlots{fault.register_host(host_memory, slot_bytes * options.num_slots), slot_bytes,
                      options.num_slots};
    compute = fault.create_stream();
    engine = std::make_unique<TransferEngine>(fault, layout, caches, slots, compute,
                                              options.transfer, clock);
  }

  ~TransferRig() {
    engine.reset();
    fault.release_hangs();
    host.quiesce();
    std::free(host_memory);
  }

  const KvGroup& group() const { return layout.groups[0]; }

  // Bytes of `block` in `layer` (kPerLayer) or of the whole block (kCrossLayer, layer == 0).
  std::byte* block_piece(uint32_t block, uint32_t layer = 0) const {
    return reinterpret_cast<std::byte*>(caches.groups[0].bases.at(layer) +
                                        uint64_t{block} * layout.tensor_block_bytes(0));
  }
  size_t piece_bytes() const { return layout.tensor_block_bytes(0); }
  uint32_t pieces_per_block() const { return static_cast<uint32_t>(layout.tensors_per_group(0)); }
  // The seed a block's piece carries when written by write_block(block, seed).
  static uint64_t piece_seed(uint64_t seed, uint32_t piece) { return seed * 131 + piece; }

  void write_block(uint32_t block, uint64_t seed) const {
    for (uint32_t p = 0; p < pieces_per_block(); ++p) {
      fill_pattern(block_piece(block, p), piece_bytes(), piece_seed(seed, p));
    }
  }
  bool block_has(uint32_t block, uint64_t seed) const {
    for (uint32_t p = 0; p < pieces_per_block(); ++p) {
      if (!has_pattern(block_piece(block, p), piece_bytes(), piece_seed(seed, p))) return false;
    }
    return true;
  }
  std::byte* slot_ptr(uint32_t slot) const { return host_memory + size_t{slot} * slot_bytes; }

  // A chunk of consecutive blocks [first_block, first_block + blocks_per_chunk) <-> slot.
  ChunkTransfer chunk(uint32_t first_block, uint32_t slot) const {
    ChunkTransfer c{.group = 0, .slot = slot};
    for (uint32_t j = 0; j < group().blocks_per_chunk; ++j) c.blocks.push_back(first_block + j);
    return c;
  }

  // Polls (letting the device finish whatever can run first) until nothing is in flight, at
  // most `max_rounds` times; returns every result in the order poll() gave them.
  std::vector<TransferResult> drain(int max_rounds = 16) {
    std::vector<TransferResult> all;
    for (int i = 0; i < max_rounds && engine->in_flight() > 0; ++i) {
      host.quiesce();
      auto got = engine->poll();
      all.insert(all.end(), std::make_move_iterator(got.begin()),
                 std::make_move_iterator(got.end()));
    }
    return all;
  }

  ManualClock clock;
  KvLayout layout;
  HostDevice host;
  FaultInjectingDevice fault;
  KvCacheAddresses caches;
  size_t slot_bytes = 0;
  std::byte* host_memory = nullptr;
  HostSlots slots;
  StreamHandle compute;
  std::unique_ptr<TransferEngine> engine;
};

}  // namespace kvtier::testing
