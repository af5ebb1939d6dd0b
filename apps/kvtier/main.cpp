// kvtier: the command-line entry point (serve | server | bench | doctor as they land).
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvtier: a KV-cache offload engine for LLM inference"};
  app.set_version_flag("--version", "kvtier 0.1.0");
  app.require_subcommand(1);
  auto bench = kvtier::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return bench();
  } catch (const std::exception& e) {
    std::cerr << "kvtier: " << e.what() << "\n";
    return 1;
  }
}
