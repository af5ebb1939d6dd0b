#include "workload_bench.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bench_row.h"
#include "filler_text.h"
#include "kvtier/core/child_process.h"
#include "kvtier/core/config.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtierd_instance.h"
#include "serve_instance.h"
#include "workload_driver.h"

namespace kvtier::bench {
namespace {

using namespace std::chrono_literals;

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::ranges::find(names, name) != names.end();
}

// kvtierd sized for one rank's share of the layout those overrides give.
std::vector<std::string> kvtierd_sets(const std::vector<std::string>& serve_sets) {
  std::vector<std::string> sets = kvtierd_layout_sets(serve_sets);
  sets.push_back("cache.host_bytes=512MiB");
  return sets;
}

// One `kvtier serve` tree per cache mode for one cell: a device that holds the cell's running
// batch (`concurrency` of its longest prompts, at least two) but not every conversation's
// history, as a serving engine is sized for its batch.
std::vector<ModeServer> start_servers(const WorkloadBenchOptions& o, const std::string& exe,
                                      const std::vector<std::string>& caches,
                                      const std::vector<std::string>& base, size_t longest,
                                      size_t concurrency, const std::filesystem::path& dir,
                                      const std::string& tag, Progress& progress) {
  const uint64_t chunk_bytes = chunk_bytes_of(base);
  std::vector<ModeServer> servers;
  for (const std::string& cache : caches) {
    progress.show("workload: " + tag + ": starting " + cache);
    ModeServer m{.cache = cache};
    std::vector<std::string> sets = base;
    sets.push_back(std::string("connector.enabled=") + (cache == "off" ? "false" : "true"));
    if (cache == "host-request") {
      sets.push_back("connector.transfer_granularity=request");  // whole-request transfers
    } else if (cache == "disk") {
      // A host pool for the running batch's prefixes and half as many again (1.5 × the
      // concurrency's longest prompts, at least 3): room to stage what the batch loads, but less
      // than the working set of multi-round-qa's users and long-doc-qa's documents (2 ×
      // concurrency prompts), so most reuse comes back from disk.
      const uint64_t chunk_tokens = kBlock * kBlocksPerChunk;
      const uint64_t prompts = std::max<uint64_t>(2, concurrency) * 3 / 2;
      const uint64_t host_bytes =
          prompts * ((longest + chunk_tokens - 1) / chunk_tokens) * chunk_bytes;
      sets.push_back("cache.host_bytes=" + std::to_string(host_bytes));
      sets.push_back("tiers.disk_path=" + (dir / ("disk-" + tag)).string());
    } else if (cache == "kvtierd") {
      m.kvtierd = std::make_unique<KvtierdInstance>(
          exe, "ipc://" + (dir / ("kvtierd-" + tag + ".sock")).string(), kvtierd_sets(base),
          dir / ("kvtierd-" + tag + ".log"));
      if (!m.kvtierd->start(30s)) throw std::runtime_error("kvtierd did not start");
      sets.push_back("cache.mode=server");
      sets.push_back("server.endpoint=" + m.kvtierd->endpoint());
    }
    sets.insert(sets.end(), o.extra_sets.begin(), o.extra_sets.end());
    m.serve = std::make_unique<ServeInstance>(exe, sets);
    servers.push_back(std::move(m));
  }
  return servers;
}

// One mode's row for one round of a cell; with `off` (cache off's run of the same round), the
// ratios against it.
nlohmann::ordered_json cell_row(const std::string& name, size_t c, const std::string& cache,
                                const Scenario& scenario, const CellRun& run, const CellRun* off,
                                uint64_t chunk_bytes, double bytes_per_token) {
  const size_t errors = static_cast<size_t>(
      std::ranges::count_if(run.outputs, [](const auto& t) { return !t.has_value(); }));
  const double tokens_per_s = run.wall_s > 0 ? run.counters.generated_tokens / run.wall_s : 0;
  nlohmann::ordered_json row{
      {"bench", "workload"},
      {"scenario", name},
      {"concurrency", c},
      {"cache", cache},
      {"requests", scenario.requests.size()},
      {"errors", errors},
      {"ttft_p50_ms", percentile(run.ttft_ms, 0.5)},
      {"ttft_p99_ms", percentile(run.ttft_ms, 0.99)},
      {"itl_p50_ms", percentile(run.itl_ms, 0.5)},
      {"itl_p99_ms", percentile(run.itl_ms, 0.99)},
      {"output_tokens_per_s", tokens_per_s},
      {"hit_rate", run.counters.prompt_tokens > 0
                       ? run.counters.cached_tokens / run.counters.prompt_tokens
                       : 0.0},
      {"bytes_loaded", run.counters.loaded_tokens * bytes_per_token},
      {"bytes_stored", run.counters.stored_chunks * static_cast<double>(chunk_bytes)},
      {"stores_deferred", run.counters.stores_deferred},
      {"stores_not_admitted", run.counters.stores_not_admitted},
      {"lookups_deferred", run.counters.lookups_deferred},
      {"wall_s", run.wall_s}};
  for (const auto& [counter, value] : run.counters.mover) row["tier_" + counter] = value;
  if (errors > 0) row["failures"] = run.failures;
  if (off != nullptr && cache != "off") {
    const double off_tps = off->wall_s > 0 ? off->counters.generated_tokens / off->wall_s : 0;
    const double p50 = percentile(run.ttft_ms, 0.5), p99 = percentile(run.ttft_ms, 0.99);
    const double off_p50 = percentile(off->ttft_ms, 0.5);
    const double off_p99 = percentile(off->ttft_ms, 0.99);
    row["throughput_ratio"] = off_tps > 0 ? tokens_per_s / off_tps : 0.0;
    row["ttft_p50_speedup"] = p50 > 0 ? off_p50 / p50 : 0.0;
    row["ttft_p99_slowdown"] = off_p99 > 0 ? p99 / off_p99 : 0.0;
    row["outputs_identical"] = errors == 0 && run.outputs == off->outputs;
  }
  return row;
}

// The rows of one mode's rounds as one row: every number is the median of the rounds' (a ratio
// the median of the rounds' ratios, each against cache off in the same round), errors are
// summed, outputs are identical when they were in every round, and `<ratio>_rounds` lists each
// round's ratios.
nlohmann::ordered_json median_row(const std::vector<nlohmann::ordered_json>& rounds) {
  nlohmann::ordered_json row = rounds.front();
  if (rounds.size() == 1) return row;
  for (auto& [field, value] : row.items()) {
    if (!value.is_number() || field == "concurrency" || field == "requests") continue;
    std::vector<double> values;
    for (const auto& r : rounds) values.push_back(r.value(field, 0.0));
    if (field == "errors") {
      value = static_cast<uint64_t>(std::accumulate(values.begin(), values.end(), 0.0));
    } else {
      value = percentile(values, 0.5);
    }
  }
  for (const char* ratio : {"throughput_ratio", "ttft_p50_speedup", "ttft_p99_slowdown"}) {
    if (!row.contains(ratio)) continue;
    nlohmann::ordered_json each = nlohmann::ordered_json::array();
    for (const auto& r : rounds) each.push_back(r[ratio]);
    row[std::string(ratio) + "_rounds"] = each;
  }
  if (row.contains("outputs_identical")) {
    row["outputs_identical"] = std::ranges::all_of(
        rounds, [](const auto& r) { return r.value("outputs_identical", false); });
  }
  nlohmann::ordered_json failures = nlohmann::ordered_json::object();
  for (const auto& r : rounds) {
    if (!r.contains("failures")) continue;
    for (const auto& [how, n] : r["failures"].items()) {
      failures[how] = failures.value(how, size_t{0}) + n.get<size_t>();
    }
  }
  if (!failures.empty()) row["failures"] = failures;
  row["rounds"] = rounds.size();
  return row;
}

// The scenarios of workload_scenarios.h: for every concurrency, servers per mode, the modes
// taking turns, `repeat` rounds of them (each round its own prompts, from its own seed).
// Returns false when a request failed or an output differed from off's.
bool run_scenario(const WorkloadBenchOptions& o, const std::string& exe, const std::string& name,
                  const std::vector<std::string>& caches, const std::filesystem::path& dir,
                  size_t& cell, size_t cells, Progress& progress, std::ostream& out) {
  bool ok = true;
  for (size_t c : o.concurrency) {
    // Each concurrency its own requests and its own servers (nothing carries over).
    std::vector<Scenario> scenarios;
    for (uint32_t r = 0; r < o.repeat; ++r) {
      scenarios.push_back(make_scenario(name, c, o.sizes, o.seed + c + uint64_t{7919} * r));
    }
    size_t longest = 0;
    for (const Scenario& s : scenarios) longest = std::max(longest, s.longest_prompt);
    const size_t prompt_blocks = (longest + o.sizes.answer_tokens + kBlock - 1) / kBlock;
    const size_t device_blocks = std::max<size_t>(2, c) * prompt_blocks + 16;
    const size_t max_context = std::max<size_t>(4096, longest + o.sizes.answer_tokens + 256);
    const std::vector<std::string> base = base_sets(o.world_size, device_blocks, max_context);
    const uint64_t chunk_bytes = chunk_bytes_of(base);
    const double bytes_per_token = static_cast<double>(chunk_bytes) / (kBlock * kBlocksPerChunk);
    std::vector<ModeServer> servers = start_servers(o, exe, caches, base, longest, c, dir,
                                                    name + "-" + std::to_string(c), progress);
    ++cell;
    const auto off = std::ranges::find(caches, "off");
    std::vector<std::vector<nlohmann::ordered_json>> rows(servers.size());
    for (uint32_t r = 0; r < o.repeat; ++r) {
      std::vector<std::optional<CellRun>> runs(servers.size());
      for (size_t k = 0; k < servers.size(); ++k) {
        const size_t m = (k + cell + r) % servers.size();  // the order rotates every round
        progress.show(
            "workload: cell " + std::to_string(cell) + "/" + std::to_string(cells) + ": " + name +
            ", concurrency " + std::to_string(c) + ", cache " + servers[m].cache + " (" +
            std::to_string(scenarios[r].requests.size()) + " requests" +
            (o.repeat > 1 ? ", round " + std::to_string(r + 1) + "/" + std::to_string(o.repeat)
                          : std::string()) +
            ")");
        runs[m] = run_cell(servers[m], scenarios[r], c);
      }
      const CellRun* off_run = off == caches.end() ? nullptr : &*runs[off - caches.begin()];
      for (size_t m = 0; m < servers.size(); ++m) {
        rows[m].push_back(cell_row(name, c, servers[m].cache, scenarios[r], *runs[m], off_run,
                                   chunk_bytes, bytes_per_token));
      }
    }
    for (size_t m = 0; m < servers.size(); ++m) {
      const nlohmann::ordered_json row = median_row(rows[m]);
      if (row["errors"].get<double>() > 0 || !row.value("outputs_identical", true)) ok = false;
      emit(out, o.json, row);
    }
  }
  return ok;
}

// Memory pressure (H8): device memory for about one and a half requests, 8 requests at a time
// over three shared documents; every request must complete, with the same output with the
// cache on and off.
void run_pressure(const WorkloadBenchOptions& o, const std::string& exe, std::ostream& out) {
  const size_t pressure_prompt = 2500;
  const size_t pressure_blocks = (pressure_prompt + 64) * 3 / 2 / kBlock;
  std::mt19937_64 rng(11);
  std::vector<std::string> documents;
  for (int d = 0; d < 3; ++d) documents.push_back(filler_text(rng, pressure_prompt));
  Scenario work{.name = "pressure", .max_tokens = 12};
  for (uint32_t i = 0; i < o.pressure_requests; ++i) {
    work.requests.push_back(
        {.prompt = documents[i % 3] + "\nQ" + std::to_string(i) + ": what follows?"});
  }
  std::vector<std::optional<std::string>> reference;
  for (bool cache : {false, true}) {
    std::vector<std::string> s = base_sets(o.world_size, pressure_blocks, 16384);
    s.push_back(std::string("connector.enabled=") + (cache ? "true" : "false"));
    s.push_back("engine.request_timeout_s=120");  // a request that hangs counts as an error
    ModeServer server{.cache = cache ? "on" : "off",
                      .serve = std::make_unique<ServeInstance>(exe, s)};
    const CellRun run = run_cell(server, work, 8);
    const size_t completed = static_cast<size_t>(
        std::ranges::count_if(run.outputs, [](const auto& text) { return text.has_value(); }));
    if (!cache) reference = run.outputs;
    const bool identical = run.outputs == reference;
    emit(out, o.json,
         nlohmann::ordered_json{{"bench", "workload_pressure"},
                                {"scenario", "pressure"},
                                {"cache", server.cache},
                                {"device_blocks", pressure_blocks},
                                {"concurrency", 8},
                                {"requests", work.requests.size()},
                                {"completed", completed},
                                {"errors", work.requests.size() - completed},
                                {"identical_to_cache_off", identical},
                                {"healthy_after", server.serve->health() == 200},
                                {"wall_s", run.wall_s}});
    if (completed != work.requests.size() || !identical) {
      throw std::runtime_error("memory pressure: " + std::to_string(completed) + " of " +
                               std::to_string(work.requests.size()) + " requests completed" +
                               (identical ? "" : ", outputs differ with the cache on and off"));
    }
  }
}

// Layer-wise against whole-request loads: two host-cache servers, connector.transfer_granularity
// request and layer, taking turns on the same requests. Each request is a long document whose KV
// the host cache holds but the device no longer does, then a short question: its TTFT is the
// load of the document's KV plus the compute of the question over it, one after the other
// (request) or overlapped layer by layer (layer). The model is shaped so that the two take
// comparable time: its KV is large for its compute (kLayerwiseModel; 32 KiB of KV per token and
// rank), a question of a few tokens attends over the whole document, and every layer's loaded
// KV is read by that layer's attention. layerwise_speedup = TTFT p50 request ÷ TTFT p50 layer.
const char* const kLayerwiseModel[] = {"model.layers=8",   "model.q_heads=8",
                                       "model.kv_heads=8", "model.head_dim=64",
                                       "model.hidden=256", "model.mlp_dim=512"};

bool run_layerwise(const WorkloadBenchOptions& o, const std::string& exe, Progress& progress,
                   std::ostream& out) {
  constexpr size_t kDocuments = 6;  // the device holds two prompts: each one returns from host
  constexpr size_t kRounds = 5;
  const size_t chunk_tokens = kBlock * kBlocksPerChunk;
  const size_t document =
      std::max<size_t>(1, o.sizes.document_tokens / chunk_tokens) * chunk_tokens;
  std::mt19937_64 rng(o.seed);
  std::vector<std::string> documents;
  for (size_t d = 0; d < kDocuments; ++d) documents.push_back(filler_text(rng, document));
  // One token: what is computed after the load is that token attending over the document.
  auto question = [](size_t round) { return std::string(1, "?!.,;:"[round % 6]); };
  const size_t longest = document + question(kRounds).size();
  const size_t prompt_blocks = (longest + o.sizes.answer_tokens + kBlock - 1) / kBlock;
  std::vector<std::string> base =
      base_sets(o.world_size, 2 * prompt_blocks + 16, std::max<size_t>(4096, longest + 512));
  base.insert(base.end(), std::begin(kLayerwiseModel), std::end(kLayerwiseModel));
  base.push_back("connector.enabled=true");
  const uint64_t chunk_bytes = chunk_bytes_of(base);
  // Every document's chunks fit the host cache.
  base.push_back("cache.host_bytes=" + std::to_string((kDocuments + 2) * (document / chunk_tokens) *
                                                      chunk_bytes / o.world_size));

  const std::array<std::string, 2> modes = {"request", "layer"};
  std::vector<ModeServer> servers;
  for (const std::string& mode : modes) {
    progress.show("workload: layerwise: starting " + mode);
    std::vector<std::string> sets = base;
    sets.push_back("connector.transfer_granularity=" + mode);
    sets.insert(sets.end(), o.extra_sets.begin(), o.extra_sets.end());
    servers.push_back(
        ModeServer{.cache = mode, .serve = std::make_unique<ServeInstance>(exe, sets)});
  }
  // Every document's KV goes to both host caches.
  for (size_t d = 0; d < kDocuments; ++d) {
    for (ModeServer& m : servers)
      m.serve->complete(documents[d] + question(0), o.sizes.answer_tokens);
  }
  std::array<std::vector<double>, 2> ttft;
  std::array<std::vector<std::string>, 2> outputs;
  std::array<Counters, 2> before = {servers[0].settled_counters(), servers[1].settled_counters()};
  for (size_t round = 1; round <= kRounds; ++round) {
    for (size_t d = 0; d < kDocuments; ++d) {
      progress.show("workload: layerwise: round " + std::to_string(round) + ", document " +
                    std::to_string(d));
      for (size_t k = 0; k < 2; ++k) {
        const size_t m = (k + d + round) % 2;  // the order alternates
        const auto [ms, text] =
            servers[m].serve->complete(documents[d] + question(round), o.sizes.answer_tokens);
        ttft[m].push_back(ms);
        outputs[m].push_back(text);
      }
    }
  }
  const Counters moved[2] = {servers[0].settled_counters() - before[0],
                             servers[1].settled_counters() - before[1]};
  const double whole = percentile(ttft[0], 0.5), layer = percentile(ttft[1], 0.5);
  const bool identical = outputs[0] == outputs[1];
  std::string model;
  for (const char* set : kLayerwiseModel) model += std::string(model.empty() ? "" : " ") + set;
  emit(out, o.json,
       nlohmann::ordered_json{
           {"bench", "layerwise"},
           {"scenario", "layerwise"},
           {"model", model},
           {"kv_bytes_per_token", static_cast<double>(chunk_bytes) / chunk_tokens},
           {"prefix_tokens", document},
           {"requests", ttft[1].size()},
           {"ttft_request_p50_ms", whole},
           {"ttft_layer_p50_ms", layer},
           {"ttft_request_p99_ms", percentile(ttft[0], 0.99)},
           {"ttft_layer_p99_ms", percentile(ttft[1], 0.99)},
           {"layerwise_speedup", layer > 0 ? whole / layer : 0.0},
           {"loaded_tokens_request", moved[0].loaded_tokens},
           {"loaded_tokens_layer", moved[1].loaded_tokens},
           {"outputs_identical", identical}});
  // Each measured request's prefix must have come from the host cache, in both modes.
  const double wanted = static_cast<double>(kRounds * kDocuments * document);
  return identical && moved[0].loaded_tokens >= wanted && moved[1].loaded_tokens >= wanted;
}

// H1/H2: from a worker's SIGKILL to the first 503.
void run_kill(const std::string& exe, std::ostream& out, bool json) {
  std::vector<std::string> s = base_sets(2, 512, 4096);
  s.push_back("connector.enabled=true");
  ServeInstance server(exe, s);
  std::vector<pid_t> workers;
  for (pid_t core : child_processes(server.pid())) {
    for (pid_t w : child_processes(core)) workers.push_back(w);
  }
  if (workers.empty()) throw std::runtime_error("no worker process found");
  const auto t0 = BenchClock::now();
  send_signal(workers.back(), SIGKILL);
  while (server.health() != 503) {
    if (ms_since(t0) > 10000) throw std::runtime_error("/health never answered 503");
  }
  emit(out, json,
       nlohmann::ordered_json{{"bench", "workload_kill"},
                              {"scenario", "kill"},
                              {"kill_to_503_ms", ms_since(t0)},
                              {"target_ms", 100}});
}

}  // namespace

