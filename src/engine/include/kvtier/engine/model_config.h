// ModelConfig: the shape of the tiny test/demo transformer (engine/model) and the KV it keeps.
//
// The model is decoder-only, pre-norm (RMSNorm), rotary positions, grouped-query attention and
// a SiLU MLP, float32 on the CPU, weights drawn from `seed`. Layers belong to KV-cache groups:
//   sliding_window == 0  one group: every layer attends to the whole prefix.
//   sliding_window == W  hybrid: even layers (0, 2, …) are full attention (group 0), odd layers
//                        (1, 3, …) attend to the last W positions (group 1). Each group has its
//                        own block size and block table.
// Tensor parallelism splits KV heads (with their query heads) and MLP units over `world_size`
// ranks; see tiny_model.h for what each rank computes.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kvtier/core/kv_layout.h"
#include "kvtier/core/status.h"

namespace kvtier {

// Byte-level vocabulary: one token per byte value (byte_vocab.h).
inline constexpr uint32_t kVocabSize = 256;

struct ModelConfig {
  uint32_t layers = 4;
  uint32_t q_heads = 2;
  uint32_t kv_heads = 2;  // q_heads % kv_heads == 0 (GQA)
  uint32_t head_dim = 16;
  uint32_t hidden = 64;
  uint32_t mlp_dim = 128;
  uint32_t max_context = 16384;  // most positions a sequence may have
  uint32_t sliding_window = 0;   // 0: single full-attention group; W > 0: hybrid (see above)
  uint64_t seed = 1;

  // Every field in range; the message names the offending field (e.g. "model.kv_heads").
  Status validate() const;
  // As validate(), plus: world_size > 0 and divides kv_heads and mlp_dim.
  Status validate_for(uint32_t world_size) const;

  // Names everything that shapes the KV (not max_context), for KeyNamespace::model: two
  // configs with the same id compute the same KV. E.g. "tiny-l4-q2-kv2-d16-h64-m128-w0-s1".
  std::string model_id() const;

  uint32_t num_kv_groups() const { return sliding_window == 0 ? 1 : 2; }
  // The KV-cache group layer `layer` writes, and its index among that group's layers.
  uint32_t group_of_layer(uint32_t layer) const;
  uint32_t index_in_group(uint32_t layer) const;
  uint32_t layers_in_group(uint32_t group) const;
  // Positions a query of `group` attends to before itself: 0 = unlimited.
  uint32_t window_of_group(uint32_t group) const { return group == 0 ? 0 : sliding_window; }

  // What one rank of `world_size` holds for `group`: its share of the KV heads, float32.
  // Throws std::invalid_argument when validate_for(world_size) fails or group is out of range.
  KvGroup kv_group(uint32_t group, uint32_t block_size, uint32_t blocks_per_chunk,
                   uint32_t world_size) const;
};

// Block size and chunk length of one KV-cache group.
struct GroupBlocking {
  uint32_t block_size = 16;
  uint32_t blocks_per_chunk = 16;
};

// The per-rank KvLayout: one KvGroup per KV-cache group, `blocking` indexed like the groups
// (exactly num_kv_groups() entries, else std::invalid_argument).
KvLayout model_kv_layout(const ModelConfig& config, DeviceLayout device_layout,
                         std::span<const GroupBlocking> blocking, uint32_t world_size);

}  // namespace kvtier
