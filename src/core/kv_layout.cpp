#include "kvtier/core/kv_layout.h"

#include <xxhash.h>

#include <algorithm>

namespace kvtier {

std::string_view to_string(DeviceLayout layout) {
  return layout == DeviceLayout::kPerLayer ? "per_layer" : "cross_layer";
}

Result<DeviceLayout> parse_device_layout(std::string_view name) {
  if (name == "per_layer") return DeviceLayout::kPerLayer;
  if (name == "cross_layer") return DeviceLayout::kCrossLayer;
  return make_error(
      ErrorCode::kInvalidArgument,
      "device layout must be 'per_layer' or 'cross_layer', got '" + std::string(name) + "'");
}

Status KvLayout::validate() const {
  if (groups.empty()) return make_error(ErrorCode::kInvalidArgument, "layout: no KV-cache groups");
  for (size_t g = 0; g < groups.size(); ++g) {
    const KvGroup& k = groups[g];
    const std::pair<const char*, uint32_t> fields[] = {
        {"layers", k.layers},         {"kv_heads", k.kv_heads},
        {"head_dim", k.head_dim},     {"dtype_bytes", k.dtype_bytes},
        {"block_size", k.block_size}, {"blocks_per_chunk", k.blocks_per_chunk}};
    for (const auto& [name, value] : fields) {
      if (value == 0) {
        return make_error(ErrorCode::kInvalidArgument,
                          "layout.groups[" + std::to_string(g) + "]." + name + " must be > 0");
      }
    }
  }
  return {};
}

size_t KvLayout::max_chunk_bytes() const {
  size_t m = 0;
  for (const KvGroup& g : groups) m = std::max(m, g.chunk_bytes());
  return m;
}

uint64_t KvLayout::fingerprint() const {
  std::vector<uint32_t> words{static_cast<uint32_t>(device_layout),
                              static_cast<uint32_t>(groups.size())};
  for (const KvGroup& g : groups) {
    words.insert(words.end(), {g.layers, g.kv_heads, g.head_dim, g.dtype_bytes, g.block_size,
                               g.blocks_per_chunk});
  }
  return XXH3_64bits(words.data(), words.size() * sizeof(uint32_t));
}

}  // namespace kvtier
