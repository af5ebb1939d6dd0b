#include "kvtier/core/kv_layout.h"

#include <xxhash.h>

#include <algorithm>

namespace kvtier {
namespace {

// a * b, or kInvalidArgument naming `what` when the product does not fit in size_t.
Result<size_t> checked_mul(size_t a, size_t b, const std::string& what) {
  size_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) {
    return make_error(
        ErrorCode::kInvalidArgument,
        what + " overflows size_t (" + std::to_string(a) + " * " + std::to_string(b) + ")");
  }
  return product;
}

// KvGroup::chunk_bytes() computed factor by factor with every product checked.
Result<size_t> checked_chunk_bytes(const KvGroup& k, const std::string& what) {
  size_t bytes = 2;
  for (uint32_t factor :
       {k.block_size, k.kv_heads, k.head_dim, k.dtype_bytes, k.layers, k.blocks_per_chunk}) {
    Result<size_t> next = checked_mul(bytes, factor, what);
    if (!next) return next;
    bytes = *next;
  }
  return bytes;
}

}  // namespace

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
    Result<size_t> chunk =
        checked_chunk_bytes(k, "layout.groups[" + std::to_string(g) + "] chunk bytes");
    if (!chunk) return std::unexpected(chunk.error());
  }
  return {};
}

size_t KvLayout::tensors_per_group(size_t group) const {
  return device_layout == DeviceLayout::kPerLayer ? groups.at(group).layers : 1;
}

size_t KvLayout::tensor_block_bytes(size_t group) const {
  const KvGroup& g = groups.at(group);
  return device_layout == DeviceLayout::kPerLayer ? g.layer_block_bytes() : g.block_bytes();
}

Result<size_t> KvLayout::tensor_bytes(size_t group, uint32_t num_blocks) const {
  const std::string what = "layout.groups[" + std::to_string(group) + "] tensor bytes";
  // Checked even for a layout that was never validated: a wrapped size would be allocated.
  if (Result<size_t> chunk = checked_chunk_bytes(groups.at(group), what); !chunk) return chunk;
  return checked_mul(tensor_block_bytes(group), num_blocks, what);
}

Result<size_t> KvLayout::total_bytes(uint32_t num_blocks) const {
  size_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    Result<size_t> tensor = tensor_bytes(g, num_blocks);
    if (!tensor) return tensor;
    Result<size_t> group_bytes = checked_mul(*tensor, tensors_per_group(g),
                                             "layout.groups[" + std::to_string(g) + "] bytes");
    if (!group_bytes) return group_bytes;
    if (__builtin_add_overflow(total, *group_bytes, &total)) {
      return make_error(ErrorCode::kInvalidArgument, "layout total bytes overflow size_t");
    }
  }
  return total;
}

size_t KvLayout::max_chunk_bytes() const {
  size_t m = 0;
  for (const KvGroup& g : groups) m = std::max(m, g.chunk_bytes());
  return m;
}

uint32_t KvLayout::max_blocks_per_chunk() const {
  uint32_t n = 1;
  for (const KvGroup& g : groups) n = std::max(n, g.blocks_per_chunk);
  return n;
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
