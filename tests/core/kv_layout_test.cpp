#include "kvtier/core/kv_layout.h"

#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <stdexcept>
#include <string>

namespace kvtier {
namespace {

KvGroup Group() {
  return KvGroup{.layers = 4,
                 .kv_heads = 2,
                 .head_dim = 64,
                 .dtype_bytes = 2,
                 .block_size = 16,
                 .blocks_per_chunk = 16};
}

KvLayout Layout() {
  return KvLayout{.device_layout = DeviceLayout::kPerLayer, .groups = {Group()}};
}

// Pointers to every field of KvGroup, with its name as validate() spells it.
const std::pair<const char*, uint32_t KvGroup::*> kGroupFields[] = {
    {"layers", &KvGroup::layers},         {"kv_heads", &KvGroup::kv_heads},
    {"head_dim", &KvGroup::head_dim},     {"dtype_bytes", &KvGroup::dtype_bytes},
    {"block_size", &KvGroup::block_size}, {"blocks_per_chunk", &KvGroup::blocks_per_chunk},
};

TEST(KvLayout, ByteSizes) {
  const KvGroup g = Group();
  EXPECT_EQ(g.layer_block_bytes(), 2u * 16 * 2 * 64 * 2);  // K and V, tokens, heads, dim, dtype
  EXPECT_EQ(g.block_bytes(), g.layer_block_bytes() * 4);
  EXPECT_EQ(g.chunk_bytes(), g.block_bytes() * 16);
  EXPECT_EQ(g.chunk_bytes(), 524'288u);
  EXPECT_EQ(g.chunk_tokens(), 256u);

  KvLayout layout = Layout();
  KvGroup wide = Group();
  wide.head_dim = 128;
  layout.groups.push_back(wide);
  EXPECT_EQ(layout.max_chunk_bytes(), wide.chunk_bytes());
  EXPECT_EQ(layout.max_chunk_bytes(), 2 * Group().chunk_bytes());
}

TEST(KvLayout, MaxBlocksPerChunkIsTheLargestGroupsAndAtLeastOne) {
  EXPECT_EQ(KvLayout{}.max_blocks_per_chunk(), 1u);
  KvLayout layout = Layout();
  EXPECT_EQ(layout.max_blocks_per_chunk(), 16u);
  KvGroup longer = Group();
  longer.blocks_per_chunk = 64;
  layout.groups.push_back(longer);
  layout.groups.push_back(Group());
  EXPECT_EQ(layout.max_blocks_per_chunk(), 64u);
}

TEST(KvLayout, ValidLayoutValidates) {
  EXPECT_TRUE(Layout().validate());
  KvLayout two = Layout();
  two.device_layout = DeviceLayout::kCrossLayer;
  two.groups.push_back(Group());
  EXPECT_TRUE(two.validate());
}

TEST(KvLayout, ValidateNamesTheZeroField) {
  for (const auto& [name, member] : kGroupFields) {
    KvLayout layout = Layout();
    layout.groups.push_back(Group());
    layout.groups[1].*member = 0;
    Status status = layout.validate();
    ASSERT_FALSE(status) << name;
    EXPECT_EQ(status.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(status.error().message.find(std::string("groups[1].") + name), std::string::npos)
        << status.error().message;
  }
}

TEST(KvLayout, ValidateRejectsNoGroups) {
  Status status = KvLayout{}.validate();
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(status.error().message.find("no KV-cache groups"), std::string::npos);
}

TEST(KvLayout, FingerprintIsAFunctionOfTheLayout) {
  EXPECT_EQ(Layout().fingerprint(), Layout().fingerprint());
}

TEST(KvLayout, FingerprintDiffersPerFieldAndPerDeviceLayout) {
  std::set<uint64_t> seen{Layout().fingerprint()};
  for (const auto& [name, member] : kGroupFields) {
    KvLayout layout = Layout();
    layout.groups[0].*member += 1;
    EXPECT_TRUE(seen.insert(layout.fingerprint()).second) << name;
  }
  KvLayout cross = Layout();
  cross.device_layout = DeviceLayout::kCrossLayer;
  EXPECT_TRUE(seen.insert(cross.fingerprint()).second);
  KvLayout two = Layout();
  two.groups.push_back(Group());
  EXPECT_TRUE(seen.insert(two.fingerprint()).second);
}

TEST(KvLayout, FingerprintSeesWhichGroupHoldsWhichShape) {
  KvGroup wide = Group();
  wide.head_dim = 128;
  KvLayout a = Layout();
  a.groups = {Group(), wide};
  KvLayout b = Layout();
  b.groups = {wide, Group()};
  EXPECT_NE(a.fingerprint(), b.fingerprint());
}

TEST(KvLayout, ParseDeviceLayout) {
  for (DeviceLayout layout : {DeviceLayout::kPerLayer, DeviceLayout::kCrossLayer}) {
    Result<DeviceLayout> parsed = parse_device_layout(to_string(layout));
    ASSERT_TRUE(parsed);
    EXPECT_EQ(*parsed, layout);
  }
  EXPECT_EQ(to_string(DeviceLayout::kPerLayer), "per_layer");
  EXPECT_EQ(to_string(DeviceLayout::kCrossLayer), "cross_layer");
  for (const char* bad : {"", "PerLayer", "per-layer", "per_layer ", "cross"}) {
    Result<DeviceLayout> parsed = parse_device_layout(bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(parsed.error().message.find(std::string("'") + bad + "'"), std::string::npos);
  }
}

TEST(KvLayout, AllocationHelpersPerLayer) {
  KvLayout layout = Layout();
  KvGroup wide = Group();
  wide.head_dim = 128;
  wide.layers = 3;
  layout.groups.push_back(wide);
  // One tensor per layer; a block of a tensor is one layer's block.
  EXPECT_EQ(layout.tensors_per_group(0), 4u);
  EXPECT_EQ(layout.tensors_per_group(1), 3u);
  EXPECT_EQ(layout.tensor_block_bytes(0), Group().layer_block_bytes());
  EXPECT_EQ(layout.tensor_block_bytes(1), wide.layer_block_bytes());
  ASSERT_TRUE(layout.tensor_bytes(1, 10));
  EXPECT_EQ(*layout.tensor_bytes(1, 10), 10 * wide.layer_block_bytes());
  ASSERT_TRUE(layout.total_bytes(10));
  EXPECT_EQ(*layout.total_bytes(10), 10 * (Group().block_bytes() + wide.block_bytes()));
  EXPECT_THROW((void)layout.tensors_per_group(2), std::out_of_range);
}

TEST(KvLayout, AllocationHelpersCrossLayer) {
  KvLayout layout = Layout();
  layout.device_layout = DeviceLayout::kCrossLayer;
  // One tensor for the group; a block holds every layer.
  EXPECT_EQ(layout.tensors_per_group(0), 1u);
  EXPECT_EQ(layout.tensor_block_bytes(0), Group().block_bytes());
  ASSERT_TRUE(layout.tensor_bytes(0, 7));
  EXPECT_EQ(*layout.tensor_bytes(0, 7), 7 * Group().block_bytes());
  ASSERT_TRUE(layout.total_bytes(7));
  EXPECT_EQ(*layout.total_bytes(7), 7 * Group().block_bytes());
}

TEST(KvLayout, OverflowingLayoutIsAnErrorNotAWrappedSize) {
  // Every field at its maximum: 2 * (2^32 - 1)^6 does not fit in 64 bits.
  constexpr uint32_t kMax = std::numeric_limits<uint32_t>::max();
  KvLayout huge{.device_layout = DeviceLayout::kPerLayer,
                .groups = {KvGroup{.layers = kMax,
                                   .kv_heads = kMax,
                                   .head_dim = kMax,
                                   .dtype_bytes = kMax,
                                   .block_size = kMax,
                                   .blocks_per_chunk = kMax}}};
  Status valid = huge.validate();
  ASSERT_FALSE(valid);
  EXPECT_EQ(valid.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(valid.error().message.find("layout.groups[0] chunk bytes overflows"), std::string::npos)
      << valid.error().message;
  Result<size_t> tensor = huge.tensor_bytes(0, 1);
  ASSERT_FALSE(tensor);
  EXPECT_EQ(tensor.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(huge.total_bytes(1));

  // A layout that validates, with a block count that takes a tensor past 2^64 bytes.
  KvLayout big{.device_layout = DeviceLayout::kCrossLayer,
               .groups = {KvGroup{.layers = 1u << 16,
                                  .kv_heads = 1u << 8,
                                  .head_dim = 1u << 8,
                                  .dtype_bytes = 2,
                                  .block_size = 1u << 4,
                                  .blocks_per_chunk = 1}}};
  ASSERT_TRUE(big.validate());                          // a block is 2^(1+16+8+8+1+4) = 2^38 bytes
  ASSERT_TRUE(big.tensor_bytes(0, 1u << 20));           // 2^58 bytes: fits
  Result<size_t> over = big.tensor_bytes(0, 1u << 26);  // 2^64 bytes: does not
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(over.error().message.find("tensor bytes overflows"), std::string::npos)
      << over.error().message;
  EXPECT_FALSE(big.total_bytes(1u << 26));

  // The sum of groups can overflow when no single group does.
  KvLayout two = big;
  two.groups.push_back(big.groups[0]);
  ASSERT_TRUE(big.total_bytes(1u << 25));          // 2^63 bytes: fits
  Result<size_t> sum = two.total_bytes(1u << 25);  // 2 * 2^63 = 2^64: only the sum overflows
  ASSERT_FALSE(sum);
  EXPECT_NE(sum.error().message.find("total bytes overflow"), std::string::npos)
      << sum.error().message;
}

}  // namespace
}  // namespace kvtier
