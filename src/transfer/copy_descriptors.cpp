#include "kvtier/transfer/copy_descriptors.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace kvtier {

std::string_view to_string(Direction d) {
  return d == Direction::kStore ? "store" : "load";
}

void validate_addresses(const KvLayout& layout, const KvCacheAddresses& caches,
                        const HostSlots& slots) {
  if (caches.groups.size() != layout.groups.size()) {
    throw std::invalid_argument("KV cache addresses: " + std::to_string(caches.groups.size()) +
                                " groups, layout has " + std::to_string(layout.groups.size()));
  }
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    const size_t want = layout.tensors_per_group(g);
    if (caches.groups[g].bases.size() != want) {
      throw std::invalid_argument("KV cache addresses: group " + std::to_string(g) + " has " +
                                  std::to_string(caches.groups[g].bases.size()) +
                                  " base addresses, its layout needs " + std::to_string(want));
    }
  }
  if (slots.slot_bytes < layout.max_chunk_bytes()) {
    throw std::invalid_argument("host slots of " + std::to_string(slots.slot_bytes) +
                                " bytes cannot hold a chunk of " +
                                std::to_string(layout.max_chunk_bytes()) + " bytes");
  }
}

namespace {

// One copy of `bytes` between `device`, in the KV cache tensor that starts at `tensor`, and
// `host`. With `coalesce` it extends the last copy where both sides continue it and the device
// side stays in the same tensor: two tensors that happen to lie back to back are still two
// allocations, and a device checks each copy against one registered range.
void append(std::vector<CopyDescriptor>& out, DeviceAddress& last_tensor, DeviceAddress tensor,
            DeviceAddress device, DeviceAddress host, uint64_t bytes, Direction direction,
            bool coalesce) {
  const DeviceAddress src = direction == Direction::kStore ? device : host;
  const DeviceAddress dst = direction == Direction::kStore ? host : device;
  const bool same_tensor = std::exchange(last_tensor, tensor) == tensor;
  if (coalesce && same_tensor && !out.empty()) {
    CopyDescriptor& last = out.back();
    if (last.src + last.bytes == src && last.dst + last.bytes == dst) {
      last.bytes += bytes;
      return;
    }
  }
  out.push_back(CopyDescriptor{src, dst, bytes});
}

void check_chunk_transfer(const KvLayout& layout, const KvCacheAddresses& caches,
                          const HostSlots& slots, const ChunkTransfer& chunk) {
  if (chunk.group >= layout.groups.size() || chunk.group >= caches.groups.size()) {
    throw std::invalid_argument("chunk transfer: group " + std::to_string(chunk.group) +
                                " does not exist");
  }
  const KvGroup& g = layout.groups[chunk.group];
  if (chunk.first_block >= g.blocks_per_chunk ||
      chunk.blocks.size() != g.blocks_per_chunk - chunk.first_block) {
    throw std::invalid_argument("chunk transfer: " + std::to_string(chunk.blocks.size()) +
                                " blocks from block " + std::to_string(chunk.first_block) +
                                ", a chunk of group " + std::to_string(chunk.group) + " has " +
                                std::to_string(g.blocks_per_chunk));
  }
  if (chunk.slot >= slots.num_slots) {
    throw std::invalid_argument("chunk transfer: slot " + std::to_string(chunk.slot) +
                                " out of range (" + std::to_string(slots.num_slots) + ")");
  }
  for (uint32_t b : chunk.blocks) {
    if (b >= caches.groups[chunk.group].num_blocks) {
      throw std::invalid_argument("chunk transfer: block " + std::to_string(b) + " out of range (" +
                                  std::to_string(caches.groups[chunk.group].num_blocks) + ")");
    }
  }
  const bool one_layer = chunk.layer != ChunkTransfer::kAllLayers;
  if (one_layer && chunk.layer >= g.layers) {
    throw std::invalid_argument("chunk transfer: layer " + std::to_string(chunk.layer) +
                                " out of range (group " + std::to_string(chunk.group) + " has " +
                                std::to_string(g.layers) + ")");
  }
}

}  // namespace

void check_chunk_transfers(const KvLayout& layout, const KvCacheAddresses& caches,
                           const HostSlots& slots, std::span<const ChunkTransfer> chunks) {
  for (const ChunkTransfer& chunk : chunks) check_chunk_transfer(layout, caches, slots, chunk);
}

std::vector<CopyDescriptor> build_copy_descriptors(const KvLayout& layout,
                                                   const KvCacheAddresses& caches,
                                                   const HostSlots& slots, Direction direction,
                                                   std::span<const ChunkTransfer> chunks,
                                                   bool coalesce) {
  std::vector<CopyDescriptor> out;
  DeviceAddress last_tensor = 0;  // of the last copy
  for (const ChunkTransfer& chunk : chunks) {
    check_chunk_transfer(layout, caches, slots, chunk);
    const KvGroup& g = layout.groups[chunk.group];
    const GroupCacheAddresses& cache = caches.groups[chunk.group];
    const bool one_layer = chunk.layer != ChunkTransfer::kAllLayers;
    const uint32_t first_layer = one_layer ? chunk.layer : 0;
    const uint32_t end_layer = one_layer ? chunk.layer + 1 : g.layers;
    const DeviceAddress slot = slots.base + uint64_t{chunk.slot} * slots.slot_bytes;
    if (layout.device_layout == DeviceLayout::kPerLayer) {
      const uint64_t piece = g.layer_block_bytes();
      for (uint32_t l = first_layer; l < end_layer; ++l) {
        const DeviceAddress host_layer = slot + uint64_t{l} * g.blocks_per_chunk * piece;
        for (uint32_t j = chunk.first_block; j < g.blocks_per_chunk; ++j) {
          append(out, last_tensor, cache.bases[l],
                 cache.bases[l] + chunk.blocks[j - chunk.first_block] * piece,
                 host_layer + j * piece, piece, direction, coalesce);
        }
      }
    } else if (one_layer) {
      // One layer of a cross-layer block: layer_block_bytes() at the layer's offset, both sides.
      const uint64_t piece = g.layer_block_bytes();
      const uint64_t offset = uint64_t{chunk.layer} * piece;
      for (uint32_t j = chunk.first_block; j < g.blocks_per_chunk; ++j) {
        append(out, last_tensor, cache.bases[0],
               cache.bases[0] + chunk.blocks[j - chunk.first_block] * g.block_bytes() + offset,
               slot + j * g.block_bytes() + offset, piece, direction, coalesce);
      }
    } else {
      const uint64_t piece = g.block_bytes();
      for (uint32_t j = chunk.first_block; j < g.blocks_per_chunk; ++j) {
        append(out, last_tensor, cache.bases[0],
               cache.bases[0] + chunk.blocks[j - chunk.first_block] * piece, slot + j * piece,
               piece, direction, coalesce);
      }
    }
  }
  return out;
}

}  // namespace kvtier
