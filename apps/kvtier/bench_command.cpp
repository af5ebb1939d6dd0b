#include <iostream>

#include "commands.h"
#include "server_bench.h"
#include "transfer_bench.h"

namespace kvtier::cli {

Action add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Run a benchmark; ratios are measured side by side");
  bench->require_subcommand(1);
  CLI::App* transfer = bench->add_subcommand(
      "transfer", "Transfer engine on the host device vs memcpy of the same descriptor list");
  auto options = std::make_shared<bench::TransferBenchOptions>();
  transfer->add_flag("--json", options->json, "Print JSON Lines instead of a table");
  transfer->add_option("--total-mib", [options](const CLI::results_t& r) {
                       options->total_bytes = std::stoul(r[0]) << 20;
                       return true;
                     }, "MiB moved per measurement (default 64)")
      ->check(CLI::Range(1, 4096));
  transfer->add_option("--repeat", options->repeat, "Measurements per side; best kept (default 5)")
      ->check(CLI::Range(1, 100));
  CLI::App* server = bench->add_subcommand(
      "server", "kvtierd (ZeroMQ + shared memory) vs a local redis-server holding the same chunks");
  auto server_options = std::make_shared<bench::ServerBenchOptions>();
  server->add_flag("--json", server_options->json, "Print JSON Lines instead of a table");
  server->add_option("--total-mib", [server_options](const CLI::results_t& r) {
                       server_options->total_bytes = std::stoul(r[0]) << 20;
                       return true;
                     }, "MiB moved per measurement (default 64)")
      ->check(CLI::Range(8, 4096));
  server->add_option("--repeat", server_options->repeat, "Measurements per side; best kept (default 3)")
      ->check(CLI::Range(1, 100));
  server->add_option("--redis-server", server_options->redis_server,
                     "redis-server binary (default: redis-server on PATH)");
  return [transfer, options, server, server_options](const Config& config) -> int {
    if (server->parsed()) return bench::run_server_bench(*server_options, std::cout);
    if (!transfer->parsed()) return -1;
    options->max_batch_descriptors = config.transfer.max_batch_descriptors;
    return bench::run_transfer_bench(*options, std::cout);
  };
}

}  // namespace kvtier::cli
