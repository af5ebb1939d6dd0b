#include "kvtier/engine/model_config.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace kvtier {

namespace {

std::unexpected<Error> invalid(std::string message) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message));
}

}  // namespace

Status ModelConfig::validate() const {
  const std::pair<const char*, uint32_t> positive[] = {
      {"layers", layers}, {"q_heads", q_heads}, {"kv_heads", kv_heads},      {"head_dim", head_dim},
      {"hidden", hidden}, {"mlp_dim", mlp_dim}, {"max_context", max_context}};
  for (const auto& [name, value] : positive) {
    if (value == 0) return invalid(std::string("model.") + name + " must be > 0");
  }
  // Bounds keep every buffer size far from overflow and the model tiny by construction.
  const std::pair<const char*, std::pair<uint32_t, uint32_t>> bounded[] = {
      {"layers", {layers, 64}},
      {"q_heads", {q_heads, 64}},
      {"kv_heads", {kv_heads, 64}},
      {"head_dim", {head_dim, 256}},
      {"hidden", {hidden, 4096}},
      {"mlp_dim", {mlp_dim, 16384}},
      {"max_context", {max_context, 1u << 20}}};
  for (const auto& [name, vb] : bounded) {
    if (vb.first > vb.second) {
      return invalid(std::string("model.") + name + " must be <= " + std::to_string(vb.second) +
                     ", got " + std::to_string(vb.first));
    }
  }
  if (head_dim % 2 != 0) {
    return invalid("model.head_dim must be even (rotary embedding), got " +
                   std::to_string(head_dim));
  }
  if (q_heads % kv_heads != 0) {
    return invalid("model.q_heads (" + std::to_string(q_heads) +
                   ") must be a multiple of model.kv_heads (" + std::to_string(kv_heads) + ")");
  }
  if (sliding_window != 0 && layers < 2) {
    return invalid("model.sliding_window needs model.layers >= 2 (odd layers slide), got " +
                   std::to_string(layers) + " layer");
  }
  if (sliding_window > max_context) {
    return invalid("model.sliding_window (" + std::to_string(sliding_window) +
                   ") must be <= model.max_context (" + std::to_string(max_context) + ")");
  }
  return {};
}

Status ModelConfig::validate_for(uint32_t world_size) const {
  if (auto ok = validate(); !ok) return ok;
  if (world_size == 0) return invalid("world_size must be > 0");
  if (kv_heads % world_size != 0) {
    return invalid("model.kv_heads (" + std::to_string(kv_heads) +
                   ") must be a multiple of world_size (" + std::to_string(world_size) + ")");
  }
  if (mlp_dim % world_size != 0) {
    return invalid("model.mlp_dim (" + std::to_string(mlp_dim) +
                   ") must be a multiple of world_size (" + std::to_string(world_size) + ")");
  }
  return {};
}

std::string ModelConfig::model_id() const {
  return "tiny-l" + std::to_string(layers) + "-q" + std::to_string(q_heads) + "-kv" +
         std::to_string(kv_heads) + "-d" + std::to_string(head_dim) + "-h" +
         std::to_string(hidden) + "-m" + std::to_string(mlp_dim) + "-w" +
         std::to_string(sliding_window) + "-s" + std::to_string(seed);
}

uint32_t ModelConfig::group_of_layer(uint32_t layer) const {
  return sliding_window == 0 ? 0 : layer % 2;
}

uint32_t ModelConfig::index_in_group(uint32_t layer) const {
  return sliding_window == 0 ? layer : layer / 2;
}

uint32_t ModelConfig::layers_in_group(uint32_t group) const {
  if (sliding_window == 0) return group == 0 ? layers : 0;
  return group == 0 ? (layers + 1) / 2 : (group == 1 ? layers / 2 : 0);
}

KvGroup ModelConfig::kv_group(uint32_t group, uint32_t block_size, uint32_t blocks_per_chunk,
                              uint32_t world_size) const {
  if (auto ok = validate_for(world_size); !ok) throw std::invalid_argument(ok.error().message);
  if (group >= num_kv_groups()) {
    throw std::invalid_argument("KV-cache group " + std::to_string(group) + " does not exist (" +
                                std::to_string(num_kv_groups()) + " groups)");
  }
  return KvGroup{.layers = layers_in_group(group),
                 .kv_heads = kv_heads / world_size,
                 .head_dim = head_dim,
                 .dtype_bytes = sizeof(float),
                 .block_size = block_size,
                 .blocks_per_chunk = blocks_per_chunk};
}

KvLayout model_kv_layout(const ModelConfig& config, DeviceLayout device_layout,
                         std::span<const GroupBlocking> blocking, uint32_t world_size) {
  if (blocking.size() != config.num_kv_groups()) {
    throw std::invalid_argument("model_kv_layout: " + std::to_string(blocking.size()) +
                                " group blockings, the model has " +
                                std::to_string(config.num_kv_groups()) + " KV-cache groups");
  }
  KvLayout layout{.device_layout = device_layout, .groups = {}};
  for (uint32_t g = 0; g < blocking.size(); ++g) {
    layout.groups.push_back(
        config.kv_group(g, blocking[g].block_size, blocking[g].blocks_per_chunk, world_size));
  }
  return layout;
}

}  // namespace kvtier
