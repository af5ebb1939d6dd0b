// FaultPlan: which faults FaultInjectingDevice injects, decided per copy_batch call. A plan is
// either explicit rules keyed by call index, or seeded random draws; both are deterministic for
// a given sequence of calls.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/core/config.h"
#include "kvtier/device/device.h"

namespace kvtier {

// Faults attached to one copy_batch call (0-based, counted across all streams).
struct FaultRule {
  uint64_t call = 0;
  // Submit failure: descriptors [0, fail_at) are enqueued, then DeviceFault(index = fail_at).
  std::optional<size_t> fail_at;
  // The submit failure's DeviceFault carries no descriptor index, as from a device that cannot
  // tell how far the call got: the caller must assume all of the call may be enqueued.
  bool unindexed = false;
  // The enqueued copies wait until FaultInjectingDevice::release_hangs() (copies that hang).
  bool hang = false;
  // The enqueued copies start this much later (copies that are delayed).
  Duration delay{0};
  // Error latched on the stream after this call: the next `latched_errors` queries or
  // synchronizes of events recorded on that stream afterwards raise DeviceFault.
  // kForever: the device keeps erroring (=> Unprovable).
  uint32_t latched_errors = 0;
  // The next record() on this call's stream raises DeviceFault (end marker cannot be recorded).
  bool record_fails = false;
  // The first wait_event() on the event recorded next on this call's stream (its end marker)
  // raises DeviceFault: another stream's fence on this call's copies cannot be enqueued.
  bool wait_fails = false;
  // Raise std::logic_error instead of enqueueing anything: not a device fault (F2).
  bool non_device_error = false;
  // The submit failure is sticky: it poisons the device context (CUDA illegal address).
  bool sticky = false;

  static constexpr uint32_t kForever = std::numeric_limits<uint32_t>::max();
};

// Per-call probabilities for random plans. Each kind is drawn independently.
struct RandomFaultRates {
  double submit_failure = 0;
  double latched_error = 0;
  double latched_forever = 0;  // of the latched errors, the share that never clears
  double record_failure = 0;
  double delay = 0;
  Duration max_delay = std::chrono::microseconds(200);
  double hang = 0;
  // Only copies of this kind draw faults (e.g. loads only: kHostToDevice); nullopt: every copy.
  std::optional<CopyKind> only_kind;
};

class FaultPlan {
 public:
  FaultPlan() = default;  // no faults
  static FaultPlan rules(std::vector<FaultRule> rules);
  static FaultPlan random(uint64_t seed, RandomFaultRates rates);

  // The faults for copy call `call` carrying `descriptors` descriptors of `kind`.
  FaultRule draw(uint64_t call, size_t descriptors, CopyKind kind = CopyKind::kDeviceToHost);

 private:
  std::vector<FaultRule> rules_;
  std::optional<RandomFaultRates> rates_;
  std::mt19937_64 rng_;
};

// The plan a rank's FaultInjectingDevice follows for a config's `faults` section: no faults when
// every rate is 0, else seeded random draws (seed * 1000 + rank, so ranks draw differently but
// reproducibly), restricted to the section's direction.
FaultPlan fault_plan_from_config(const FaultsConfig& faults, uint32_t rank);
// Whether `faults` draws any device fault (a rate above 0); without, the plan injects nothing.
bool injects_device_faults(const FaultsConfig& faults);

}  // namespace kvtier
