// The engine scheduler under device-memory pressure (H8, liveness): every request finishes
// within a bounded number of steps, every step makes progress, and every output is identical to
// the same request run alone with plenty of memory. In-process (SchedulerRig): real scheduler,
// tiny model, connector, host device with injected faults.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine/scheduler_rig.h"

namespace kvtier::testing {
namespace {

struct Scenario {
  Config config;
  FaultPlan faults;
  struct Req {
    std::string id;
    std::vector<TokenId> prompt;
    size_t max_tokens = 0;
    size_t arrival_step = 0;
  };
  std::vector<Req> requests;
  std::string describe;
};

std::vector<TokenId> random_tokens(std::mt19937_64& rng, size_t n) {
  std::vector<TokenId> t(n);
  for (TokenId& x : t) x = static_cast<TokenId>(rng() % 256);
  return t;
}

Config base_config(uint32_t sliding_window) {
  Config c;
  c.engine.device_blocks = 512;
  c.engine.max_batched_tokens = 2048;
  c.model.max_context = 1024;
  c.model.sliding_window = sliding_window;
  c.layout.block_size = 16;
  c.layout.blocks_per_chunk = 2;
  c.cache.host_bytes = 8ull << 20;
  return c;
}

// Shared prefixes, device memory from barely one request to plenty, chunked prefill, both
// group shapes, kvtier on and off, load and store faults.
Scenario make_scenario(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t lo, uint64_t hi) { return lo + rng() % (hi - lo + 1); };
  Scenario s;
  const uint32_t window = pick(0, 1) ? 24 : 0;
  s.config = base_config(window);
  std::vector<std::vector<TokenId>> prefixes;
  for (size_t p = pick(1, 3); p > 0; --p) prefixes.push_back(random_tokens(rng, pick(16, 160)));
  size_t longest = 0;
  for (size_t i = pick(3, 10); i > 0; --i) {
    std::vector<TokenId> prompt = prefixes[pick(0, prefixes.size() - 1)];
    const auto suffix = random_tokens(rng, pick(1, 24));
    prompt.insert(prompt.end(), suffix.begin(), suffix.end());
    const size_t max_tokens = pick(1, 12);
    longest = std::max(longest, prompt.size() + max_tokens);
    s.requests.push_back({"r" + std::to_string(s.requests.size()), std::move(prompt), max_tokens,
                          pick(0, 1) ? 0 : pick(0, 30)});
  }
  const uint32_t bs = s.config.layout.block_size;
  const uint32_t barely = static_cast<uint32_t>((longest - 1 + bs - 1) / bs);
  s.config.engine.device_blocks =
      barely + static_cast<uint32_t>(pick(0, 3) == 0 ? pick(0, 200) : pick(0, barely));
  s.config.engine.max_batched_tokens = static_cast<uint32_t>(pick(0, 1) ? pick(8, 64) : 2048);
  s.config.engine.max_running_requests = static_cast<uint32_t>(pick(1, 8));
  s.config.layout.device_layout = pick(0, 1) ? DeviceLayout::kPerLayer : DeviceLayout::kCrossLayer;
  s.config.connector.enabled = pick(0, 2) != 0;
  s.config.connector.store_decode = pick(0, 1) == 1;
  double fault_rate = 0;
  if (s.config.connector.enabled && pick(0, 1)) {
    fault_rate = 0.05 * static_cast<double>(pick(1, 4));
    s.faults = FaultPlan::random(
        seed, RandomFaultRates{
                  .submit_failure = fault_rate, .latched_error = fault_rate, .delay = fault_rate});
  }
  s.describe =
      "seed " + std::to_string(seed) + ": " + std::to_string(s.requests.size()) +
      " requests, longest " + std::to_string(longest) + " tokens, device_blocks " +
      std::to_string(s.config.engine.device_blocks) + " (one request needs " +
      std::to_string(barely) + "), max_batched_tokens " +
      std::to_string(s.config.engine.max_batched_tokens) + ", max_running " +
      std::to_string(s.config.engine.max_running_requests) + ", window " + std::to_string(window) +
      (s.config.layout.device_layout == DeviceLayout::kPerLayer ? ", per-layer" : ", cross-layer") +
      ", kvtier " + (s.config.connector.enabled ? "on" : "off") + ", fault rate " +
      std::to_string(fault_rate);
  return s;
}

// The output of one request run alone on a device with plenty of memory.
std::vector<TokenId> alone(const Config& scenario, const std::vector<TokenId>& prompt,
                           size_t max_tokens) {
  Config c = base_config(scenario.model.sliding_window);
  c.connector.enabled = false;
  SchedulerRig rig(c);
  rig.add("alone", prompt, max_tokens);
  for (int i = 0; i < 10000 && rig.done_count() == 0; ++i) rig.step();
  const auto& r = rig.results().at("alone");
  EXPECT_EQ(r.error, "");
  return r.tokens;
}

bool progressed(const ProgressSnapshot& before, const ProgressSnapshot& after) {
  if (after.finished != before.finished) return true;
  for (const RequestProgress& a : after.requests) {
    for (const RequestProgress& b : before.requests) {
      if (a.id == b.id && a.mark > b.mark) return true;
    }
  }
  return false;
}

void run_scenario(uint64_t seed, TransferGranularity granularity) {
  Scenario s = make_scenario(seed);
  s.config.connector.transfer_granularity = granularity;
  s.describe += std::string(", transfers per ") + std::string(to_string(granularity));
  SCOPED_TRACE(s.describe);
  SchedulerRig rig(s.config, s.faults);
  // Generous but finite: each request alone needs its prefill chunks and one step per token;
  // preemption may make every request redo its work once per other request.
  size_t bound = 50;
  for (const auto& r : s.requests) {
    bound += s.requests.size() *
             (r.prompt.size() / s.config.engine.max_batched_tokens + 1 + r.max_tokens) * 2;
  }
  size_t step = 0;
  size_t added = 0;
  size_t idle_steps = 0;
  while (rig.done_count() < s.requests.size()) {
    for (const auto& r : s.requests) {
      if (r.arrival_step == step) {
        rig.add(r.id, r.prompt, r.max_tokens);
        ++added;
      }
    }
    const ProgressSnapshot before = rig.scheduler().progress();
    const uint64_t preemptions_before = rig.scheduler().counters().preemptions;
    StepPlan plan;
    try {
      plan = rig.step();
    } catch (const std::exception& e) {
      FAIL() << "step " << step << ": " << e.what();
    }
    const ProgressSnapshot after = rig.scheduler().progress();
    // H8: with work admitted, a step computes, frees memory or finishes something (transfers in
    // flight excepted: they end within F8's bound). One step may only admit a request whose load
    // then cannot start (its chunks left the host cache): the next one computes it.
    const bool idle = !before.requests.empty() && !before.transfers_in_flight &&
                      !after.transfers_in_flight && added == s.requests.size() &&
                      plan.batch.empty() && !progressed(before, after) &&
                      rig.scheduler().counters().preemptions == preemptions_before;
    idle_steps = idle ? idle_steps + 1 : 0;
    ASSERT_LE(idle_steps, 1u) << "steps up to " << step << " did nothing";
    ASSERT_LT(++step, bound) << "requests did not finish within " << bound << " steps ("
                             << rig.done_count() << " of " << s.requests.size() << " done)";
  }
  uint64_t prompt_tokens = 0;
  for (const auto& r : s.requests) {
    const auto& got = rig.results().at(r.id);
    ASSERT_EQ(got.error, "") << r.id;
    ASSERT_EQ(got.tokens, alone(s.config, r.prompt, r.max_tokens)) << r.id;
    // What a client is told of its prompt's cache: said once, the same in every update after.
    EXPECT_LE(got.cached_tokens.value_or(0), r.prompt.size()) << r.id;
    EXPECT_FALSE(got.cached_tokens_changed) << r.id;
    prompt_tokens += r.prompt.size();
  }
  // Recomputed after failed loads: at most every prompt once per preemption and once more.
  const EngineCounters counters = rig.scheduler().counters();
  EXPECT_LE(counters.recomputed_tokens, prompt_tokens * (counters.preemptions + 1));
  // Each request counted once, however often it was preempted and admitted again.
  EXPECT_EQ(counters.requests_admitted, s.requests.size());
  EXPECT_EQ(counters.prompt_tokens, prompt_tokens);
  EXPECT_FALSE(rig.scheduler().fail_stopped()) << rig.scheduler().fail_stop_reason();
}

// Both transfer granularities (layer-wise: a loading request computed in its load's step).
class EngineSchedulerGranularity : public ::testing::TestWithParam<TransferGranularity> {};

TEST_P(EngineSchedulerGranularity,
       H8_RandomizedMemoryPressureFinishesEveryRequestWithTheSameOutput) {
#if defined(KVTIER_TSAN_BUILD)
  constexpr uint64_t kSeeds = 4;  // every memory access is checked: slower still than ASan
#elif defined(KVTIER_SANITIZED)
  constexpr uint64_t kSeeds = 12;  // a Debug build under ASan is some 20 times slower
#else
  constexpr uint64_t kSeeds = 60;
#endif
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    run_scenario(seed, GetParam());
    if (::testing::Test::HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(EngineScheduler, EngineSchedulerGranularity,
                         ::testing::Values(TransferGranularity::kRequest,
                                           TransferGranularity::kLayer),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// Layer-wise, the engine computes a loading request in its load's step (each layer after its
// load); that step's result counts only if the load completed. Driven with scripted rank
// reports: a request whose prefix the device evicted and the host cache holds, its load failing
// or completing.
TEST(EngineScheduler, F4_LayerwiseFailedLoadDropsWhatItsStepComputed) {
  for (Outcome outcome : {Outcome::kFailed, Outcome::kCompleted}) {
    SCOPED_TRACE(std::string(to_string(outcome)));
    Config c = base_config(0);
    c.engine.device_blocks = 8;  // 128 tokens
    c.connector.transfer_granularity = TransferGranularity::kLayer;
    EngineScheduler s(c, engine_shape(c));
    // One rank: stores complete, loads end as `outcome` (a failed one reports its blocks).
    auto step = [&](std::vector<RequestUpdate>* updates = nullptr) {
      const StepPlan plan = s.plan_step();
      WorkerOutput out{.rank = 0, .invalid_blocks = GroupBlocks(1)};
      for (const TransferJob& j : plan.metadata.stores) out.finished.push_back({j.job});
      for (const TransferJob& j : plan.metadata.loads) {
        out.finished.push_back({j.job, outcome, outcome == Outcome::kFailed ? "injected" : ""});
        if (outcome != Outcome::kFailed) continue;
        for (const ChunkTransfer& chunk : j.chunks) {
          out.invalid_blocks[0].insert(out.invalid_blocks[0].end(), chunk.blocks.begin(),
                                       chunk.blocks.end());
        }
      }
      auto u = s.finish_step(std::vector<TokenId>(plan.batch.size(), 7), {out});
      if (updates) *updates = std::move(u);
      return plan;
    };
    std::mt19937_64 rng(5);
    const std::vector<TokenId> prefix = random_tokens(rng, 64);
    s.add("a", prefix, 1);
    step();  // a's two chunks go to the host cache
    s.add("c", random_tokens(rng, 120), 1);
    step();  // c takes every device block: a's prefix leaves the device
    std::vector<TokenId> b = prefix;
    b.insert(b.end(), {1, 2, 3, 4, 5});
    s.add("b", b, 1);
    std::vector<RequestUpdate> updates;
    const StepPlan load_step = step(&updates);
    ASSERT_EQ(load_step.metadata.loads.size(), 1u);
    ASSERT_EQ(load_step.batch.size(), 1u) << "b is computed in its load's step";
    EXPECT_EQ(load_step.batch[0].start, 64u) << "from the load's end";
    if (outcome == Outcome::kCompleted) {
      ASSERT_EQ(updates.size(), 1u) << "the step's token is b's first";
      EXPECT_TRUE(updates[0].done);
      continue;
    }
    EXPECT_TRUE(updates.empty()) << "a step that read a failed load's KV yields no token";
    const StepPlan again = step(&updates);
    ASSERT_EQ(again.batch.size(), 1u);
    EXPECT_EQ(again.batch[0].start, 0u) << "b is computed again from the resume point";
    EXPECT_EQ(again.batch[0].tokens.size(), b.size());
    ASSERT_EQ(updates.size(), 1u);
    EXPECT_TRUE(updates[0].done);
  }
}

// F10, whole-request loads computed in their step (connector.load_in_step): the forward pass
// reads a loaded prefix only after its copies ended. Every load's copies start late here (host to
// device copies delayed by up to 60 ms), so a forward pass not fenced behind them would read
// blocks the prefix has not reached yet, and b's output would differ from b's run alone.
TEST(EngineScheduler, F10_AWholeRequestLoadLandsBeforeItsStepsForwardPassReadsIt) {
  Config c = base_config(0);
  c.engine.device_blocks = 8;  // 128 tokens
  c.connector.transfer_granularity = TransferGranularity::kRequest;
  ASSERT_TRUE(c.connector.load_in_step);
  SchedulerRig rig(c, FaultPlan::random(3, RandomFaultRates{
                                               .delay = 1.0,
                                               .max_delay = std::chrono::milliseconds(60),
                                               .only_kind = CopyKind::kHostToDevice,
                                           }));
  std::mt19937_64 rng(5);
  const std::vector<TokenId> prefix = random_tokens(rng, 64);
  auto run = [&](const std::string& id, const std::vector<TokenId>& prompt, size_t max_tokens) {
    rig.add(id, prompt, max_tokens);
    size_t loads = 0;
    for (int i = 0; i < 200 && !(rig.results().contains(id) && rig.results().at(id).done); ++i)
      loads += rig.step().metadata.loads.size();
    return loads;
  };
  run("a", prefix, 1);                   // a's two chunks go to the host cache
  run("c", random_tokens(rng, 120), 1);  // c takes every device block: a's prefix leaves
  std::vector<TokenId> b = prefix;
  b.insert(b.end(), {1, 2, 3, 4, 5});
  ASSERT_EQ(run("b", b, 4), 1u) << "b's prefix comes back from the host cache";
  const auto& result = rig.results().at("b");
  EXPECT_EQ(result.error, "");
  EXPECT_EQ(result.cached_tokens, 64u);
  EXPECT_EQ(result.tokens, alone(c, b, 4));
}

// H8 counts a running request's time only while it could compute. A request whose load ends
// after newer requests were admitted runs before them, and its long suffix takes the whole token
// budget for several steps: the newer ones wait their turn, and are not running for the
// watchdog meanwhile (an engine with a budget far below its running requests' needs would
// otherwise be failed while it serves).
TEST(EngineScheduler, H8_ARequestTheBudgetPassesOverIsNotStalled) {
  Config c = base_config(0);
  c.engine.device_blocks = 12;  // 192 tokens
  c.engine.max_batched_tokens = 8;
  c.connector.transfer_granularity = TransferGranularity::kRequest;
  c.connector.load_in_step = false;  // the load ends first, then the request computes
  SchedulerRig rig(c);
  std::mt19937_64 rng(7);
  const std::vector<TokenId> prefix = random_tokens(rng, 64);
  auto finish = [&](const std::string& id) {
    for (int i = 0; i < 200 && !(rig.results().contains(id) && rig.results().at(id).done); ++i)
      rig.step();
    ASSERT_TRUE(rig.results().at(id).done) << id;
  };
  rig.add("a", prefix, 1);
  finish("a");  // a's prefix goes to the host cache
  rig.add("c", random_tokens(rng, 180), 1);
  finish("c");  // c takes every device block: a's prefix leaves the device
  std::vector<TokenId> b = prefix;
  const std::vector<TokenId> suffix = random_tokens(rng, 48);
  b.insert(b.end(), suffix.begin(), suffix.end());
  rig.add("b", b, 1);
  rig.add("n1", random_tokens(rng, 1), 40);
  rig.add("n2", random_tokens(rng, 1), 40);
  size_t passed_over_steps = 0;
  for (int i = 0; i < 300 && rig.done_count() < 5; ++i) {
    const ProgressSnapshot before = rig.scheduler().progress();
    rig.step();
    for (const RequestProgress& now : rig.scheduler().progress().requests) {
      const auto was = std::ranges::find(before.requests, now.id, &RequestProgress::id);
      if (was == before.requests.end() || now.mark > was->mark) continue;
      EXPECT_FALSE(now.running) << now.id << " computed nothing in step " << i
                                << " but counts as running";
      passed_over_steps += now.id != "b";
    }
  }
  EXPECT_EQ(rig.done_count(), 5u);
  EXPECT_GE(rig.results().at("b").cached_tokens, 64u) << "b's prefix was loaded";
  EXPECT_GE(passed_over_steps, 4u) << "n1 and n2 waited while b's suffix took the budget";
}

// A request preempted after its first token, admitted again with part of its prompt on the
// device and the next part in the host cache, whose load then fails: what its first update told
// the client of its cached tokens stays (the figure is the first admission's), and the tokens
// the failed load leaves to compute are counted from where that load was to end.
TEST(EngineScheduler, ARequestAdmittedAgainKeepsItsReportedCacheAndCountsWhatItRecomputes) {
  Config c = base_config(0);
  c.engine.device_blocks = 8;  // 128 tokens
  EngineScheduler s(c, engine_shape(c));
  // One rank: stores complete, loads fail (reporting their blocks).
  std::vector<RequestUpdate> updates;
  auto step = [&] {
    const StepPlan plan = s.plan_step();
    WorkerOutput out{.rank = 0, .invalid_blocks = GroupBlocks(1)};
    for (const TransferJob& j : plan.metadata.stores) out.finished.push_back({j.job});
    for (const TransferJob& j : plan.metadata.loads) {
      out.finished.push_back({j.job, Outcome::kFailed, "injected"});
      for (const ChunkTransfer& chunk : j.chunks) {
        out.invalid_blocks[0].insert(out.invalid_blocks[0].end(), chunk.blocks.begin(),
                                     chunk.blocks.end());
      }
    }
    for (RequestUpdate& u : s.finish_step(std::vector<TokenId>(plan.batch.size(), 7), {out}))
      updates.push_back(std::move(u));
    return plan;
  };
  std::mt19937_64 rng(9);
  // o (older) grows to 6 blocks; a's 64-token prompt goes to the host cache in its first step,
  // and a is preempted when o and a both need a block and one is left.
  s.add("o", random_tokens(rng, 16), 70);
  s.add("a", random_tokens(rng, 64), 40);
  std::vector<size_t> load_chunks;  // of each load
  for (int i = 0; i < 300 && s.counters().running + s.counters().waiting > 0; ++i) {
    const StepPlan plan = step();
    for (const TransferJob& j : plan.metadata.loads) load_chunks.push_back(j.chunks.size());
  }
  ASSERT_GE(s.counters().preemptions, 1u);
  // a came back with its first chunk still on the device and its second in the host cache.
  ASSERT_EQ(load_chunks, std::vector<size_t>{1});
  std::optional<size_t> reported;
  for (const RequestUpdate& u : updates) {
    if (u.id != "a" || u.new_tokens.empty()) continue;
    if (!reported) reported = u.cached_tokens;
    EXPECT_EQ(u.cached_tokens, *reported) << "a's cached tokens changed after they were reported";
  }
  EXPECT_EQ(reported, 0u) << "nothing of a was cached when it was first admitted";
  EXPECT_GT(s.counters().recomputed_tokens, 0u);
  EXPECT_LE(s.counters().recomputed_tokens, 64u) << "at most a's prompt, once";
}

TEST(EngineScheduler, H8_RequestThatCanNeverFitTheDeviceIsRejected) {
  Config c = base_config(0);
  c.engine.device_blocks = 4;  // 64 tokens: a request may have 65 (prompt + max_tokens)
  SchedulerRig rig(c);
  rig.add("fits", std::vector<TokenId>(60, 7), 5);
  rig.add("too-long", std::vector<TokenId>(60, 7), 6);
  const auto& too_long = rig.results().at("too-long");
  EXPECT_TRUE(too_long.rejected);
  EXPECT_NE(too_long.error.find("engine.device_blocks"), std::string::npos) << too_long.error;
  for (int i = 0; i < 100 && rig.done_count() < 2; ++i) rig.step();
  EXPECT_EQ(rig.results().at("fits").error, "");
  EXPECT_EQ(rig.results().at("fits").tokens.size(), 5u);
}

TEST(EngineScheduler, H8_StallHookStopsARequestAfterItsFirstToken) {
  Config c = base_config(0);
  c.faults.stall_scheduler = true;
  SchedulerRig rig(c);
  rig.add("r", std::vector<TokenId>(20, 3), 4);
  for (int i = 0; i < 50; ++i) rig.step();
  EXPECT_EQ(rig.results().at("r").tokens.size(), 1u);
  EXPECT_FALSE(rig.results().at("r").done);
  const ProgressSnapshot p = rig.scheduler().progress();
  ASSERT_EQ(p.requests.size(), 1u);
  EXPECT_TRUE(p.requests[0].running);
}

// A client that hangs up while its request's step is on the workers: the engine core aborts the
// request before the step's results come back. The request must end without an update, its
// step's results dropped, and the other request of the batch go on to the same output (found by
// `kvtier bench chaos`: the engine core read the freed request and died of SIGSEGV).
TEST(EngineScheduler, AbortWhileItsStepIsComputingEndsItAfterTheStep) {
  for (bool kvtier : {false, true}) {
    SCOPED_TRACE(kvtier ? "kvtier on" : "kvtier off");
    Config c = base_config(0);
    c.connector.enabled = kvtier;
    const std::vector<TokenId> a(40, 5), b(48, 9);
    SchedulerRig rig(c);
    rig.add("a", a, 4);
    rig.add("b", b, 4);
    const StepPlan first = rig.step([&] { rig.scheduler().abort("a"); });
    ASSERT_EQ(first.batch.size(), 2u) << "both requests were in the aborted step";
    for (int i = 0; i < 50 && rig.done_count() < 1; ++i) rig.step();
    EXPECT_FALSE(rig.results().contains("a")) << "an aborted request gets no update";
    ASSERT_TRUE(rig.results().contains("b"));
    EXPECT_EQ(rig.results().at("b").tokens, alone(c, b, 4));
    EXPECT_EQ(rig.scheduler().counters().running, 0u);
    for (const auto& r : rig.scheduler().progress().requests) EXPECT_NE(r.id, "a");
  }
}

}  // namespace
}  // namespace kvtier::testing
