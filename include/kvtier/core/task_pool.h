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
// Thread-safety: run() may be called from several threads at once; batches share the threads.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kvtier/core/clock.h"

namespace kvtier {

class TaskPool {
 public:
  // threads: helpers beside the callers (> 0).
  explicit TaskPool(size_t threads);
  ~TaskPool();  // finishes the batches queued, then joins

  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // ran[i] is true when task(i) ran to its end. All true unless the deadline passed.
  std::vector<bool> run(size_t n, const std::function<void(size_t)>& task, TimePoint deadline);

 private:
  struct Batch;
  void worker();

  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<Batch>> queue_;  // batches with tasks left to claim
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier
