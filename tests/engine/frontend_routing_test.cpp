// The frontend's routing by cache (docs/engine.md "Routing") against scripted fake cores: the
// test publishes the KV events a core would, on the endpoint in the run dir the frontend
// subscribes to, and watches where requests go; with no events at all, requests are served.
#include <gtest/gtest.h>

#include "engine/frontend_rig.h"
#include "kvtier/core/kv_event_publisher.h"
#include "kvtier/engine/byte_vocab.h"
#include "kvtier/engine/engine_shape.h"

namespace kvtier::test {
namespace {

// A prompt the fake core holds in flight ("#hang"), long enough for several device blocks.
std::string hanging_prompt(char fill) {
  return "#hang " + std::string(60, fill);
}

PromptKeys keys_of(const FrontendRig& rig, const std::string& prompt) {
  const CoreManagerOptions options = CoreManagerOptions::from_config(rig.config, rig.run_dir, "");
  return options.routing.value().keying.keys(tokenize(prompt));
}

TEST(FrontendRouting, ARequestGoesToTheCoreThatHoldsItsPrefix) {
  FrontendRig rig({.cores = 2});
  ASSERT_TRUE(rig.health_becomes("ok"));
  // Core 0's events: the prompt's device blocks.
  KvEventPublisher core0({.endpoints = {events_endpoint(rig.run_dir.string(), 0)},
                          .replay_endpoints = {events_replay_endpoint(rig.run_dir.string(), 0)}});
  const std::string prompt = hanging_prompt('a');
  const PromptKeys keys = keys_of(rig, prompt);
  ASSERT_GE(keys.device.size(), 3u);
  // Announced again until the frontend's subscriber, connecting in the background, has it (a
  // batch sent before it connected is lost; the next one shows the gap and replay fills it).
  ASSERT_TRUE(wait_until(
      [&] {
        core0.stored(kMediumDevice, keys.device, keys.block_size);
        core0.flush();
        return rig.manager->indexed_blocks(0, "device") == keys.device.size();
      },
      5000ms));
  // A request with another prefix first: it goes to core 0 (a tie, the lower index), so that
  // load alone would pick core 1 next.
  auto other = rig.manager->submit(tokenize(hanging_prompt('b')), 4);
  ASSERT_TRUE(other);
  EXPECT_EQ(rig.manager->core_of((*other)->id()), 0u);
  // The cached prefix outweighs core 0's request in flight.
  auto hit = rig.manager->submit(tokenize(prompt), 4);
  ASSERT_TRUE(hit);
  EXPECT_EQ(rig.manager->core_of((*hit)->id()), 0u);
  // Once the prefix has left core 0, load decides: core 1.
  core0.removed(kMediumDevice, keys.device);
  core0.flush();
  ASSERT_TRUE(wait_until([&] { return rig.manager->indexed_blocks(0, "device") == 0; }, 5000ms));
  auto miss = rig.manager->submit(tokenize(prompt), 4);
  ASSERT_TRUE(miss);
  EXPECT_EQ(rig.manager->core_of((*miss)->id()), 1u);
}

TEST(FrontendRouting, RequestsAreServedWhenTheEventStreamIsDown) {
  // The fake cores publish no events at all: every request is still answered.
  FrontendRig rig({.cores = 2});
  ASSERT_TRUE(rig.health_becomes("ok"));
  for (int i = 0; i < 4; ++i) {
    const HttpReply reply =
        rig.post("/v1/completions", {{"prompt", std::string(40, 'x')}, {"max_tokens", 3}});
    ASSERT_EQ(reply.status, 200) << reply.body;
  }
  // And when a stream that was up goes down (its publisher gone) nothing changes either.
  {
    KvEventPublisher core0({.endpoints = {events_endpoint(rig.run_dir.string(), 0)}});
    core0.stored(kMediumDevice, keys_of(rig, std::string(40, 'x')).device, 16);
    core0.flush();
  }
  const HttpReply after =
      rig.post("/v1/completions", {{"prompt", std::string(40, 'x')}, {"max_tokens", 3}});
  EXPECT_EQ(after.status, 200) << after.body;
}

}  // namespace
}  // namespace kvtier::test
