// `kvtier serve` as the end-to-end tests start it: a free port, fast heartbeats, small blocks,
// and the test's own `--set`s; deterministic prompt text. Needs KVTIER_EXE.
#pragma once

#include <gtest/gtest.h>

#include "engine/serve_process.h"

namespace kvtier::test {

inline std::vector<std::string> serve_args(std::vector<std::string> sets) {
  std::vector<std::string> argv = {KVTIER_EXE, "serve",
                                   "--set",    "engine.port=0",
                                   "--set",    "engine.heartbeat_interval_s=0.05",
                                   "--set",    "layout.block_size=16",
                                   "--set",    "layout.blocks_per_chunk=4"};
  for (const std::string& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  return argv;
}

inline std::optional<ServeProcess> start_ready(std::vector<std::string> sets) {
  auto serve = ServeProcess::start(serve_args(std::move(sets)), 60000ms);
  if (!serve) return serve;
  if (!wait_until([&] { return serve->get("/health").status == 200; }, 60000ms)) {
    ADD_FAILURE() << "never healthy: " << serve->get("/health").body;
  }
  return serve;
}

inline std::string prompt_text(size_t n, int seed) {
  std::string s;
  for (size_t i = 0; i < n; ++i)
    s.push_back(static_cast<char>('a' + (i * 7 + static_cast<size_t>(seed)) % 26));
  return s;
}

// The sum of a metric's samples in a /metrics text.
inline double metric(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  double total = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(name + "{") || line.starts_with(name + " ")) {
      total += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return total;
}

}  // namespace kvtier::test
