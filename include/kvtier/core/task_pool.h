// TaskPool: a fixed set of threads that run the tasks of batch calls alongside their callers
// (the disk tier's per-key IO and checksums, the host device's parts of one large copy).
//
// run(n, task, deadline) runs task(0..n-1) and returns once every task ran, or once the deadline
// passed and no task is running any more. The pool's threads and the calling thread claim tasks
// one at a time, so a batch of one key costs no thread hand-off. Tasks not claimed by the
// deadline never start (they would touch the caller's buffers after it returned); a task that
// had started is waited for, since a task (a pread/pwrite, a memcpy) cannot be abandoned while
// it uses the caller's memory. So a call outlives its deadline by at most one task per thread.
//
// Placement (TaskPlacement):
// - kAnywhere: the kernel places the threads, and a batch wakes any idle ones. For tasks that
//   block (IO), where more threads than CPUs is the point.
// - kOtherCpus: for CPU-bound tasks (checksums). Thread i is pinned to the i-th CPU the process
//   may run on, and only threads on CPUs other than a batch's caller's take its tasks (it wakes
//   at most one per CPU). A scheduler that wakes a thread on its waker's CPU (some virtual
//   machines' kernels do, to leave other vCPUs idle) would otherwise have the caller and its helper
//   take turns on one CPU.
// Once the caller has no task left to claim, it spins briefly before it sleeps: waking it from
// another CPU when the last task ends costs tens of microseconds on a virtual machine.
//
// Thread-safety: run() may be called from several threads at once; batches share the threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kvtier/core/clock.h"

namespace kvtier {

enum class TaskPlacement { kAnywhere, kOtherCpus };

class TaskPool {
 public:
  // threads: helpers beside the callers (> 0).
  explicit TaskPool(size_t threads, TaskPlacement placement = TaskPlacement::kAnywhere);
  ~TaskPool();  // finishes the batches queued, then joins

  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // ran[i] is true when task(i) ran to its end. All true unless the deadline passed.
  std::vector<bool> run(size_t n, const std::function<void(size_t)>& task, TimePoint deadline);

  // The CPUs this process may run on (its calling thread's affinity), in order.
  static std::vector<int> usable_cpus();

 private:
  struct Batch;
  struct Thread {
    std::thread thread;
    int cpu = -1;                     // pinned to (kOtherCpus), or -1
    bool idle = false;                // waiting for a signal; under mutex_
    std::atomic<uint32_t> signal{0};  // bumped to wake it
  };
  void worker(Thread& self);
  // Whether thread t takes tasks of the batch (kOtherCpus: not on its caller's CPU).
  bool may_take(const Thread& t, const Batch& batch) const;
  // Marks the threads the batch wakes, under mutex_.
  std::vector<Thread*> pick_locked(const Batch& batch);

  const TaskPlacement placement_;
  std::mutex mutex_;
  std::deque<std::shared_ptr<Batch>> queue_;  // batches with tasks left to claim
  bool stopping_ = false;
  std::vector<std::unique_ptr<Thread>> threads_;
};

}  // namespace kvtier
