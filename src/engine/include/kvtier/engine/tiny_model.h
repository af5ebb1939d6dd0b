// TinyModel: one tensor-parallel rank of the test/demo transformer (model_config.h). It is a
// test and demo model with random weights: its text is gibberish, its KV is exact.
//
// Determinism: the KV of a position and the logits of a step are bit-identical whether the
// prefix was computed in one forward, in chunks of any size, or loaded into the cache from
// elsewhere and continued; and identical for every world_size that the config allows (each
// value is computed by one rank in a fixed order; the collective only gathers, see below).
//
// Per rank r of world_size N: KV heads [r*kv_heads/N, (r+1)*kv_heads/N) with their query
// heads, and MLP units [r*mlp_dim/N, (r+1)*mlp_dim/N). The residual stream, output projection,
// MLP down projection and LM head are computed redundantly on every rank.
//
// Collective call sequence of one forward_batch of N tokens in all (forward: N = n), identical
// on every rank; every rank must make the same calls with the same batches in the same order:
//   for each layer l = 0 … layers-1:
//     all_reduce_sum(N * q_heads * head_dim floats)   attention outputs, [N][q_heads][head_dim]
//     all_reduce_sum(N * mlp_dim floats)              MLP activations,   [N][mlp_dim]
// i.e. 2 * layers calls, whatever world_size (world_size 1 included). Each rank fills only the
// elements it owns and +0.0 elsewhere (values it owns are never -0.0), so summing in rank order
// reproduces the owner's bits exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/kv_layout.h"
#include "kvtier/engine/collective.h"
#include "kvtier/engine/model_config.h"
#include "kvtier/transfer/copy_descriptors.h"

namespace kvtier {

namespace model_internal {
struct ModelWeights;
}

// One step of one sequence.
struct ForwardInput {
  uint32_t start = 0;               // positions [0, start) are already in the cache
  std::span<const TokenId> tokens;  // the tokens of positions [start, start + n), n >= 1
  // Per KV-cache group: the device block of positions [i * block_size, (i + 1) * block_size)
  // for every block up to position start + n - 1. A sliding-window group reads only blocks
  // inside the window of the first new position (other entries are never dereferenced) and
  // writes the blocks of every new position.
  std::vector<std::span<const uint32_t>> block_tables;
};

class TinyModel;

// One forward_batch split at layer boundaries, for an engine that interleaves work of its own
// with the layers (layer-wise KV transfers: wait for a layer's load before run_layer, hand the
// layer's KV over after it): run_layer(0), …, run_layer(layers - 1) in order, then logits().
// The result is bit-identical to forward_batch. Holds references to what begin() was given:
// they must outlive it. Movable, not copyable; one thread at a time.
class ForwardPass {
 public:
  ForwardPass(ForwardPass&&) noexcept;
  ForwardPass& operator=(ForwardPass&&) noexcept;
  ~ForwardPass();

  uint32_t layers() const;
  // The KV-cache layer model layer `layer` writes: its group and its index in the group.
  uint32_t group_of(uint32_t layer) const;
  uint32_t index_in_group(uint32_t layer) const;
  // Writes this rank's K/V of the new positions for `layer` and attends; layers in order
  // (std::logic_error otherwise).
  void run_layer(uint32_t layer);
  // Each sequence's logits, after the last layer (std::logic_error before).
  std::vector<std::vector<float>> logits();

 private:
  friend class TinyModel;
  struct State;
  explicit ForwardPass(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class TinyModel {
 public:
  // Throws std::invalid_argument when config.validate_for(world_size) fails or rank >= N.
  TinyModel(const ModelConfig& config, uint32_t rank, uint32_t world_size);
  ~TinyModel();
  TinyModel(TinyModel&&) noexcept;

  const ModelConfig& config() const { return config_; }
  uint32_t rank() const { return rank_; }
  uint32_t world_size() const { return world_size_; }

  // Runs one step: writes this rank's K/V of the new positions into `cache` and returns the
  // logits (kVocabSize floats) of the last new position, the same on every rank.
  // `layout` must be model_kv_layout(config, …, world_size) for some blocking, `cache` this
  // rank's memory for it (host-dereferenceable). Reads K/V of earlier positions from `cache`,
  // whoever wrote them. Bad arguments (layout mismatch, n == 0, start + n > max_context, a
  // token >= kVocabSize, a short block table, a block beyond the cache) throw
  // std::invalid_argument / std::out_of_range. `collective` must have this rank and
  // world_size. Const and reentrant: concurrent calls must not share cache blocks they write.
  std::vector<float> forward(const ForwardInput& input, const KvLayout& layout,
                             const KvCacheAddresses& cache, Collective& collective) const;

  // Several sequences in one step (one collective call per layer and kind for all of them);
  // returns each one's logits, in order. Bit-identical to separate forward calls. Sequences
  // must not write the same blocks; every sequence's K/V of a layer is written before any
  // sequence of the batch attends in that layer. An empty batch is std::invalid_argument.
  std::vector<std::vector<float>> forward_batch(std::span<const ForwardInput> inputs,
                                                const KvLayout& layout,
                                                const KvCacheAddresses& cache,
                                                Collective& collective) const;
  // forward_batch, layer by layer (ForwardPass). Checks the arguments as forward_batch does;
  // reads no KV yet.
  ForwardPass begin(std::span<const ForwardInput> inputs, const KvLayout& layout,
                    const KvCacheAddresses& cache, Collective& collective) const;

 private:
  void check(const ForwardInput& input, const KvLayout& layout, const KvCacheAddresses& cache,
             const Collective& collective) const;

  friend class ForwardPass;

  ModelConfig config_;
  uint32_t rank_;
  uint32_t world_size_;
  std::unique_ptr<const model_internal::ModelWeights> weights_;
};

}  // namespace kvtier
