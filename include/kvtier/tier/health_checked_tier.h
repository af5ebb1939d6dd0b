// HealthCheckedTier: wraps a tier with an UP/DOWN state, so that a tier that fails costs one
// failed call, not one per request (H7: serving continues by recompute, the tier is named as
// degraded, and it recovers on its own).
//
// - UP: calls go to the tier. A call that fails whole (unreachable, timed out) or returns
//   kError for any key marks the tier DOWN; the call's result is returned unchanged.
// - DOWN: calls fail at once with kUnavailable without touching the tier (counted as
//   skipped_calls). The first call at or after the next probe time, or probe_if_due(), pings
//   the tier: success turns it UP (and that call proceeds), failure doubles the backoff, from
//   probe_initial up to probe_max. kMiss and kCorrupt are answers, not failures.
//
// Thread-safety: every call may come from any thread; one probe runs at a time.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "kvtier/core/clock.h"
#include "kvtier/tier/tier.h"

namespace kvtier {

enum class TierState { kUp, kDown };
std::string_view to_string(TierState state);

struct HealthOptions {
  Duration probe_initial = std::chrono::seconds(1);
  Duration probe_max = std::chrono::seconds(30);
  Duration probe_timeout = std::chrono::seconds(1);  // of each ping
  const Clock* clock = &SteadyClock::instance();     // must outlive the tier
};

// One tier as metrics and the health endpoint show it.
struct TierMetrics {
  std::string name;
  TierState state = TierState::kUp;
  std::string last_error;  // of the failure that made it DOWN; empty while UP
  TierCounters counters;
};

class HealthCheckedTier final : public Tier {
 public:
  // Throws std::invalid_argument for a null tier or clock, or probe_initial <= 0 or
  // probe_max < probe_initial.
  HealthCheckedTier(std::unique_ptr<Tier> inner, HealthOptions options);

  std::string name() const override { return inner_->name(); }
  TierState state() const;
  // Pings the tier when it is DOWN and its probe is due; returns the state afterwards.
  TierState probe_if_due();
  TierMetrics metrics() const;
  // The inner tier's counters plus skipped_calls.
  TierCounters counters() const override;
  Tier& inner() { return *inner_; }

 protected:
  Result<std::vector<ChunkStatus>> do_put(std::span<const ChunkKey> keys,
                                          std::span<const std::span<const std::byte>> chunks,
                                          Duration timeout) override;
  Result<std::vector<ChunkStatus>> do_get(std::span<const ChunkKey> keys,
                                          std::span<const std::span<std::byte>> dst,
                                          Duration timeout) override;
  Result<std::vector<bool>> do_contains(std::span<const ChunkKey> keys, Duration timeout) override;
  Status do_ping(Duration timeout) override;

 private:
  // True when the call may go to the tier (UP, or DOWN and a probe just succeeded).
  bool admit();
  std::unexpected<Error> skipped();
  void mark_down(const std::string& error);
  void observe(const Result<std::vector<ChunkStatus>>& result);

  const std::unique_ptr<Tier> inner_;
  const HealthOptions options_;
  mutable std::mutex mutex_;
  TierState state_ = TierState::kUp;
  bool probing_ = false;
  Duration backoff_{0};
  TimePoint next_probe_{};
  std::string last_error_;
  uint64_t skipped_calls_ = 0;
};

}  // namespace kvtier
