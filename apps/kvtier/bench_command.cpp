#include <iostream>

#include "commands.h"
#include "tier_bench.h"
#include "transfer_bench.h"

namespace kvtier::cli {

Action add_bench_command(CLI::App& app) {
  CLI::App* bench =
      app.add_subcommand("bench", "Run a benchmark; ratios are measured side by side");
  bench->require_subcommand(1);

  CLI::App* transfer = bench->add_subcommand(
      "transfer", "Transfer engine on the host device vs memcpy of the same descriptor list");
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
  transfer->add_option("--repeat", options->repeat, "Measurements per side; best kept (default 5)")
      ->check(CLI::Range(1, 100));

  CLI::App* tiers = bench->add_subcommand(
      "tiers", "Disk and Redis tiers vs plain files and pipelined SET/GET of the same bytes");
  auto tier_options = std::make_shared<bench::TierBenchOptions>();
  tiers->add_flag("--json", tier_options->json, "Print JSON Lines instead of a table");
  tiers
      ->add_option(
          "--total-mib",
          [tier_options](const CLI::results_t& r) {
            tier_options->total_bytes = std::stoul(r[0]) << 20;
            return true;
          },
          "MiB moved per measurement (default 32)")
      ->check(CLI::Range(1, 4096));
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

  return [transfer, options, tiers, tier_options](const Config& config) -> int {
    if (transfer->parsed()) {
      options->max_batch_descriptors = config.transfer.max_batch_descriptors;
      return bench::run_transfer_bench(*options, std::cout);
    }
    if (tiers->parsed()) return bench::run_tier_bench(*tier_options, std::cout);
    return -1;
  };
}

}  // namespace kvtier::cli
