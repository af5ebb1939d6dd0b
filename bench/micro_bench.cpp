// Google Benchmark micro-benchmarks of per-step hot paths: key hashing and descriptor building.
// Run: build/bench/kvtier_micro_bench
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/transfer/copy_descriptors.h"

namespace kvtier {
namespace {

void BM_ChunkKeys(benchmark::State& state) {
  std::vector<TokenId> tokens(static_cast<size_t>(state.range(0)));
  std::iota(tokens.begin(), tokens.end(), 1);
  const KeyNamespace ns{.model = "bench", .layout_fingerprint = 1};
  for (auto _ : state) benchmark::DoNotOptimize(chunk_keys(ns, tokens, 256));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_ChunkKeys)->Arg(32 << 10);

void BM_BuildCopyDescriptors(benchmark::State& state) {
  const bool coalesce = state.range(0) != 0;
  KvLayout layout{DeviceLayout::kPerLayer,
                  {KvGroup{.layers = 32,
                           .kv_heads = 8,
                           .head_dim = 128,
                           .dtype_bytes = 2,
                           .block_size = 16,
                           .blocks_per_chunk = 16}}};
  const KvGroup& g = layout.groups[0];
  constexpr uint32_t kChunks = 128;  // a 32k-token prompt
  KvCacheAddresses caches{{GroupCacheAddresses{.num_blocks = kChunks * g.blocks_per_chunk}}};
  for (uint32_t l = 0; l < g.layers; ++l) caches.groups[0].bases.push_back((uint64_t{l} + 1) << 40);
  const HostSlots slots{uint64_t{1} << 50, g.chunk_bytes(), kChunks};
  std::vector<ChunkTransfer> chunks;
  for (uint32_t c = 0; c < kChunks; ++c) {
    ChunkTransfer t{.group = 0, .slot = kChunks - 1 - c};
    for (uint32_t j = 0; j < g.blocks_per_chunk; ++j)
      t.blocks.push_back(c * g.blocks_per_chunk + j);
    chunks.push_back(std::move(t));
  }
  size_t descriptors = 0;
  for (auto _ : state) {
    auto d = build_copy_descriptors(layout, caches, slots, Direction::kStore, chunks, coalesce);
    descriptors = d.size();
    benchmark::DoNotOptimize(d);
  }
  state.counters["descriptors"] = static_cast<double>(descriptors);
  state.SetItemsProcessed(state.iterations() * kChunks);
}
BENCHMARK(BM_BuildCopyDescriptors)->Arg(0)->Arg(1);

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
