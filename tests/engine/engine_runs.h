// Configs and runs shared by the engine-core tests (engine_core_test, server_mode_test).
#pragma once

#include <string>
#include <vector>

#include "engine/core_process_harness.h"
#include "kvtier/engine/byte_vocab.h"

namespace kvtier::testing {

inline Config small_engine(uint32_t world_size = 1) {
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

inline std::vector<TokenId> text(size_t n, char seed) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + (i * 7 + seed) % 26));
  return tokenize(s);
}

// A device too small to keep earlier prompts: a repeated prefix comes back from kvtier.
inline Config small_device(bool offload, uint32_t world_size = 1) {
  Config c = small_engine(world_size);
  c.engine.device_blocks = 40;  // 640 tokens
  c.connector.enabled = offload;
  return c;
}

struct RunResult {
  std::vector<std::vector<TokenId>> outputs;
  std::vector<size_t> cached;
  nlohmann::json counters;
};

// Runs `prompts` one after another (8 tokens each) on a fresh engine core.
inline RunResult run_prompts(const Config& config,
                             const std::vector<std::vector<TokenId>>& prompts) {
  CoreProcessHarness h(config);
  RunResult run;
  if (!h.wait_ready()) {
    ADD_FAILURE() << h.failed().value_or("no hello");
    return run;
  }
  for (const auto& prompt : prompts) {
    const Completion c = h.complete(prompt, 8);
    EXPECT_EQ(c.error, "");
    run.outputs.push_back(c.tokens);
    run.cached.push_back(c.cached_tokens);
  }
  run.counters = h.fresh_counters();
  return run;
}

// A, B and C, then each again with a new suffix: three returning prefixes to load.
inline RunResult shared_prefix_run(const Config& config) {
  std::vector<std::vector<TokenId>> prompts = {text(400, 1), text(400, 2), text(400, 3)};
  for (size_t i = 0; i < 3; ++i) {
    auto again = prompts[i];
    for (TokenId t : text(30, static_cast<char>(9 + i))) again.push_back(t);
    prompts.push_back(std::move(again));
  }
  return run_prompts(config, prompts);
}

}  // namespace kvtier::testing
