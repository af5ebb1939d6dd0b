// HealthCheckedTier: wraps a tier with an UP/DOWN state (health_state.h), so that a tier that
// fails costs one failed call, not one per request (H7: serving continues by recompute, the
// tier is named as degraded, and it recovers on its own).
//
// - UP: calls go to the tier. A call that fails whole (unreachable, timed out) or returns
//   kError for any key marks the tier DOWN; the call's result is returned unchanged.
// - DOWN: calls fail at once with kUnavailable without touching the tier (counted as
//   skipped_calls). The first call at or after the next probe time, or probe_if_due(), pings
//   the tier: success turns it UP (and that call proceeds), failure doubles the backoff, from
//   probe_initial up to probe_max. kMiss, kCorrupt and kSkipped are answers, not failures.
// - DEGRADED: UP, while the tier names parts of itself that are down (Tier::down_parts(): a
//   Redis Cluster's masters). Calls go through; the tier skips those parts' keys (kSkipped) and
//   probes them itself; probe_if_due() lets it (Tier::probe_down_parts()).
//
// Thread-safety: every call may come from any thread; one probe runs at a time.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/tier/health_state.h"
#include "kvtier/tier/tier.h"

namespace kvtier {

// One tier as metrics and the health endpoint show it.
struct TierMetrics {
  std::string name;
  TierState state = TierState::kUp;
  std::string last_error;            // of the failure that made it DOWN; empty unless DOWN
  std::vector<DownPart> down_parts;  // while DEGRADED (empty while DOWN: the whole is down)
  TierCounters counters;
};

// The names under which the health endpoint reports a tier that is not UP (H7): the tier's
// name while DOWN, tier_part_name(name, part) for each down part while DEGRADED, none while UP.
std::vector<std::string> degraded_names(const TierMetrics& metrics);
// "<tier>/<part>", e.g. "redis/10.0.0.7:6379".
std::string tier_part_name(std::string_view tier, std::string_view part);

class HealthCheckedTier final : public Tier {
 public:
  // Throws std::invalid_argument for a null tier, or options HealthState rejects.
  HealthCheckedTier(std::unique_ptr<Tier> inner, HealthOptions options);

  std::string name() const override { return inner_->name(); }
  Status can_hold(uint64_t bytes) const override { return inner_->can_hold(bytes); }
  // The inner tier publishes (a call through the wrapper reaches it).
  void publish_events(KvEventPublisher* publisher, uint32_t block_size) override {
    inner_->publish_events(publisher, block_size);
  }
  TierState state() const;
  // Pings the tier when it is DOWN and its probe is due, or lets it probe its down parts
  // (Tier::probe_down_parts()) while it is UP; returns the state afterwards.
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
  void observe(const Result<std::vector<ChunkStatus>>& result);

  const std::unique_ptr<Tier> inner_;
  HealthState health_;
  std::atomic<uint64_t> skipped_calls_{0};
};

}  // namespace kvtier
