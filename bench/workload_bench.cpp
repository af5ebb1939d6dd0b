#include "workload_bench.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bench_row.h"
#include "filler_text.h"
#include "kvtier/core/child_process.h"
#include "kvtier/engine/engine_shape.h"
#include "serve_instance.h"

namespace kvtier::bench {
namespace {

using BenchClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double ms_since(BenchClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(BenchClock::now() - t0).count();
}

using Server = ServeInstance;

// Sends every prompt, `concurrency` at a time; returns each output, or nullopt where the request
// failed (its error is counted in `errors`).
std::vector<std::optional<std::string>> run_concurrently(Server& server,
                                                         const std::vector<std::string>& prompts,
                                                         size_t max_tokens, size_t concurrency) {
  std::vector<std::optional<std::string>> outputs(prompts.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> clients;
  for (size_t c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      for (size_t i = next++; i < prompts.size(); i = next++) {
        try {
          outputs[i] = server.complete(prompts[i], max_tokens).second;
        } catch (const std::exception&) {
          outputs[i].reset();
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  return outputs;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int run_workload_bench(const WorkloadBenchOptions& o, std::ostream& out) {
  const std::string exe = o.executable.empty() ? self_executable() : o.executable;
  const size_t block = 16;
  const size_t longest = o.history_tokens + o.turns * (o.message_tokens + o.answer_tokens) + 64;
  // The device holds about one and a half conversations: returning users miss it.
  const size_t device_blocks = (longest * 3 / 2) / block + 64;
  const size_t max_context = std::max<size_t>(16384, longest + 256);
  auto sets = [&](bool offload) {
    return std::vector<std::string>{
        "engine.port=0",
        "engine.world_size=" + std::to_string(o.world_size),
        "engine.device_blocks=" + std::to_string(device_blocks),
        "engine.max_batched_tokens=2048",
        "model.max_context=" + std::to_string(max_context),
        "layout.block_size=" + std::to_string(block),
        "layout.blocks_per_chunk=4",
        "cache.host_bytes=1GiB",
        std::string("connector.enabled=") + (offload ? "true" : "false")};
  };
  // The disk tier below a host pool that, like the device, holds about one and a half
  // conversations: a returning user's prefix is in neither, only on disk.
  const std::filesystem::path disk_dir =
      std::filesystem::temp_directory_path() / ("kvtier-bench-disk-" + std::to_string(getpid()));
  uint64_t tiered_host_bytes = 0;
  auto disk_sets = [&] {
    Config c;
    c.engine.world_size = o.world_size;
    c.model.max_context = static_cast<uint32_t>(max_context);
    c.layout.block_size = static_cast<uint32_t>(block);
    c.layout.blocks_per_chunk = 4;
    const EngineShape shape = engine_shape(c);
    const uint64_t chunk_tokens = block * 4;
    const uint64_t chunk_bytes = uint64_t{shape.layout.max_chunk_bytes()} * shape.world_size;
    tiered_host_bytes = (longest * 3 / 2 + chunk_tokens - 1) / chunk_tokens * chunk_bytes;
    std::vector<std::string> s = sets(true);
    s.push_back("cache.host_bytes=" + std::to_string(tiered_host_bytes));
    s.push_back("tiers.disk_path=" + disk_dir.string());
    return s;
  };
  struct RemoveDir {
    std::filesystem::path dir;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } remove_disk_dir{disk_dir};
  try {
    Server off(exe, sets(false));
    Server on(exe, sets(true));
    Server disk(exe, disk_sets());
    std::mt19937_64 rng(7);
    std::vector<std::string> history(o.users);
    for (std::string& h : history) h = filler_text(rng, o.history_tokens);
    std::vector<double> ttft_on, ttft_off, ttft_disk;
    for (uint32_t turn = 0; turn < o.turns; ++turn) {
      for (uint32_t u = 0; u < o.users; ++u) {
        const std::string prompt = history[u] + "\nuser: " + filler_text(rng, o.message_tokens);
        const auto [t_off, text_off] = off.complete(prompt, o.answer_tokens);
        const auto [t_on, text_on] = on.complete(prompt, o.answer_tokens);
        const auto [t_disk, text_disk] = disk.complete(prompt, o.answer_tokens);
        if (text_on != text_off || text_disk != text_off)
          throw std::runtime_error(
              "outputs differ with the cache on, on with the disk tier, and off");
        // The first turn computes every document on every server: not a returning user.
        if (turn > 0) {
          ttft_off.push_back(t_off);
          ttft_on.push_back(t_on);
          ttft_disk.push_back(t_disk);
        }
        history[u] = prompt + "\nassistant: " + text_on;
      }
    }
    // cache "on": the host cache holds every conversation; "disk": a host cache for about one
    // and a half conversations, and the disk tier below it.
    const double p50_off = percentile(ttft_off, 0.5);
    for (const char* cache : {"off", "on", "disk"}) {
      const std::vector<double>& ttft = cache == std::string("off")  ? ttft_off
                                        : cache == std::string("on") ? ttft_on
                                                                     : ttft_disk;
      const double p50 = percentile(ttft, 0.5);
      nlohmann::ordered_json row{{"bench", "workload"},
                                 {"cache", cache},
                                 {"users", o.users},
                                 {"turns", o.turns},
                                 {"history_tokens", o.history_tokens},
                                 {"ttft_p50_ms", p50},
                                 {"ttft_p99_ms", percentile(ttft, 0.99)}};
      if (cache == std::string("disk")) {
        row["host_bytes"] = tiered_host_bytes;
        const std::string metrics = disk.get("/metrics").body;
        row["disk_chunks_read"] = metric_sum(metrics, "kvtier_core_kvtier_tier_disk_hits_total");
        row["disk_chunks_written"] =
            metric_sum(metrics, "kvtier_core_kvtier_tier_disk_chunks_written_total");
      }
      if (cache != std::string("off")) {
        row["ratio"] = p50 > 0 ? p50_off / p50 : 0;
        row["outputs_identical"] = true;  // checked request by request above
      }
      emit(out, o.json, row);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench workload: " << e.what() << "\n";
    return 1;
  }
  // Memory pressure (H8): device memory for about one and a half requests, 8 requests at a
  // time over three shared documents; every request must complete, with the same output with
  // the cache on and off.
  try {
    const size_t pressure_prompt = 2500;
    const size_t pressure_blocks = (pressure_prompt + 64) * 3 / 2 / block;
    std::mt19937_64 rng(11);
    std::vector<std::string> documents;
    for (int d = 0; d < 3; ++d) documents.push_back(filler_text(rng, pressure_prompt));
    std::vector<std::string> prompts;
    for (uint32_t i = 0; i < o.pressure_requests; ++i) {
      prompts.push_back(documents[i % 3] + "\nQ" + std::to_string(i) + ": what follows?");
    }
    std::vector<std::optional<std::string>> reference;
    for (bool cache : {false, true}) {
      auto s = sets(cache);
      s.push_back("engine.device_blocks=" + std::to_string(pressure_blocks));
      s.push_back("engine.request_timeout_s=120");  // a request that hangs counts as an error
      Server server(exe, s);
      const auto t0 = BenchClock::now();
      const auto outputs = run_concurrently(server, prompts, 12, 8);
      const double wall_s = ms_since(t0) / 1000;
      const size_t completed = static_cast<size_t>(
          std::ranges::count_if(outputs, [](const auto& text) { return text.has_value(); }));
      if (!cache) reference = outputs;
      const bool identical = outputs == reference;
      emit(out, o.json,
           nlohmann::ordered_json{{"bench", "workload_pressure"},
                                  {"cache", cache ? "on" : "off"},
                                  {"device_blocks", pressure_blocks},
                                  {"concurrency", 8},
                                  {"requests", prompts.size()},
                                  {"completed", completed},
                                  {"errors", prompts.size() - completed},
                                  {"identical_to_cache_off", identical},
                                  {"healthy_after", server.health() == 200},
                                  {"wall_s", wall_s}});
      if (completed != prompts.size() || !identical) {
        throw std::runtime_error("memory pressure: " + std::to_string(completed) + " of " +
                                 std::to_string(prompts.size()) + " requests completed" +
                                 (identical ? "" : ", outputs differ with the cache on and off"));
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "bench workload: " << e.what() << "\n";
    return 1;
  }
  // H1/H2: from a worker's SIGKILL to the first 503.
  try {
    auto s = sets(true);
    s.push_back("engine.world_size=2");
    Server server(exe, s);
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
    emit(out, o.json,
         nlohmann::ordered_json{
             {"bench", "workload_kill"}, {"kill_to_503_ms", ms_since(t0)}, {"target_ms", 100}});
  } catch (const std::exception& e) {
    std::cerr << "bench workload: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace kvtier::bench
