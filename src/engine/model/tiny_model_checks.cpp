// TinyModel::check: argument validation of a forward call (all bugs of the caller, so
// exceptions, never Status).
#include <stdexcept>
#include <string>

#include "kvtier/engine/tiny_model.h"

namespace kvtier {

namespace {

[[noreturn]] void bad(const std::string& message) {
  throw std::invalid_argument("TinyModel::forward: " + message);
}

}  // namespace

void TinyModel::check(const ForwardInput& input, const KvLayout& layout,
                      const KvCacheAddresses& cache, const Collective& collective) const {
  const ModelConfig& c = config_;
  if (collective.rank() != rank_ || collective.world_size() != world_size_) {
    bad("collective is rank " + std::to_string(collective.rank()) + " of " +
        std::to_string(collective.world_size()) + ", the model is rank " + std::to_string(rank_) +
        " of " + std::to_string(world_size_));
  }
  if (input.tokens.empty()) bad("no tokens");
  if (uint64_t{input.start} + input.tokens.size() > c.max_context) {
    bad("positions up to " + std::to_string(uint64_t{input.start} + input.tokens.size()) +
        " exceed model.max_context " + std::to_string(c.max_context));
  }
  for (TokenId t : input.tokens) {
    if (t >= kVocabSize) bad("token " + std::to_string(t) + " outside the vocabulary");
  }
  const uint32_t groups = c.num_kv_groups();
  if (layout.groups.size() != groups || cache.groups.size() != groups ||
      input.block_tables.size() != groups) {
    bad("the model has " + std::to_string(groups) + " KV-cache groups; layout has " +
        std::to_string(layout.groups.size()) + ", cache " + std::to_string(cache.groups.size()) +
        ", block tables " + std::to_string(input.block_tables.size()));
  }
  const uint32_t end = input.start + static_cast<uint32_t>(input.tokens.size());
  for (uint32_t g = 0; g < groups; ++g) {
    const KvGroup& have = layout.groups[g];
    if (have.block_size == 0) bad("group " + std::to_string(g) + " has block_size 0");
    const KvGroup want = c.kv_group(g, have.block_size, have.blocks_per_chunk, world_size_);
    if (have.layers != want.layers || have.kv_heads != want.kv_heads ||
        have.head_dim != want.head_dim || have.dtype_bytes != want.dtype_bytes) {
      bad("layout group " + std::to_string(g) + " is not this model's (layers/kv_heads/" +
          "head_dim/dtype_bytes " + std::to_string(have.layers) + "/" +
          std::to_string(have.kv_heads) + "/" + std::to_string(have.head_dim) + "/" +
          std::to_string(have.dtype_bytes) + ", want " + std::to_string(want.layers) + "/" +
          std::to_string(want.kv_heads) + "/" + std::to_string(want.head_dim) + "/" +
          std::to_string(want.dtype_bytes) + ")");
    }
    const size_t bases = layout.tensors_per_group(g);
    if (cache.groups[g].bases.size() != bases) {
      bad("cache group " + std::to_string(g) + " has " +
          std::to_string(cache.groups[g].bases.size()) + " base addresses, the layout needs " +
          std::to_string(bases));
    }
    for (DeviceAddress base : cache.groups[g].bases) {
      if (base == 0) bad("cache group " + std::to_string(g) + " has a null base address");
    }
    const size_t blocks = (size_t{end} + have.block_size - 1) / have.block_size;
    if (input.block_tables[g].size() < blocks) {
      bad("block table of group " + std::to_string(g) + " has " +
          std::to_string(input.block_tables[g].size()) + " blocks, positions up to " +
          std::to_string(end) + " need " + std::to_string(blocks));
    }
  }
}

}  // namespace kvtier
