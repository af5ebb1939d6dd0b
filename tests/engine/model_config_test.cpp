#include "kvtier/engine/model_config.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

std::string error_of(const ModelConfig& c, uint32_t world_size = 1) {
  auto ok = c.validate_for(world_size);
  return ok ? "" : ok.error().message;
}

TEST(ModelConfig, DefaultsAreValid) {
  EXPECT_EQ(error_of(ModelConfig{}), "");
  EXPECT_EQ(error_of(ModelConfig{}, 2), "");
}

TEST(ModelConfig, ModelIdNamesEveryKvShapingField) {
  const ModelConfig base;
  EXPECT_EQ(base.model_id(), "tiny-l4-q2-kv2-d16-h64-m128-w0-s1");
  for (auto field :
       {&ModelConfig::layers, &ModelConfig::q_heads, &ModelConfig::kv_heads, &ModelConfig::head_dim,
        &ModelConfig::hidden, &ModelConfig::mlp_dim, &ModelConfig::sliding_window}) {
    ModelConfig c;
    c.*field += 2;
    EXPECT_NE(c.model_id(), base.model_id());
  }
  ModelConfig c;
  c.seed = 2;
  EXPECT_NE(c.model_id(), base.model_id());
  c = {};
  c.max_context = 99;  // does not change any KV
  EXPECT_EQ(c.model_id(), base.model_id());
}

TEST(ModelConfig, ZeroFieldsAreNamed) {
  for (auto field :
       {&ModelConfig::layers, &ModelConfig::q_heads, &ModelConfig::kv_heads, &ModelConfig::head_dim,
        &ModelConfig::hidden, &ModelConfig::mlp_dim, &ModelConfig::max_context}) {
    ModelConfig c;
    c.*field = 0;
    EXPECT_NE(error_of(c).find("must be > 0"), std::string::npos) << error_of(c);
  }
  ModelConfig c;
  c.kv_heads = 0;
  EXPECT_EQ(error_of(c), "model.kv_heads must be > 0");
}

TEST(ModelConfig, ShapeRulesNameTheirFields) {
  ModelConfig c;
  c.q_heads = 6;
  c.kv_heads = 4;
  EXPECT_NE(error_of(c).find("model.q_heads (6) must be a multiple of model.kv_heads (4)"),
            std::string::npos);
  c = {};
  c.head_dim = 15;
  EXPECT_NE(error_of(c).find("model.head_dim must be even"), std::string::npos);
  c = {};
  c.hidden = 5000;
  EXPECT_NE(error_of(c).find("model.hidden must be <= 4096"), std::string::npos);
  c = {};
  c.layers = 1;
  c.sliding_window = 8;
  EXPECT_NE(error_of(c).find("model.sliding_window needs model.layers >= 2"), std::string::npos);
  c = {};
  c.sliding_window = c.max_context + 1;
  EXPECT_NE(error_of(c).find("model.sliding_window"), std::string::npos);
}

TEST(ModelConfig, WorldSizeMustDivideKvHeadsAndMlp) {
  ModelConfig c;  // kv_heads 2
  EXPECT_NE(error_of(c, 4).find("model.kv_heads (2) must be a multiple of world_size (4)"),
            std::string::npos);
  c.kv_heads = 4;
  c.q_heads = 4;
  c.mlp_dim = 130;
  EXPECT_NE(error_of(c, 4).find("model.mlp_dim (130) must be a multiple of world_size (4)"),
            std::string::npos);
  EXPECT_NE(error_of(c, 0).find("world_size must be > 0"), std::string::npos);
  EXPECT_THROW(c.kv_group(0, 16, 4, 4), std::invalid_argument);
}

TEST(ModelConfig, KvGroupDescribesOneRanksShare) {
  ModelConfig c;
  c.layers = 5;
  c.kv_heads = 4;
  c.q_heads = 8;
  const KvGroup g = c.kv_group(0, 16, 4, 2);
  EXPECT_EQ(g.layers, 5u);
  EXPECT_EQ(g.kv_heads, 2u);
  EXPECT_EQ(g.head_dim, c.head_dim);
  EXPECT_EQ(g.dtype_bytes, 4u);
  EXPECT_EQ(g.block_size, 16u);
  EXPECT_EQ(g.blocks_per_chunk, 4u);
  EXPECT_THROW(c.kv_group(1, 16, 4, 2), std::invalid_argument);  // single group
}

TEST(ModelConfig, HybridSplitsLayersIntoFullAndSlidingGroups) {
  ModelConfig c;
  c.layers = 5;
  c.sliding_window = 32;
  ASSERT_EQ(c.num_kv_groups(), 2u);
  EXPECT_EQ(c.layers_in_group(0), 3u);  // layers 0, 2, 4
  EXPECT_EQ(c.layers_in_group(1), 2u);  // layers 1, 3
  EXPECT_EQ(c.group_of_layer(3), 1u);
  EXPECT_EQ(c.index_in_group(3), 1u);
  EXPECT_EQ(c.index_in_group(4), 2u);
  EXPECT_EQ(c.window_of_group(0), 0u);
  EXPECT_EQ(c.window_of_group(1), 32u);
  const GroupBlocking blocking[] = {{16, 4}, {8, 2}};
  const KvLayout layout = model_kv_layout(c, DeviceLayout::kCrossLayer, blocking, 1);
  ASSERT_TRUE(layout.validate());
  EXPECT_EQ(layout.groups[1].layers, 2u);
  EXPECT_EQ(layout.groups[1].block_size, 8u);
  EXPECT_THROW(model_kv_layout(c, DeviceLayout::kPerLayer, std::span(blocking).first(1), 1),
               std::invalid_argument);
}

}  // namespace
}  // namespace kvtier
