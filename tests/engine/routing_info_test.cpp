// What `kvtier serve` tells `kvtier router` about itself (RoutingInfo), and the router's backend
// URLs: values only, no processes.
#include "kvtier/engine/routing_info.h"

#include <gtest/gtest.h>

#include "kvtier/engine/backend_pool.h"
#include "kvtier/engine/byte_vocab.h"

namespace kvtier {
namespace {

Config two_cores_with_events() {
  Config config;
  config.engine.engine_cores = 2;
  config.events.endpoint = "tcp://*:5601";
  config.events.replay_endpoint = "tcp://*:5701";
  return config;
}

TEST(RoutingInfo, ReadBackItKeysAPromptAsTheServerDoes) {
  const Config config = two_cores_with_events();
  const RoutingInfo info = RoutingInfo::of(config);
  const auto back = RoutingInfo::from_json(nlohmann::json::parse(info.to_json().dump()));
  ASSERT_TRUE(back) << back.error();
  const std::vector<TokenId> prompt = tokenize(std::string(300, 'q'));
  const PromptKeys want = prompt_keying(engine_shape(config)).keys(prompt);
  const PromptKeys got = back->keying.keys(prompt);
  ASSERT_FALSE(want.device.empty());
  ASSERT_FALSE(want.chunks.empty());
  EXPECT_EQ(got.device, want.device);
  EXPECT_EQ(got.chunks, want.chunks);
  EXPECT_EQ(back->limits.model_name, config.engine.model_name);
  EXPECT_EQ(back->limits.max_request_tokens, info.limits.max_request_tokens);
  // Core n binds the endpoints' port + n.
  ASSERT_EQ(back->publishers.size(), 2u);
  EXPECT_EQ(back->publishers[1].endpoint, "tcp://*:5602");
  EXPECT_EQ(back->publishers[1].replay_endpoint, "tcp://*:5702");
}

TEST(RoutingInfo, NoEventsEndpointMeansNoPublishers) {
  EXPECT_TRUE(RoutingInfo::of(Config{}).publishers.empty());
}

TEST(RoutingInfo, AMissingOrIllTypedFieldIsAnErrorNotAThrow) {
  nlohmann::json j = RoutingInfo::of(Config{}).to_json();
  j.erase("host_namespace");
  EXPECT_FALSE(RoutingInfo::from_json(j));
  j = RoutingInfo::of(Config{}).to_json();
  j["block_size"] = "sixteen";
  EXPECT_FALSE(RoutingInfo::from_json(j));
  j["block_size"] = 0;
  EXPECT_FALSE(RoutingInfo::from_json(j));
  EXPECT_FALSE(RoutingInfo::from_json(nlohmann::json::array()));
}

TEST(RoutingInfo, AnEndpointOnEveryInterfaceIsReachedAtTheBackendsHost) {
  EXPECT_EQ(reachable_endpoint("tcp://*:5601", "10.0.0.7"), "tcp://10.0.0.7:5601");
  EXPECT_EQ(reachable_endpoint("tcp://0.0.0.0:5601", "node-2"), "tcp://node-2:5601");
  EXPECT_EQ(reachable_endpoint("tcp://[::]:5601", "::1"), "tcp://[::1]:5601");
  EXPECT_EQ(reachable_endpoint("tcp://10.0.0.8:5601", "10.0.0.7"), "tcp://10.0.0.8:5601");
  EXPECT_EQ(reachable_endpoint("ipc:///run/kvtier-events", "10.0.0.7"), "ipc:///run/kvtier-events");
}

TEST(BackendUrl, HostAndPortOrAClearError) {
  const auto a = parse_backend_url("http://127.0.0.1:8001/");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8001);
  const auto v6 = parse_backend_url("http://[::1]:8002");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  for (const char* bad : {"127.0.0.1:8001", "https://h:1", "http://h", "http://h:0",
                          "http://h:70000", "http://h:80/v1", "http://:80", "http://h:8x"}) {
    const auto r = parse_backend_url(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find(bad), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace kvtier
