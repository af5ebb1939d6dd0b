#include "scheduler_bench.h"

#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "kvtier/cache/cache_manager.h"
#include "kvtier/connector/scheduler_connector.h"

namespace kvtier::bench {
namespace {

using BenchClock = std::chrono::steady_clock;

struct SimRequest {
  RequestId id;
  std::vector<TokenId> tokens;
  size_t prompt = 0;
  size_t max_new = 0;
  size_t computed = 0;
  std::vector<uint32_t> blocks;
  size_t blocks_given = 0;
  enum { kWaiting, kLoading, kRunning, kFinishing } state = kWaiting;
};

class Simulation {
 public:
  explicit Simulation(const SchedulerBenchOptions& o)
      : o_(o),
        rng_(o.seed),
        layout_{.device_layout = DeviceLayout::kPerLayer,
                .groups = {KvGroup{.layers = 32,
                                   .kv_heads = 8,
                                   .head_dim = 128,
                                   .dtype_bytes = 2,
                                   .block_size = 16,
                                   .blocks_per_chunk = 16}}},
        cache_(size_t{1} << 16, layout_.max_chunk_bytes(),
               *make_eviction_policy("lru", size_t{1} << 16)),
        connector_({.world_size = o.world_size, .layout = layout_, .model = "bench"}, cache_) {
    for (int d = 0; d < 4; ++d) documents_.push_back(random_tokens(o.shared_prefix_tokens));
  }

  // One engine step with a token budget like vLLM's max_num_batched_tokens: every running
  // request decodes one token, prefills share `prefill_chunk` tokens, and waiting requests are
  // admitted (looked up) only while budget is left.
  void step(bool timed) {
    while (live_ < o_.requests) add_request();
    // Only connector calls are timed.
    auto timed_call = [this, timed](Part part, auto&& call) {
      const auto t = BenchClock::now();
      auto result = call();
      if (timed) parts_[part] += BenchClock::now() - t;
      return result;
    };
    StepInput input{.step = step_no_};
    std::vector<SimRequest*> scheduled;
    size_t budget = o_.prefill_chunk;
    auto schedule = [&](SimRequest& r) {
      const size_t left = r.tokens.size() - r.computed;
      const size_t n = left == 1 ? 1 : std::min(budget, left);
      if (n == 0) return;
      if (left > 1) budget -= n;
      allocate(r, r.computed + n);
      GroupBlocks added{std::vector<uint32_t>(
          r.blocks.begin() + static_cast<ptrdiff_t>(r.blocks_given), r.blocks.end())};
      r.blocks_given = r.blocks.size();
      input.requests.push_back({.id = r.id,
                                .tokens = r.tokens,
                                .num_prompt_tokens = r.prompt,
                                .new_blocks = std::move(added),
                                .num_computed_after_step = r.computed + n});
      r.computed += n;
      scheduled.push_back(&r);
    };
    for (auto& [id, r] : requests_) {
      if (r.state == SimRequest::kRunning) schedule(r);
    }
    for (auto& [id, r] : requests_) {
      if (r.state != SimRequest::kWaiting || budget == 0) continue;
      const Match m = timed_call(kLookup, [&] {
        return connector_.get_num_new_matched_tokens(
            {.id = id, .tokens = r.tokens, .num_prompt_tokens = r.prompt}, 0);
      });
      if (m.ask_later) continue;
      allocate(r, r.tokens.size());
      GroupBlocks table{r.blocks};
      timed_call(kAlloc, [&] {
        connector_.update_state_after_alloc(id, table, m.tokens);
        return 0;
      });
      r.blocks_given = r.blocks.size();
      r.state = m.tokens > 0 ? SimRequest::kLoading : SimRequest::kRunning;
      if (r.state == SimRequest::kRunning) schedule(r);
    }
    const StepMetadata meta =
        timed_call(kBuild, [&] { return connector_.build_step_metadata(input); });
    // The ranks acknowledge last step's jobs (one step of transfer latency).
    const StepOutcome outcome =
        timed_call(kAggregate, [&] { return connector_.update_from_worker_output(outputs_); });
    timed_call(kAggregate, [&] { return connector_.take_events(); });
    outputs_.assign(o_.world_size, WorkerOutput{});
    for (uint32_t rank = 0; rank < o_.world_size; ++rank) {
      outputs_[rank].rank = rank;
      for (const TransferJob& j : meta.loads) outputs_[rank].finished.push_back({j.job});
      for (const TransferJob& j : meta.stores) outputs_[rank].finished.push_back({j.job});
    }
    for (const LoadFinished& l : outcome.loads) {
      SimRequest& r = requests_.at(l.request);
      r.computed = l.num_computed;
      r.state = SimRequest::kRunning;
    }
    // Sampling and finished requests (outside the timed part but for the connector calls).
    std::vector<RequestId> finished;
    for (SimRequest* r : scheduled) {
      if (r->computed < r->tokens.size()) continue;
      if (r->tokens.size() - r->prompt >= r->max_new) {
        finished.push_back(r->id);
      } else {
        r->tokens.push_back(static_cast<TokenId>(rng_() % 50000));
      }
    }
    for (const RequestId& id : finished) {
      if (timed_call(kFinish, [&] { return connector_.request_finished(id); })) {
        requests_.at(id).state = SimRequest::kFinishing;
      } else {
        release(id);
      }
      --live_;
    }
    for (const RequestId& id : outcome.released) release(id);
    if (timed) ++timed_steps_;
    ++step_no_;
  }

