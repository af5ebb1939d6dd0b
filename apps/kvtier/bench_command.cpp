#include <iostream>

#include "chaos_bench.h"
#include "commands.h"
#include "kvtier/core/log.h"
#include "routing_bench.h"
#include "scheduler_bench.h"
#include "server_bench.h"
#include "tier_bench.h"
#include "transfer_bench.h"
#include "workload_bench.h"

namespace kvtier::cli {

Action add_bench_command(CLI::App& app) {
  CLI::App* bench =
      app.add_subcommand("bench", "Run a benchmark; ratios are measured side by side");
  bench->require_subcommand(1);

  CLI::App* transfer = bench->add_subcommand(
      "transfer",
      "Transfer engine vs the copy limit: on the host device memcpy of the same descriptors, "
      "on a GPU (--device cuda) one contiguous cudaMemcpyAsync of the same bytes");
  auto options = std::make_shared<bench::TransferBenchOptions>();
  transfer->add_flag("--json", options->json, "Print JSON Lines instead of a table");
  transfer
      ->add_option(
          "--total-mib",
          [options](const CLI::results_t& r) {
            options->total_bytes = std::stoul(r[0]) << 20;
            return true;
          },
          "MiB moved per measurement (default 64)")
      ->check(CLI::Range(1, 4096));
  transfer->add_option("--device", options->device, "Device: host (default) or cuda")
      ->check(CLI::IsMember({"host", "cuda"}));
  transfer->add_option("--cuda-device", options->cuda_ordinal, "GPU ordinal for --device cuda")
      ->check(CLI::NonNegativeNumber);
  transfer->add_option("--repeat", options->repeat, "Measurements per side; best kept (default 5)")
      ->check(CLI::Range(1, 100));
  CLI::App* scheduler = bench->add_subcommand(
      "scheduler",
      "Scheduler-side connector cost per step: 256 running requests, 32k-token prompts");
  auto sched = std::make_shared<bench::SchedulerBenchOptions>();
  scheduler->add_flag("--json", sched->json, "Print JSON Lines instead of text");
  scheduler->add_option("--requests", sched->requests, "Requests running at once (default 256)")
      ->check(CLI::Range(1, 65536));
  scheduler->add_option("--steps", sched->steps, "Measured steps (default 1000)")
      ->check(CLI::Range(1, 1000000));
  scheduler
      ->add_option("--world-size", sched->world_size, "Ranks acknowledging each job (default 2)")
      ->check(CLI::Range(1, 64));

  CLI::App* tiers = bench->add_subcommand(
      "tiers",
      "Disk tier vs O_DIRECT IO of the same bytes in one file, Redis tier vs pipelined SET/GET");
  auto tier_options = std::make_shared<bench::TierBenchOptions>();
  tiers->add_flag("--json", tier_options->json, "Print JSON Lines instead of a table");
  tiers
      ->add_option(
          "--total-mib",
          [tier_options](const CLI::results_t& r) {
            tier_options->total_bytes = std::stoul(r[0]) << 20;
            tier_options->total_given = true;
            return true;
          },
          "MiB moved per measurement (default 32; the disk tier 512)")
      ->check(CLI::Range(1, 4096));
  tiers
      ->add_option(
          "--disk-total-mib",
          [tier_options](const CLI::results_t& r) {
            tier_options->disk_total_bytes = std::stoul(r[0]) << 20;
            return true;
          },
          "MiB moved per disk tier measurement (default: --total-mib if given, else 512)")
      ->check(CLI::Range(1, 65536));
  tiers
      ->add_option("--repeat", tier_options->repeat, "Measurements per side; best kept (default 3)")
      ->check(CLI::Range(1, 100));
  tiers->add_option("--redis-url", tier_options->redis_url,
                    "redis://host:port to measure; default: a redis-server started for the run");
  tiers
      ->add_option("--disk-dir", tier_options->disk_dir,
                   "Folder for the disk measurements (default: the temporary directory)")
      ->check(CLI::ExistingDirectory);
  tiers->add_flag("--no-redis", tier_options->skip_redis, "Measure the disk tier only");

  CLI::App* workload = bench->add_subcommand(
      "workload",
      "The field's workloads (multi-round-qa, long-doc-qa, no-reuse, system-prompt) against kvtier "
      "serve at several concurrencies, cache modes off/host/disk/kvtierd side by side (TTFT, "
      "inter-token latency, throughput, hit rate, ratios against off); memory pressure; the time "
      "from a worker's SIGKILL to the first 503; layer-wise against whole-request loads");
  auto work = std::make_shared<bench::WorkloadBenchOptions>();
  workload->add_flag("--json", work->json, "Print JSON Lines instead of key=value rows");
  std::vector<std::string> scenario_choices = bench::scenario_names();
  scenario_choices.push_back("pressure");
  scenario_choices.push_back("kill");
  scenario_choices.push_back("layerwise");
  workload
      ->add_option("--scenario", work->scenarios,
                   "Scenarios to run, repeatable (default: all): multi-round-qa, long-doc-qa, "
                   "no-reuse, system-prompt, pressure, kill, layerwise")
      ->check(CLI::IsMember(scenario_choices));
  workload
      ->add_option("--concurrency", work->concurrency,
                   "Requests in flight, repeatable (default: 1 8 32)")
      ->check(CLI::Range(1, 256));
  workload
      ->add_option("--cache", work->caches,
                   "Cache modes, repeatable (default: off host host-request disk kvtierd)")
      ->check(CLI::IsMember(bench::workload_cache_modes()));
  workload
      ->add_option("--document-tokens", work->sizes.document_tokens,
                   "Tokens of each document (multi-round-qa, layerwise; default 2048)")
      ->check(CLI::Range(64, 65536));
  workload
      ->add_option("--long-doc-tokens", work->sizes.long_doc_tokens,
                   "Tokens of each document of long-doc-qa (default 4096)")
      ->check(CLI::Range(64, 65536));
  workload
      ->add_option("--system-prompt-tokens", work->sizes.system_prompt_tokens,
                   "Tokens of the shared system prompt (system-prompt; default 2048)")
      ->check(CLI::Range(64, 65536));
  workload
      ->add_option("--unique-tokens", work->sizes.unique_tokens,
                   "Tokens of each prompt of no-reuse (default 1024)")
      ->check(CLI::Range(64, 65536));
  workload
      ->add_option("--rounds", work->sizes.rounds, "Rounds per user (multi-round-qa; default 3)")
      ->check(CLI::Range(2, 100));
  workload
      ->add_option("--answer-tokens", work->sizes.answer_tokens,
                   "Tokens generated per request (default 16)")
      ->check(CLI::Range(2, 4096));
  workload
      ->add_option("--pressure-requests", work->pressure_requests,
                   "Requests of the memory-pressure case (default 40)")
      ->check(CLI::Range(1, 10000));
  workload->add_option("--world-size", work->world_size, "Workers per engine core (default 1)")
      ->check(CLI::Range(1, 8));
  workload->add_option("--seed", work->seed, "Seed of the prompts (default 7)");
  workload
      ->add_option("--repeat", work->repeat,
                   "Rounds of every cell of the four workloads, the modes taking turns in each, "
                   "each round on its own prompts; a row gives the medians of its rounds "
                   "(default 1)")
      ->check(CLI::Range(1, 20));
  workload->add_option("--set", work->extra_sets,
                       "KEY=VALUE config override for every server of the scenarios, after the "
                       "bench's own (repeatable; e.g. connector.store_threshold=2)");
  CLI::App* routing = bench->add_subcommand(
      "routing",
      "Routing by cache against routing by load on multi-round conversations, side by side: "
      "over 4 engine cores (target cores) or over 2 `kvtier serve` instances behind `kvtier "
      "router` (target router); hit rates, TTFT p50/p99, hit_rate_ratio against one core with "
      "all the memory, ttft_p50_speedup, outputs_identical (docs/benchmarks.md)");
  auto route = std::make_shared<bench::RoutingBenchOptions>();
  routing->add_flag("--json", route->json, "Print JSON Lines instead of key=value rows");
  routing->add_option("--target", route->targets, "cores or router, repeatable (default: both)")
      ->check(CLI::IsMember({"cores", "router"}));
  routing->add_option("--users", route->users, "Conversations (default 16)")
      ->check(CLI::Range(4, 1024));
  routing->add_option("--concurrency", route->concurrency, "Requests in flight (default 8)")
      ->check(CLI::Range(1, 256));
  routing->add_option("--rounds", route->sizes.rounds, "Rounds per conversation (default 4)")
      ->check(CLI::Range(2, 100));
  routing
      ->add_option("--document-tokens", route->sizes.document_tokens,
                   "Tokens of each conversation's document (default 1024)")
      ->check(CLI::Range(64, 65536));
  routing->add_option("--seed", route->seed, "Seed of the prompts (default 7)");
  routing->add_option("--set", route->extra_sets,
                      "KEY=VALUE config override for every server, after the bench's own");
  CLI::App* server = bench->add_subcommand(
      "server", "kvtierd (ZeroMQ + shared memory) vs a local redis-server holding the same chunks");
  auto server_options = std::make_shared<bench::ServerBenchOptions>();
  server->add_flag("--json", server_options->json, "Print JSON Lines instead of a table");
  server
      ->add_option(
          "--total-mib",
          [server_options](const CLI::results_t& r) {
            server_options->total_bytes = std::stoul(r[0]) << 20;
            return true;
          },
          "MiB moved per measurement (default 64)")
      ->check(CLI::Range(8, 4096));
  server
      ->add_option("--repeat", server_options->repeat,
                   "Measurements per side; best kept (default 3)")
      ->check(CLI::Range(1, 100));
  server
      ->add_option("--lookups", server_options->lookups,
                   "Keys looked up per lookup measurement (default 200000)")
      ->check(CLI::Range(1000, 100000000));
  server
      ->add_option("--copy-threads", server_options->copy_threads,
                   "kvtierd's server.copy_threads, and the memcpy limit's threads (default 0: "
                   "kvtierd's default, half the CPU cores, from 1 to 4)")
      ->check(CLI::Range(0, 64));
  server->add_option("--redis-server", server_options->redis_server,
                     "redis-server binary (default: redis-server on PATH)");
  server->add_option("--redis-benchmark", server_options->redis_benchmark,
                     "redis-benchmark binary, run against the same server for the rows' "
                     "redis_benchmark_* fields (default: redis-benchmark on PATH; skipped when it "
                     "does not run)");
  CLI::App* chaos = bench->add_subcommand(
      "chaos",
      "kvtier serve (2 engine cores, world size 2), locally and against kvtierd with the disk and "
      "Redis tiers, under a seeded random schedule of faults; every completed response must "
      "equal a fault-free reference run's, /health must be honest, no request may hang, no "
      "audit may fail (docs/engine.md)");
  auto chaos_options = std::make_shared<bench::ChaosBenchOptions>();
  chaos->add_flag("--json", chaos_options->json, "Print JSON Lines instead of key=value rows");
  auto* chaos_seconds =
      chaos->add_option("--seconds", chaos_options->seconds, "Chaos time in seconds (default 60)")
          ->check(finite_in(1.0, 86400.0));
  chaos
      ->add_option_function<double>(
          "--minutes", [chaos_options](double m) { chaos_options->seconds = m * 60; },
          "Chaos time in minutes")
      ->check(finite_in(0.05, 1440.0))
      ->excludes(chaos_seconds);
  chaos->add_option("--seed", chaos_options->seed, "Seed of the requests and the fault schedule");
  chaos->add_flag("!--no-server", chaos_options->server_mode,
                  "Only the default mode: no kvtierd, disk, Redis");
  return [transfer, options, scheduler, sched, tiers, tier_options, workload, work, routing, route,
          server, server_options, chaos, chaos_options](const Config& config) -> int {
    // The kvtierd and kvtier serve processes a benchmark runs log as role "bench" (stderr; the
    // results go to stdout).
    for (const CLI::App* cmd : {transfer, scheduler, tiers, workload, routing, server, chaos}) {
      if (cmd->parsed()) init_logging(config.log, "bench");
    }
    if (chaos->parsed()) return bench::run_chaos_bench(*chaos_options, std::cout);
    if (server->parsed()) return bench::run_server_bench(*server_options, std::cout);
    if (scheduler->parsed()) return bench::run_scheduler_bench(*sched, std::cout);
    if (workload->parsed()) return bench::run_workload_bench(*work, std::cout);
    if (routing->parsed()) return bench::run_routing_bench(*route, std::cout);
    if (tiers->parsed()) return bench::run_tier_bench(*tier_options, std::cout);
    if (!transfer->parsed()) return -1;
    options->max_batch_descriptors = config.transfer.max_batch_descriptors;
    if (options->device == "cuda")
      return bench::run_cuda_transfer_bench(*options, std::cout, std::cerr);
    return bench::run_transfer_bench(*options, std::cout);
  };
}

}  // namespace kvtier::cli
