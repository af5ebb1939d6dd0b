#include "workload_driver.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "kvtier/core/config.h"
#include "kvtier/engine/engine_shape.h"

namespace kvtier::bench {

using namespace std::chrono_literals;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Between the two closest ranks: the median of an even count is the mean of the middle two.
  const double at = std::clamp(p, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const auto below = static_cast<size_t>(at);
  const size_t above = std::min(below + 1, v.size() - 1);
  return v[below] + (v[above] - v[below]) * (at - static_cast<double>(below));
}

std::vector<std::string> base_sets(uint32_t world_size, size_t device_blocks, size_t max_context) {
  return {"engine.port=0",
          "engine.world_size=" + std::to_string(world_size),
          "engine.device_blocks=" + std::to_string(device_blocks),
          "engine.max_batched_tokens=2048",
          "engine.request_timeout_s=600",
          "model.max_context=" + std::to_string(max_context),
          "layout.block_size=" + std::to_string(kBlock),
          "layout.blocks_per_chunk=" + std::to_string(kBlocksPerChunk),
          "cache.host_bytes=512MiB"};
}

uint64_t chunk_bytes_of(const std::vector<std::string>& sets) {
  const Result<Config> config = with_overrides(Config{}, sets);
  if (!config) throw std::runtime_error("workload config: " + config.error().message);
  const EngineShape shape = engine_shape(*config);
  return uint64_t{shape.layout.max_chunk_bytes()} * shape.world_size;
}

namespace {

// What one `kvtier serve`'s /metrics says.
Counters counters_of(const ServeInstance& serve, const std::string& cache) {
  const HttpAnswer m = serve.get("/metrics", 5s);
  if (m.status != 200)
    throw std::runtime_error(cache + ": /metrics answered " + std::to_string(m.status));
  Counters c{
      .prompt_tokens = metric_sum(m.body, "kvtier_prompt_tokens_total"),
      .cached_tokens = metric_sum(m.body, "kvtier_cached_prompt_tokens_total"),
      .generated_tokens = metric_sum(m.body, "kvtier_generation_tokens_total"),
      .loaded_tokens = metric_sum(m.body, "kvtier_core_kvtier_loaded_tokens_total"),
      .stored_chunks = metric_sum(m.body, "kvtier_core_kvtier_host_stores_succeeded_total"),
      .stores_deferred = metric_sum(m.body, "kvtier_core_kvtier_stores_deferred_total"),
      .stores_not_admitted = metric_sum(m.body, "kvtier_core_kvtier_stores_not_admitted_total"),
      .lookups_deferred = metric_sum(m.body, "kvtier_core_kvtier_deferred_lookups_total")};
  if (cache == "disk") {
    for (const char* name : kMoverCounters) {
      c.mover[name] = metric_sum(m.body, std::string("kvtier_core_kvtier_tier_") + name + "_total");
    }
  }
  return c;
}

}  // namespace

Counters ModeServer::settled_counters() const {
  Counters last = counters();
  for (const auto until = BenchClock::now() + 3s; BenchClock::now() < until;) {
    std::this_thread::sleep_for(250ms);  // more than a heartbeat: the next one came meanwhile
    Counters now = counters();
    if (now == last) break;
    last = std::move(now);
  }
  return last;
}

Counters ModeServer::counters() const {
  if (!backends.empty()) {
    Counters sum;
    for (const auto& backend : backends) {
      const Counters c = counters_of(*backend, cache);
      sum.prompt_tokens += c.prompt_tokens;
      sum.cached_tokens += c.cached_tokens;
      sum.generated_tokens += c.generated_tokens;
      sum.loaded_tokens += c.loaded_tokens;
      sum.stored_chunks += c.stored_chunks;
      for (const auto& [name, value] : c.mover) sum.mover[name] += value;
    }
    return sum;
  }
  Counters c = counters_of(*serve, cache);
  if (kvtierd) {
    const auto stats = kvtierd->stats(5s);
    if (!stats) throw std::runtime_error("kvtierd answers no STATS");
    const auto it = stats->find("stores_succeeded");
    c.stored_chunks = it == stats->end() ? 0 : static_cast<double>(it->second);
  }
  return c;
}

namespace {

// How a request that did not complete ended, in a few words.
std::string failure_of(const StreamResult& r) {
  if (r.status != 200) return "status " + std::to_string(r.status);
  if (r.error_event) return "error event";
  if (!r.done) return "stream ended early";
  return "no text";
}

}  // namespace

// Sends the scenario's requests `concurrency` at a time, each after the one it must follow.
CellRun run_cell(const ModeServer& server, const Scenario& scenario, size_t concurrency) {
  const size_t n = scenario.requests.size();
  CellRun run;
  run.outputs.resize(n);
  std::vector<double> ttft(n, -1), itl(n, -1);
  std::vector<bool> finished(n, false);
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<size_t> next{0};
  const Counters before = server.counters();
  const auto t0 = BenchClock::now();
  std::vector<std::jthread> clients;
  for (size_t c = 0; c < std::min(concurrency, n); ++c) {
    clients.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) {
        const ScenarioRequest& request = scenario.requests[i];
        if (request.after) {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return finished[*request.after]; });
        }
        const StreamResult r = server.serve->stream(request.prompt, scenario.max_tokens, 600s);
        {
          std::lock_guard lock(mu);
          if (r.status == 200 && r.done && r.ttft_ms) {
            run.outputs[i] = r.text;
            ttft[i] = *r.ttft_ms;
            if (r.pieces >= 2) {
              itl[i] = (r.last_piece_ms - *r.ttft_ms) / static_cast<double>(r.pieces - 1);
            }
          } else {
            ++run.failures[failure_of(r)];
          }
          finished[i] = true;
        }
        cv.notify_all();
      }
    });
  }
  clients.clear();  // joins
  run.wall_s = ms_since(t0) / 1000;
  run.counters = server.settled_counters() - before;
  for (size_t i = 0; i < n; ++i) {
    if (ttft[i] >= 0) run.ttft_ms.push_back(ttft[i]);
    if (itl[i] >= 0) run.itl_ms.push_back(itl[i]);
  }
  return run;
}

}  // namespace kvtier::bench
