// The engine core and its workers as real processes, with the test as the frontend.
#include <gtest/gtest.h>

#include "engine/core_process_harness.h"
#include "kvtier/engine/byte_vocab.h"

namespace kvtier::testing {
namespace {

Config small_engine(uint32_t world_size = 1) {
  Config c;
  c.engine.world_size = world_size;
  c.engine.device_blocks = 256;
  c.engine.max_batched_tokens = 256;
  c.engine.heartbeat_interval_s = 0.05;
  c.layout.block_size = 16;
  c.layout.blocks_per_chunk = 4;
  c.cache.host_bytes = 64ull << 20;
  return c;
}

std::vector<TokenId> text(size_t n, char seed) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + (i * 7 + seed) % 26));
  return tokenize(s);
}

TEST(EngineCore, ServesARequestOnOneAndTwoRanks) {
  std::vector<TokenId> first;
  for (uint32_t world : {1u, 2u}) {
    CoreProcessHarness h(small_engine(world));
    ASSERT_TRUE(h.wait_ready()) << h.failed().value_or("no hello");
    const Completion c = h.complete(text(100, 1), 8);
    ASSERT_TRUE(c.done);
    EXPECT_EQ(c.error, "");
    EXPECT_EQ(c.tokens.size(), 8u);
    if (first.empty()) first = c.tokens;
    EXPECT_EQ(c.tokens, first) << "the same output on every world size";
  }
}

}  // namespace
}  // namespace kvtier::testing
