// The three outcomes of a transfer, as docs/architecture.md defines them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/transfer/copy_descriptors.h"

namespace kvtier {

using JobId = uint64_t;

enum class Outcome {
  // Every copy finished: the end marker was observed.
  kCompleted,
  // A device fault happened and no copy can still be running: it failed before anything was
  // enqueued, or its end marker, recorded on the failing stream, completed. Leases may go.
  kFailed,
  // It cannot be shown that the copies stopped (end marker not recorded, the device keeps
  // erroring on query, or the deadline passed). Leases stay held forever; fail-stop (F7).
  kUnprovable,
};

std::string_view to_string(Outcome o);

struct TransferResult {
  JobId job = 0;
  Direction direction = Direction::kStore;
  Outcome outcome = Outcome::kCompleted;
  uint64_t bytes = 0;      // bytes the job was to move
  size_t descriptors = 0;  // descriptors it was to submit
  std::string error;       // empty when Completed
};

}  // namespace kvtier
