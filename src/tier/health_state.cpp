#include "kvtier/tier/health_state.h"

#include <algorithm>
#include <stdexcept>

namespace kvtier {

std::string_view to_string(TierState state) {
  switch (state) {
    case TierState::kUp:
      return "up";
    case TierState::kDegraded:
      return "degraded";
    case TierState::kDown:
      return "down";
  }
  return "unknown";
}

HealthState::HealthState(const HealthOptions& options) : options_(options) {
  if (options_.clock == nullptr) throw std::invalid_argument("HealthState: clock is null");
  if (options_.probe_initial <= Duration::zero() || options_.probe_max < options_.probe_initial) {
    throw std::invalid_argument("HealthState: need 0 < probe_initial <= probe_max");
  }
}

bool HealthState::up() const {
  std::lock_guard lock(mutex_);
  return up_;
}

std::string HealthState::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

void HealthState::mark_down(const std::string& error) {
  std::lock_guard lock(mutex_);
  last_error_ = error;
  if (!up_) return;  // a call that raced the first failure: the probe time stands
  up_ = false;
  backoff_ = options_.probe_initial;
  next_probe_ = options_.clock->now() + backoff_;
}

HealthState::Admit HealthState::begin_admit(bool force) {
  std::lock_guard lock(mutex_);
  if (up_) return Admit::kUp;
  if (probing_ || (!force && options_.clock->now() < next_probe_)) return Admit::kRefused;
  probing_ = true;
  return Admit::kProbe;
}

bool HealthState::end_probe(const Status& result) {
  std::lock_guard lock(mutex_);
  probing_ = false;
  if (result) {
    up_ = true;
    last_error_.clear();
  } else {
    // A call may have marked it DOWN again meanwhile; either way the probe failed.
    up_ = false;
    last_error_ = result.error().to_string();
    backoff_ = std::min(backoff_ * 2, options_.probe_max);
    next_probe_ = options_.clock->now() + backoff_;
  }
  return up_;
}

}  // namespace kvtier
