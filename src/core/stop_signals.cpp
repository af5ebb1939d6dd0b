#include "kvtier/core/stop_signals.h"

#include <pthread.h>

#include <utility>

namespace kvtier {

StopSignals::StopSignals() {
  sigemptyset(&signals_);
  for (int s : {SIGINT, SIGTERM, kEnd}) sigaddset(&signals_, s);
  pthread_sigmask(SIG_BLOCK, &signals_, &previous_);
}

StopSignals::~StopSignals() {
  end();
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

void StopSignals::deliver_to(std::function<void()> on_stop) {
  waiter_ = std::thread([this, on_stop = std::move(on_stop)] {
    int signal = 0;
    while (sigwait(&signals_, &signal) == 0 && signal != kEnd) on_stop();
  });
}

void StopSignals::end() {
  if (!waiter_.joinable()) return;
  pthread_kill(waiter_.native_handle(), kEnd);
  waiter_.join();
}

}  // namespace kvtier