const std::vector<std::string>& workload_cache_modes() {
  static const std::vector<std::string> modes = {"off", "host", "host-request", "disk", "kvtierd"};
  return modes;
}

int run_workload_bench(const WorkloadBenchOptions& o, std::ostream& out) {
  const std::string exe = o.executable.empty() ? self_executable() : o.executable;
  std::vector<std::string> scenarios = o.scenarios;
  if (scenarios.empty()) {
    scenarios = scenario_names();
    scenarios.push_back("pressure");
    scenarios.push_back("kill");
    scenarios.push_back("layerwise");
  }
  const std::vector<std::string> caches = o.caches.empty() ? workload_cache_modes() : o.caches;
  for (const std::string& cache : caches) {
    if (!contains(workload_cache_modes(), cache)) {
      std::cerr << "bench workload: unknown cache mode '" << cache << "'\n";
      return 2;
    }
  }
  size_t cells = 0;
  for (const std::string& name : scenarios) {
    if (contains(scenario_names(), name)) {
      cells += o.concurrency.size();
    } else if (name != "pressure" && name != "kill" && name != "layerwise") {
      std::cerr << "bench workload: unknown scenario '" << name << "'\n";
      return 2;
    }
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("kvtier-bench-workload-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  struct RemoveDir {
    std::filesystem::path dir;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } remove_dir{dir};
  bool ok = true;
  size_t cell = 0;
  try {
    Progress progress;
    for (const std::string& name : scenarios) {
      if (name == "pressure") {
        progress.show("workload: memory pressure");
        run_pressure(o, exe, out);
      } else if (name == "kill") {
        progress.show("workload: worker SIGKILL to 503");
        run_kill(exe, out, o.json);
      } else if (name == "layerwise") {
        if (!run_layerwise(o, exe, progress, out)) {
          std::cerr << "bench workload: layerwise: outputs differ between the granularities, or "
                       "a prefix did not come from the host cache\n";
          ok = false;
        }
      } else if (!run_scenario(o, exe, name, caches, dir, cell, cells, progress, out)) {
        ok = false;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "bench workload: " << e.what() << "\n";
    return 1;
  }
  if (!ok) {
    std::cerr << "bench workload: a request failed or an output differed from cache off's (see "
                 "the rows' errors and outputs_identical)\n";
    return 1;
  }
  return 0;
}

}  // namespace kvtier::bench
