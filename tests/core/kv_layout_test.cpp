#include "kvtier/core/kv_layout.h"

#include <gtest/gtest.h>

#include <set>
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

}  // namespace
}  // namespace kvtier
