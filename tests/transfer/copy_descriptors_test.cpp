#include "kvtier/transfer/copy_descriptors.h"

#include <gtest/gtest.h>

#include "support/transfer_rig.h"

namespace kvtier {
namespace {

using testing::small_layout;

struct Addresses {
  explicit Addresses(const KvLayout& layout) {
    const KvGroup& g = layout.groups[0];
    GroupCacheAddresses group{.num_blocks = 100};
    if (layout.device_layout == DeviceLayout::kPerLayer) {
      for (uint32_t l = 0; l < g.layers; ++l) group.bases.push_back(0x100000 * (l + 1));
    } else {
      group.bases.push_back(0x100000);
    }
    caches.groups.push_back(group);
    slots = HostSlots{0x10000000, layout.max_chunk_bytes(), 8};
  }
  KvCacheAddresses caches;
  HostSlots slots;
};

uint64_t total_bytes(const std::vector<CopyDescriptor>& d) {
  uint64_t n = 0;
  for (const auto& x : d) n += x.bytes;
  return n;
}

ChunkTransfer chunk(std::vector<uint32_t> blocks, uint32_t slot) {
  return ChunkTransfer{.group = 0, .blocks = std::move(blocks), .slot = slot};
}

TEST(CopyDescriptors, PerLayerConsecutiveBlocksCoalesceToOneDescriptorPerLayer) {
  const KvLayout layout = small_layout(DeviceLayout::kPerLayer);
  const Addresses a(layout);
  const auto chunks = {chunk({10, 11, 12, 13}, 2)};
  const auto merged =
      build_copy_descriptors(layout, a.caches, a.slots, Direction::kStore, chunks, true);
  const auto plain =
      build_copy_descriptors(layout, a.caches, a.slots, Direction::kStore, chunks, false);
  const KvGroup& g = layout.groups[0];
  ASSERT_EQ(merged.size(), g.layers);
  EXPECT_EQ(plain.size(), g.layers * g.blocks_per_chunk);
  EXPECT_EQ(total_bytes(merged), g.chunk_bytes());
  EXPECT_EQ(total_bytes(plain), g.chunk_bytes());
  // Layer 1 of block 10 goes to the second layer's region of slot 2.
  EXPECT_EQ(merged[1].src, 0x200000 + 10 * g.layer_block_bytes());
  EXPECT_EQ(merged[1].dst,
            a.slots.base + 2 * a.slots.slot_bytes + g.blocks_per_chunk * g.layer_block_bytes());
}

// Tensors allocated back to back (a device allocator may place them so) are still separate
// allocations: a copy never spans two, however well their bytes line up. Here every layer's
// tensor is exactly one chunk, so a chunk of blocks 0-3 ends each layer where the next begins.
TEST(CopyDescriptors, ACopyNeverSpansTwoTensorsThatLieBackToBack) {
  const KvLayout layout = small_layout(DeviceLayout::kPerLayer);
  const KvGroup& g = layout.groups[0];
  const uint64_t tensor_bytes = g.blocks_per_chunk * g.layer_block_bytes();
  Addresses a(layout);
  a.caches.groups[0].num_blocks = g.blocks_per_chunk;
  for (uint32_t l = 0; l < g.layers; ++l) a.caches.groups[0].bases[l] = 0x100000 + l * tensor_bytes;
  const auto chunks = {chunk({0, 1, 2, 3}, 0), chunk({0, 1, 2, 3}, 1)};
  for (Direction direction : {Direction::kStore, Direction::kLoad}) {
    const auto copies = build_copy_descriptors(layout, a.caches, a.slots, direction, chunks, true);
    EXPECT_EQ(copies.size(), 2 * g.layers) << "one copy per tensor and chunk";
    EXPECT_EQ(total_bytes(copies), 2 * g.chunk_bytes());
    for (const CopyDescriptor& c : copies) {
      const DeviceAddress device = direction == Direction::kStore ? c.src : c.dst;
      const uint64_t first = (device - 0x100000) / tensor_bytes;
      const uint64_t last = (device + c.bytes - 1 - 0x100000) / tensor_bytes;
      EXPECT_EQ(first, last) << "a copy of " << c.bytes << " bytes from " << device;
    }
  }
}

TEST(CopyDescriptors, PartialChunkLoadCopiesOnlyTheBlocksFromFirstBlock) {
  for (DeviceLayout device_layout : {DeviceLayout::kPerLayer, DeviceLayout::kCrossLayer}) {
    const KvLayout layout = small_layout(device_layout);
    const Addresses a(layout);
    const KvGroup& g = layout.groups[0];
    // The chunk's blocks 0 and 1 are on the device already; blocks 2 and 3 land in 30 and 31.
    const auto chunks = {
        ChunkTransfer{.group = 0, .blocks = {30, 31}, .slot = 1, .first_block = 2}};
    const auto d =
        build_copy_descriptors(layout, a.caches, a.slots, Direction::kLoad, chunks, false);
    const uint32_t pieces = device_layout == DeviceLayout::kPerLayer ? g.layers : 1;
    ASSERT_EQ(d.size(), 2u * pieces);
    EXPECT_EQ(total_bytes(d), g.chunk_bytes() / 2);
    const uint64_t piece =
        device_layout == DeviceLayout::kPerLayer ? g.layer_block_bytes() : g.block_bytes();
    EXPECT_EQ(d[0].src, a.slots.base + a.slots.slot_bytes + 2 * piece)
        << "slot position of block 2";
    EXPECT_EQ(d[0].dst, a.caches.groups[0].bases[0] + 30 * piece);
    // A block count that does not match first_block is a bug (F2).
    const auto wrong = {
        ChunkTransfer{.group = 0, .blocks = {30, 31, 32}, .slot = 1, .first_block = 2}};
    EXPECT_THROW(build_copy_descriptors(layout, a.caches, a.slots, Direction::kLoad, wrong, false),
                 std::invalid_argument);
  }
}

TEST(CopyDescriptors, GapsSplitRunsAndLoadSwapsSourceAndDestination) {
  const KvLayout layout = small_layout(DeviceLayout::kCrossLayer);
  const Addresses a(layout);
  const auto chunks = {chunk({4, 5, 9, 10}, 0)};
  const auto store =
      build_copy_descriptors(layout, a.caches, a.slots, Direction::kStore, chunks, true);
  const auto load =
      build_copy_descriptors(layout, a.caches, a.slots, Direction::kLoad, chunks, true);
  ASSERT_EQ(store.size(), 2u);
  ASSERT_EQ(load.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(store[i].src, load[i].dst);
    EXPECT_EQ(store[i].dst, load[i].src);
  }
}

TEST(CopyDescriptors, CrossLayerChunksInAdjacentSlotsCoalesceAcrossChunks) {
  const KvLayout layout = small_layout(DeviceLayout::kCrossLayer);
  const Addresses a(layout);
  const auto chunks = {chunk({0, 1, 2, 3}, 4), chunk({4, 5, 6, 7}, 5)};
  const auto d = build_copy_descriptors(layout, a.caches, a.slots, Direction::kStore, chunks, true);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].bytes, 2 * layout.groups[0].chunk_bytes());
}

