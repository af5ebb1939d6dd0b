// The connector's per-step values (connector/step_metadata.h) as message fields, for the step
// and done messages between an engine core and its workers (docs/engine.md).
#pragma once

#include <nlohmann/json.hpp>

#include "kvtier/connector/step_metadata.h"
#include "kvtier/device/fault_injecting_device.h"

namespace kvtier {

nlohmann::json to_json(const StepMetadata& metadata);
nlohmann::json to_json(const WorkerOutput& output);
// Malformed fields throw nlohmann::json::exception; the caller treats that as a bad message.
StepMetadata step_metadata_from_json(const nlohmann::json& j);
WorkerOutput worker_output_from_json(const nlohmann::json& j);
// A worker's injected-fault totals, for the done message's "faults" field (a fault-injection run).
nlohmann::json to_json(const InjectedFaultCounts& counts);
InjectedFaultCounts injected_fault_counts_from_json(const nlohmann::json& j);

}  // namespace kvtier