  enum Part { kLookup, kAlloc, kBuild, kAggregate, kFinish, kParts };
  static constexpr const char* kPartNames[kParts] = {"lookup_us", "alloc_us", "build_us",
                                                     "aggregate_us", "finish_us"};
  double us_per_step(int part) const {
    return std::chrono::duration<double, std::micro>(parts_[part]).count() /
           static_cast<double>(timed_steps_);
  }
  double us_per_step() const {
    double total = 0;
    for (int p = 0; p < kParts; ++p) total += us_per_step(p);
    return total;
  }
  ConnectorCounters counters() const { return connector_.counters(); }

 private:
  std::vector<TokenId> random_tokens(size_t n) {
    std::vector<TokenId> t(n);
    for (auto& x : t) x = static_cast<TokenId>(rng_() % 50000);
    return t;
  }

  void add_request() {
    SimRequest r;
    r.id = "req-" + std::to_string(next_id_++);
    r.tokens = documents_[rng_() % documents_.size()];
    const auto unique = random_tokens(o_.prompt_tokens - o_.shared_prefix_tokens);
    r.tokens.insert(r.tokens.end(), unique.begin(), unique.end());
    r.prompt = r.tokens.size();
    r.max_new = 1 + rng_() % (2 * o_.mean_decode_tokens);
    ++live_;
    requests_.emplace(r.id, std::move(r));
  }

  void allocate(SimRequest& r, size_t tokens) {
    while (r.blocks.size() * 16 < tokens) {
      if (free_blocks_.empty()) free_blocks_.push_back(next_block_++);
      r.blocks.push_back(free_blocks_.front());
      free_blocks_.pop_front();
    }
  }

  void release(const RequestId& id) {
    auto it = requests_.find(id);
    for (uint32_t b : it->second.blocks) free_blocks_.push_back(b);
    requests_.erase(it);
  }

  SchedulerBenchOptions o_;
  std::mt19937_64 rng_;
  KvLayout layout_;
  CacheManager cache_;
  SchedulerConnector connector_;
  std::vector<std::vector<TokenId>> documents_;
  std::map<RequestId, SimRequest> requests_;
  std::vector<WorkerOutput> outputs_;
  size_t live_ = 0;
  uint64_t next_id_ = 0;
  uint32_t next_block_ = 0;
  std::deque<uint32_t> free_blocks_;
  uint64_t step_no_ = 0;
  BenchClock::duration parts_[kParts] = {};
  size_t timed_steps_ = 0;
};

}  // namespace

int run_scheduler_bench(const SchedulerBenchOptions& options, std::ostream& out) {
  Simulation sim(options);
  for (size_t i = 0; i < options.warmup_steps; ++i) sim.step(false);
  for (size_t i = 0; i < options.steps; ++i) sim.step(true);
  const ConnectorCounters c = sim.counters();
  const double us = sim.us_per_step();
  if (options.json) {
    nlohmann::json row{{"bench", "scheduler"},
                       {"requests", options.requests},
                       {"prompt_tokens", options.prompt_tokens},
                       {"world_size", options.world_size},
                       {"steps", options.steps},
                       {"us_per_step", us},
                       {"target_us_per_step", 50},
                       {"jobs_issued", c.jobs_issued},
                       {"loaded_tokens", c.loaded_tokens}};
    for (int p = 0; p < Simulation::kParts; ++p)
      row[Simulation::kPartNames[p]] = sim.us_per_step(p);
    out << row.dump() << "\n";
  } else {
    char line[256];
    std::snprintf(
        line, sizeof line,
        "scheduler: %zu requests, %zu-token prompts, %u ranks: %.1f us/step over %zu steps "
        "(target <= 50), %llu jobs, %llu tokens loaded\n",
        options.requests, options.prompt_tokens, options.world_size, us, options.steps,
        static_cast<unsigned long long>(c.jobs_issued),
        static_cast<unsigned long long>(c.loaded_tokens));
    out << line;
  }
  return 0;
}

}  // namespace kvtier::bench
