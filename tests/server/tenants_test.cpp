// Tenants (src/server/tenants.h): the tenants file's rules, each error naming what is wrong, and
// the namespaces the server scopes keys to.
#include "tenants.h"

#include <gtest/gtest.h>

#include "curve_key_dir.h"

namespace kvtier::server {
namespace {

using testing::CurveKeyDir;

class TenantsFile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!curve_available()) GTEST_SKIP() << "libzmq without CURVE";
    a_ = dir_.make("a").public_key;
    b_ = dir_.make("b").public_key;
  }
  Result<Tenants> load(const std::string& text, size_t num_slots = 64) {
    return Tenants::load(dir_.write("tenants.yaml", text), Config{}, num_slots);
  }
  // The load's error message (empty when it loaded).
  std::string error_of(const std::string& text) {
    auto t = load(text);
    return t ? std::string() : t.error().message;
  }

  CurveKeyDir dir_;
  std::string a_, b_;
};

TEST_F(TenantsFile, KeysMapToTheirTenantsWithTheirLimits) {
  auto t = load("tenants:\n  alice: {keys: [\"" + a_ +
                "\"], max_slots: 10, guaranteed_slots: 4, max_pins: 2}\n  bob: {keys: [\"" + b_ +
                "\"]}\n");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_TRUE(t->curve());
  const auto alice = t->by_name("alice");
  ASSERT_TRUE(alice);
  EXPECT_EQ((*t)[*alice].limits.max_slots, 10u);
  EXPECT_EQ((*t)[*alice].limits.guaranteed_slots, 4u);
  EXPECT_EQ((*t)[*alice].limits.max_pins, 2u);
  EXPECT_EQ((*t)[*t->by_name("bob")].limits.max_pins, Config{}.server.max_pins);
  EXPECT_EQ((*t)[*t->by_name("bob")].limits.max_slots, TenantLimits::kUnlimited);
  EXPECT_NE(t->by_name("alice"), t->by_name("bob"));
  EXPECT_NE(*alice, kDefaultTenant);
}

TEST_F(TenantsFile, EveryBadEntryIsAnErrorNamingIt) {
  const std::string a = "[\"" + a_ + "\"]";
  const struct {
    std::string text, says;
  } cases[] = {
      {"tenants: {}\n", "at least one tenant"},
      {"tenants:\n  alice: {keys: " + a + "}\nextra: 1\n", "unknown field 'extra'"},
      {"tenants:\n  alice: {keys: " + a + ", max_slot: 3}\n", "unknown field 'max_slot'"},
      {"tenants:\n  alice: {keys: [\"short\"]}\n", "not a Z85 CURVE public key"},
      {"tenants:\n  alice: {keys: " + a + "}\n  bob: {keys: " + a + "}\n", "listed twice"},
      {"tenants:\n  default: {keys: " + a + "}\n", "reserved"},
      {"tenants:\n  al ice: {keys: " + a + "}\n", "a name is"},
      {"tenants:\n  alice: {keys: " + a + ", max_slots: -1}\n", "'max_slots' must be a whole"},
      // yaml-cpp would read these as 8 and 16.
      {"tenants:\n  alice: {keys: " + a + ", max_pins: 010}\n", "'max_pins' must be a whole"},
      {"tenants:\n  alice: {keys: " + a + ", max_pins: 0x10}\n", "'max_pins' must be a whole"},
      // A key named twice: yaml-cpp keeps both, and a lookup finds one.
      {"tenants:\n  alice: {keys: " + a + ", max_slots: 1, max_slots: 99}\n",
       "'max_slots' is given twice"},
      {"tenants:\n  alice: {keys: " + a + "}\ntenants:\n  bob: {keys: [\"" + b_ + "\"]}\n",
       "'tenants' is given twice"},
      {"tenants:\n  alice: {keys: " + a + "}\n  bob: {keys: [\"" + b_ +
           "\"]}\nsharing_groups:\n  g: [alice]\n  g: [bob]\n",
       "sharing group 'g': listed twice"},
      {"tenants:\n  alice: {keys: " + a + ", guaranteed_slots: 65}\n", "more than the host pool"},
      {"tenants:\n  alice: {keys: " + a + "}\nsharing_groups:\n  g: [alice, carol]\n",
       "'carol' is not a tenant"},
      {"tenants:\n  alice: {keys: " + a + "}\nsharing_groups:\n  g: [alice]\n  h: [alice]\n",
       "in two sharing groups"},
      {"tenants: [\n", "tenants file"},
  };
  for (const auto& c : cases) {
    const std::string error = error_of(c.text);
    EXPECT_NE(error.find(c.says), std::string::npos) << c.text << " -> " << error;
    EXPECT_NE(error.find("tenants.yaml"), std::string::npos) << error;
  }
  EXPECT_NE(
      Tenants::load(dir_.file("missing.yaml"), Config{}, 64).error().message.find("missing.yaml"),
      std::string::npos);
}

TEST_F(TenantsFile, NamespacesSeparateTenantsAndJoinASharingGroup) {
  auto t = load("tenants:\n  alice: {keys: [\"" + a_ + "\"]}\n  bob: {keys: [\"" + b_ +
                "\"]}\n  carol: {}\nsharing_groups:\n  prompts: [alice, carol]\n");
  ASSERT_TRUE(t) << t.error().message;
  const std::vector<ChunkKey> sent = {ChunkKey{1, 2}, ChunkKey{3, 4}};
  const auto scoped = [&](const char* name) {
    auto keys = sent;
    t->scope(*t->by_name(name), keys);
    return keys;
  };
  EXPECT_NE(scoped("alice"), sent);
  EXPECT_NE(scoped("alice"), scoped("bob"));
  EXPECT_EQ(scoped("alice"), scoped("carol"));  // one sharing group
  EXPECT_NE(scoped("alice")[0], scoped("alice")[1]);
  auto unscoped = sent;
  t->scope(kDefaultTenant, unscoped);
  EXPECT_EQ(unscoped, sent);  // the default tenant's keys are used as sent
  // Deterministic across loads (chunks in lower tiers stay reachable after a restart).
  auto again = load("tenants:\n  alice: {keys: [\"" + a_ + "\"]}\n  bob: {keys: [\"" + b_ +
                    "\"]}\n  carol: {}\nsharing_groups:\n  prompts: [alice, carol]\n");
  ASSERT_TRUE(again);
  auto keys = sent;
  again->scope(*again->by_name("bob"), keys);
  EXPECT_EQ(keys, scoped("bob"));
}

}  // namespace
}  // namespace kvtier::server
