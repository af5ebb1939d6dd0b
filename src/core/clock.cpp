#include "kvtier/core/clock.h"

namespace kvtier {

const SteadyClock& SteadyClock::instance() {
  static const SteadyClock clock;
  return clock;
}

}  // namespace kvtier
