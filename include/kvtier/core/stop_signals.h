// StopSignals: SIGINT and SIGTERM taken in one place. Every kvtier process that runs threads
// (kvtierd, and the frontend, engine cores and workers of `kvtier serve`) constructs one in its
// main thread before it starts any thread: the constructor blocks the stop signals there, so
// every thread started later inherits them blocked, no blocking call in any thread is ever
// interrupted by them, and they are never delivered to whichever thread the kernel picks (which
// ThreadSanitizer, deferring signals to its own safe points, may never run). deliver_to() starts
// the one thread that takes them with sigwait() and runs the action there, once per signal.
//
// ChildProcess::spawn clears the blocked set in the child before exec, so a process this one
// starts gets the stop signals as usual.
// Thread-safety: none; the main thread constructs, starts and ends it.
#pragma once

#include <signal.h>

#include <functional>
#include <thread>

namespace kvtier {

class StopSignals {
 public:
  StopSignals();
  // end(), then the signal mask the calling thread had before.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Starts the waiting thread: `on_stop` runs there for each SIGINT or SIGTERM received. Call at
  // most once.
  void deliver_to(std::function<void()> on_stop);
  // Ends the waiting thread; call it before whatever `on_stop` touches goes away.
  void end();

 private:
  static constexpr int kEnd = SIGUSR1;  // sent by end() to the waiting thread only
  sigset_t signals_;
  sigset_t previous_;
  std::thread waiter_;
};

}  // namespace kvtier