TEST(CopyDescriptors, OneLayerCopiesThatLayersPartOfEveryBlockInBothDeviceLayouts) {
  for (DeviceLayout device_layout : {DeviceLayout::kPerLayer, DeviceLayout::kCrossLayer}) {
    const KvLayout layout = small_layout(device_layout);
    const Addresses a(layout);
    const KvGroup& g = layout.groups[0];
    ChunkTransfer c = chunk({10, 11, 12, 13}, 2);
    c.layer = 1;
    const std::vector<ChunkTransfer> chunks{c};
    const auto d =
        build_copy_descriptors(layout, a.caches, a.slots, Direction::kStore, chunks, false);
    ASSERT_EQ(d.size(), g.blocks_per_chunk);
    EXPECT_EQ(total_bytes(d), g.blocks_per_chunk * g.layer_block_bytes()) << "one layer's bytes";
    const DeviceAddress slot = a.slots.base + 2 * a.slots.slot_bytes;
    for (uint32_t j = 0; j < g.blocks_per_chunk; ++j) {
      if (device_layout == DeviceLayout::kPerLayer) {
        EXPECT_EQ(d[j].src, a.caches.groups[0].bases[1] + (10 + j) * g.layer_block_bytes());
        EXPECT_EQ(d[j].dst, slot + (g.blocks_per_chunk + j) * g.layer_block_bytes());
      } else {
        EXPECT_EQ(d[j].src,
                  a.caches.groups[0].bases[0] + (10 + j) * g.block_bytes() + g.layer_block_bytes());
        EXPECT_EQ(d[j].dst, slot + j * g.block_bytes() + g.layer_block_bytes());
      }
    }
    c.layer = g.layers;  // beyond the group's layers: a bug (F2)
    const std::vector<ChunkTransfer> bad{c};
    EXPECT_THROW(build_copy_descriptors(layout, a.caches, a.slots, Direction::kStore, bad, false),
                 std::invalid_argument);
  }
}

TEST(CopyDescriptors, OutOfRangeArgumentsAreInvalidArgument) {
  const KvLayout layout = small_layout(DeviceLayout::kPerLayer);
  const Addresses a(layout);
  auto build = [&](ChunkTransfer c) {
    const std::vector<ChunkTransfer> chunks{std::move(c)};
    return build_copy_descriptors(layout, a.caches, a.slots, Direction::kLoad, chunks, true);
  };
  EXPECT_THROW(build(chunk({0, 1, 2, 100}, 0)), std::invalid_argument);
  EXPECT_THROW(build(chunk({0, 1, 2, 3}, 8)), std::invalid_argument);
  EXPECT_THROW(build(chunk({0, 1, 2}, 0)), std::invalid_argument);
  EXPECT_THROW(build(ChunkTransfer{.group = 1, .blocks = {0, 1, 2, 3}}), std::invalid_argument);
  HostSlots small = a.slots;
  small.slot_bytes -= 1;
  EXPECT_THROW(validate_addresses(layout, a.caches, small), std::invalid_argument);
}

}  // namespace
}  // namespace kvtier
