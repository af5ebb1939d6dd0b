#include "kvtier/tier/tier_factory.h"

#include <gtest/gtest.h>

#include "support/temp_dir.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;

const KeyNamespace kNamespace{.model = "m", .layout_fingerprint = 1};

TEST(TierFactory, NoLocationsMeansNoTiers) {
  Result<std::vector<std::unique_ptr<HealthCheckedTier>>> tiers = make_tiers({}, kNamespace);
  ASSERT_TRUE(tiers);
  EXPECT_TRUE(tiers->empty());
}

TEST(TierFactory, DiskThenRedisEachHealthChecked) {
  testing::TempDir dir;
  TiersConfig config{.disk_path = (dir.path() / "l2").string(),
                     .redis_url = "redis://127.0.0.1:1",  // not contacted here
                     .redis_timeout_s = 0.25};
  auto tiers = make_tiers(config, kNamespace);
  ASSERT_TRUE(tiers) << tiers.error().to_string();
  ASSERT_EQ(tiers->size(), 2u);
  EXPECT_EQ((*tiers)[0]->name(), "disk");
  EXPECT_EQ((*tiers)[1]->name(), "redis");
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() / "l2"));
  EXPECT_EQ(tier_timeout(config, "disk"), 5s);
  EXPECT_EQ(tier_timeout(config, "redis"), 250ms);
}

TEST(TierFactory, ErrorsNameTheField) {
  auto bad_url = make_tiers({.redis_url = "redis://h:1/0"}, kNamespace);
  ASSERT_FALSE(bad_url);
  EXPECT_NE(bad_url.error().message.find("tiers.redis_url"), std::string::npos);
  auto bad_dir = make_tiers({.disk_path = "/proc/kvtier-cannot-be-here"}, kNamespace);
  ASSERT_FALSE(bad_dir);
  EXPECT_NE(bad_dir.error().message.find("tiers.disk_path"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
