// `kvtier worker <core>/<rank>`: one tensor-parallel rank of an engine core. It owns the rank's
// device (the host device, behind the fault injector when the `faults` section asks for it), its
// KV caches, its share of the host pool, the connector's worker side and the model, and runs
// the steps its engine core sends (docs/engine.md).
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/core/config.h"

namespace kvtier {

// Returns the process exit code: 0 after a shutdown message, 1 after a fatal error (reported
// to the engine core first).
int run_worker(const Config& config, uint32_t core, uint32_t rank, const std::string& run_dir);

}  // namespace kvtier
