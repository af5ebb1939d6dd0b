// KvLayout: the shape of the KV cache one rank holds, and where a block's bytes live.
//
// Device layouts (per KV-cache group):
//   kPerLayer   one tensor per layer, [num_blocks, 2, block_size, kv_heads, head_dim]; a block of
//               one layer is `layer_block_bytes()` contiguous bytes.
//   kCrossLayer one tensor, [num_blocks, layers, 2, block_size, kv_heads, head_dim]; a block
//               holds all layers, `block_bytes()` contiguous bytes.
// Host slot layout (one chunk of one group) mirrors the device layout so that runs of
// consecutive device blocks are contiguous on both sides:
//   kPerLayer   [layers][blocks_per_chunk][layer_block_bytes]
//   kCrossLayer [blocks_per_chunk][block_bytes]
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/status.h"

namespace kvtier {

enum class DeviceLayout { kPerLayer, kCrossLayer };

std::string_view to_string(DeviceLayout layout);
Result<DeviceLayout> parse_device_layout(std::string_view name);

struct KvGroup {
  uint32_t layers = 0;
  uint32_t kv_heads = 0;  // KV heads held by this rank
  uint32_t head_dim = 0;
  uint32_t dtype_bytes = 0;
  uint32_t block_size = 0;        // tokens per block
  uint32_t blocks_per_chunk = 0;  // blocks per offload chunk

  size_t layer_block_bytes() const {
    return size_t{2} * block_size * kv_heads * head_dim * dtype_bytes;
  }
  size_t block_bytes() const { return layer_block_bytes() * layers; }
  size_t chunk_bytes() const { return block_bytes() * blocks_per_chunk; }
  size_t chunk_tokens() const { return size_t{block_size} * blocks_per_chunk; }
};

struct KvLayout {
  DeviceLayout device_layout = DeviceLayout::kPerLayer;
  std::vector<KvGroup> groups;

  // Every field nonzero, at least one group, and a chunk's bytes (hence a block's and a layer
  // block's) fit in size_t. The message names the offending field or group.
  Status validate() const;

  // KV-cache allocation: every engine, rig and benchmark allocates a group's device cache as
  // tensors_per_group() tensors of tensor_bytes() each, and addresses block b of a tensor at
  // b * tensor_block_bytes(). `group` indexes `groups` (std::out_of_range otherwise).
  //
  // Device tensors one group's KV cache is made of: `layers` (kPerLayer) or 1 (kCrossLayer).
  size_t tensors_per_group(size_t group) const;
  // Bytes of one block in one tensor: layer_block_bytes() (kPerLayer) or block_bytes()
  // (kCrossLayer). Precondition: validate() passed (so the product cannot overflow).
  size_t tensor_block_bytes(size_t group) const;
  // Bytes one tensor of `group` spans with `num_blocks` blocks. kInvalidArgument when the
  // product overflows size_t (or a group field multiplies past it): never a wrapped size.
  Result<size_t> tensor_bytes(size_t group, uint32_t num_blocks) const;
  // Bytes of every tensor of every group, each group with `num_blocks` blocks: what one rank's
  // device KV cache takes. kInvalidArgument on overflow, as tensor_bytes.
  Result<size_t> total_bytes(uint32_t num_blocks) const;

  // Largest chunk of any group: the host slot size.
  size_t max_chunk_bytes() const;
  // Most blocks in one chunk of any group (at least 1).
  uint32_t max_blocks_per_chunk() const;
  // Hash of every field: part of each ChunkKey's namespace, so differently shaped KV never
  // shares keys.
  uint64_t fingerprint() const;
};

}  // namespace kvtier
