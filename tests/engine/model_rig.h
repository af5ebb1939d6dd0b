// Test rig for the tiny model: one rank's KV-cache memory in a given layout, sequences with
// their block tables, prefill in chunks and greedy decoding.
#pragma once

#include <cstddef>
#include <cstring>
#include <numeric>
#include <vector>

#include "kvtier/engine/byte_vocab.h"
#include "kvtier/engine/tiny_model.h"

namespace kvtier::testing {

// One rank's KV cache: `num_blocks` blocks per group, zero-filled, in layout's device layout.
class CacheMemory {
 public:
  CacheMemory(KvLayout layout, uint32_t num_blocks) : layout_(std::move(layout)) {
    for (size_t g = 0; g < layout_.groups.size(); ++g) {
      GroupCacheAddresses group{.bases = {}, .num_blocks = num_blocks};
      const size_t bytes = layout_.tensor_bytes(g, num_blocks).value();
      for (size_t t = 0; t < layout_.tensors_per_group(g); ++t) {
        auto& buffer = buffers_.emplace_back(bytes / sizeof(float), 0.0f);
        group.bases.push_back(reinterpret_cast<DeviceAddress>(buffer.data()));
      }
      addresses_.groups.push_back(std::move(group));
    }
  }
  const KvLayout& layout() const { return layout_; }
  const KvCacheAddresses& addresses() const { return addresses_; }

  // Every layer's K/V bytes of `block` of `group`, layer by layer.
  std::vector<std::byte> block_contents(uint32_t group, uint32_t block) const {
    const KvGroup& g = layout_.groups[group];
    const size_t piece = g.layer_block_bytes();
    std::vector<std::byte> out(g.block_bytes());
    for (uint32_t l = 0; l < g.layers; ++l) {
      const auto* src =
          layout_.device_layout == DeviceLayout::kPerLayer
              ? reinterpret_cast<const std::byte*>(addresses_.groups[group].bases[l]) +
                    block * piece
              : reinterpret_cast<const std::byte*>(addresses_.groups[group].bases[0]) +
                    block * g.block_bytes() + l * piece;
      std::memcpy(out.data() + l * piece, src, piece);
    }
    return out;
  }

 private:
  KvLayout layout_;
  KvCacheAddresses addresses_;
  std::vector<std::vector<float>> buffers_;
};

// A sequence's block tables, one per group.
struct BlockTables {
  std::vector<std::vector<uint32_t>> groups;

  // Blocks first, first + stride, first + 2 * stride, … modulo num_blocks, for every group.
  static BlockTables strided(size_t num_groups, uint32_t blocks, uint32_t first, uint32_t stride,
                             uint32_t num_blocks) {
    BlockTables t;
    for (size_t g = 0; g < num_groups; ++g) {
      auto& table = t.groups.emplace_back(blocks);
      for (uint32_t i = 0; i < blocks; ++i) table[i] = (first + i * stride) % num_blocks;
    }
    return t;
  }
  std::vector<std::span<const uint32_t>> spans() const { return {groups.begin(), groups.end()}; }
};

// Runs tokens [start, start + size) of `tokens` in steps of the given sizes (the last size
// repeats); returns the logits of the last step.
inline std::vector<float> run_chunked(const TinyModel& model, CacheMemory& cache,
                                      const BlockTables& tables, std::span<const TokenId> tokens,
                                      uint32_t start, std::vector<uint32_t> step_sizes,
                                      Collective& collective) {
  std::vector<float> logits;
  size_t step = 0;
  for (uint32_t pos = start; pos < tokens.size();) {
    const uint32_t n = std::min<uint32_t>(step_sizes[std::min(step, step_sizes.size() - 1)],
                                          static_cast<uint32_t>(tokens.size()) - pos);
    ForwardInput input{
        .start = pos, .tokens = tokens.subspan(pos, n), .block_tables = tables.spans()};
    logits = model.forward(input, cache.layout(), cache.addresses(), collective);
    pos += n;
    ++step;
  }
  return logits;
}

// Greedy continuation: appends `count` tokens to `tokens` (whose KV up to the last token is in
// the cache, and whose last step returned `logits`), returns the generated tokens.
inline std::vector<TokenId> generate(const TinyModel& model, CacheMemory& cache,
                                     const BlockTables& tables, std::vector<TokenId>& tokens,
                                     std::vector<float> logits, uint32_t count,
                                     Collective& collective) {
  std::vector<TokenId> out;
  for (uint32_t i = 0; i < count; ++i) {
    const TokenId next = greedy_token(logits);
    out.push_back(next);
    tokens.push_back(next);
    if (i + 1 == count) break;
    ForwardInput input{.start = static_cast<uint32_t>(tokens.size() - 1),
                       .tokens = std::span<const TokenId>(tokens).last(1),
                       .block_tables = tables.spans()};
    logits = model.forward(input, cache.layout(), cache.addresses(), collective);
  }
  return out;
}

// Every block's contents along a sequence of `blocks` blocks of `group`.
inline std::vector<std::byte> sequence_kv(const CacheMemory& cache, uint32_t group,
                                          const BlockTables& tables, uint32_t blocks) {
  std::vector<std::byte> out;
  for (uint32_t i = 0; i < blocks; ++i) {
    auto b = cache.block_contents(group, tables.groups[group][i]);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

}  // namespace kvtier::testing
