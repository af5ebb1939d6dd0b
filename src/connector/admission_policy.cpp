#include "admission_policy.h"

#include <algorithm>
#include <stdexcept>

namespace kvtier {

AdmissionPolicy::AdmissionPolicy(uint32_t store_threshold, uint32_t window)
    : store_threshold_(store_threshold), window_(window), recent_(window, false) {
  if (store_threshold == 0) throw std::invalid_argument("store_threshold must be >= 1");
  if (window > (1u << 20)) throw std::invalid_argument("admission_window must be <= 2^20");
}

void AdmissionPolicy::observe(std::span<const std::span<const ChunkKey>> prompt_keys) {
  // A prompt reuses a prefix when its first chunk was asked for before: a chunk's key names
  // every token from the start, so any shared prefix of a chunk or more shares this key.
  bool reused = false;
  bool any = false;
  for (std::span<const ChunkKey> keys : prompt_keys) {
    if (keys.empty()) continue;
    any = true;
    reused = reused || sketch_.estimate(keys.front()) > 0;
  }
  for (std::span<const ChunkKey> keys : prompt_keys) {
    for (const ChunkKey& k : keys) sketch_.add(k);
  }
  if (!any || window_ == 0) return;  // shorter than a chunk: says nothing about reuse
  if (observed_ == window_ && recent_[next_]) --reusing_;
  recent_[next_] = reused;
  if (reused) ++reusing_;
  next_ = (next_ + 1) % window_;
  observed_ = std::min<size_t>(observed_ + 1, window_);
}

bool AdmissionPolicy::reuse_seen() const {
  return window_ == 0 || observed_ < window_ || reusing_ > 0;
}

uint32_t AdmissionPolicy::threshold() const {
  return reuse_seen() ? store_threshold_ : std::max<uint32_t>(store_threshold_, 2);
}

void AdmissionPolicy::clear() {
  sketch_.clear();
  recent_.assign(window_, false);
  next_ = observed_ = reusing_ = 0;
}

}  // namespace kvtier
