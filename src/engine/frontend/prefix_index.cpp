#include "kvtier/engine/prefix_index.h"

#include <algorithm>

namespace kvtier {

PromptKeys PromptKeying::keys(std::span<const TokenId> prompt) const {
  return {.device = chunk_keys(device_namespace, prompt, block_size),
          .block_size = block_size,
          .chunks = chunk_keys(host_namespace, prompt, chunk_tokens),
          .chunk_tokens = chunk_tokens};
}

PromptKeying prompt_keying(const EngineShape& shape) {
  const KvGroup& group = shape.layout.groups.front();
  return {.device_namespace = device_key_namespace(shape),
          .block_size = group.block_size,
          .host_namespace = host_key_namespace(shape),
          .chunk_tokens = static_cast<uint32_t>(group.chunk_tokens())};
}

PrefixIndex::PrefixIndex(uint32_t cores) : cores_(cores) {}

std::unordered_set<ChunkKey, ChunkKeyHash>& PrefixIndex::set_of(Core& core,
                                                                const std::string& medium) {
  if (medium == kMediumDevice) return core.device;
  if (medium == kMediumHost) return core.host;
  for (auto& [name, set] : core.lower) {
    if (name == medium) return set;
  }
  return core.lower.emplace_back(medium, std::unordered_set<ChunkKey, ChunkKeyHash>{}).second;
}

void PrefixIndex::apply(uint32_t core, const KvEventBatch& batch) {
  if (core >= cores_.size()) return;
  Core& c = cores_[core];
  for (const KvEvent& e : batch.events) {
    switch (e.kind) {
      case KvEventKind::kBlockStored:
        set_of(c, e.medium).insert(e.block_hashes.begin(), e.block_hashes.end());
        break;
      case KvEventKind::kBlockRemoved: {
        auto& set = set_of(c, e.medium);
        for (const ChunkKey& k : e.block_hashes) set.erase(k);
        break;
      }
      case KvEventKind::kAllBlocksCleared:
        c = Core{};
        break;
    }
  }
}

void PrefixIndex::clear(uint32_t core) {
  if (core < cores_.size()) cores_[core] = Core{};
}

double PrefixIndex::cached_tokens(uint32_t core, const PromptKeys& keys) const {
  if (core >= cores_.size()) return 0;
  const Core& c = cores_[core];
  auto leading = [](const std::vector<ChunkKey>& ks, auto&& held) {
    size_t n = 0;
    while (n < ks.size() && held(ks[n])) ++n;
    return n;
  };
  const double device =
      double(leading(keys.device, [&](const ChunkKey& k) { return c.device.contains(k); })) *
      keys.block_size;
  const double host =
      double(leading(keys.chunks, [&](const ChunkKey& k) { return c.host.contains(k); })) *
      keys.chunk_tokens;
  const double lower = double(leading(keys.chunks,
                                      [&](const ChunkKey& k) {
                                        if (c.host.contains(k)) return true;
                                        return std::ranges::any_of(c.lower, [&](const auto& m) {
                                          return m.second.contains(k);
                                        });
                                      })) *
                       keys.chunk_tokens;
  const double host_beyond = std::max(0.0, host - device);
  const double lower_beyond = std::max(0.0, lower - std::max(device, host));
  return device * kDeviceWeight + host_beyond * kHostWeight + lower_beyond * kLowerWeight;
}

size_t PrefixIndex::blocks(uint32_t core, std::string_view medium) const {
  if (core >= cores_.size()) return 0;
  const Core& c = cores_[core];
  if (medium == kMediumDevice) return c.device.size();
  if (medium == kMediumHost) return c.host.size();
  for (const auto& [name, set] : c.lower) {
    if (name == medium) return set.size();
  }
  return 0;
}

std::optional<uint32_t> choose_core(std::span<const CoreLoad> cores, size_t prompt_tokens) {
  std::optional<uint32_t> best;
  double best_cost = 0;
  for (uint32_t n = 0; n < cores.size(); ++n) {
    const CoreLoad& c = cores[n];
    if (!c.serving) continue;
    const double cost =
        std::max(0.0, double(prompt_tokens) - c.cached) + kLoadWeight * double(c.work);
    if (!best || cost < best_cost || (cost == best_cost && c.requests < cores[*best].requests)) {
      best = n;
      best_cost = cost;
    }
  }
  return best;
}

std::optional<uint32_t> least_loaded(std::span<const CoreLoad> cores) {
  std::optional<uint32_t> best;
  for (uint32_t n = 0; n < cores.size(); ++n) {
    if (cores[n].serving && (!best || cores[n].requests < cores[*best].requests)) best = n;
  }
  return best;
}

uint64_t request_work(size_t prompt_tokens, double cached, uint32_t max_tokens) {
  return static_cast<uint64_t>(std::max(0.0, double(prompt_tokens) - cached)) + max_tokens;
}

}  // namespace kvtier
