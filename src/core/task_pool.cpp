#include "kvtier/core/task_pool.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace kvtier {

struct TaskPool::Batch {
  const std::function<void(size_t)>* task;  // called only for claimed tasks, while run() waits
  size_t n = 0;
  std::mutex mutex;
  std::condition_variable cv;
  size_t claimed = 0;
  size_t running = 0;
  TimePoint deadline;
  bool cancelled = false;  // the deadline passed: nothing more is claimed
  std::vector<bool> ran;

  // The next task to run, or nullopt when none is left or the deadline passed.
  std::optional<size_t> claim() {
    std::lock_guard lock(mutex);
    if (!cancelled && SteadyClock::instance().now() >= deadline) cancelled = true;
    if (cancelled || claimed == n) return std::nullopt;
    ++running;
    return claimed++;
  }
  void execute(size_t i) {
    (*task)(i);
    {
      std::lock_guard lock(mutex);
      ran[i] = true;
      --running;
    }
    cv.notify_all();
  }
  bool exhausted() {
    std::lock_guard lock(mutex);
    return cancelled || claimed == n;
  }
};

TaskPool::TaskPool(size_t threads) {
  if (threads == 0) throw std::invalid_argument("TaskPool: threads must be > 0");
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { worker(); });
}

TaskPool::~TaskPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::vector<bool> TaskPool::run(size_t n, const std::function<void(size_t)>& task,
                                TimePoint deadline) {
  if (n == 0) return {};
  auto batch = std::make_shared<Batch>();
  batch->task = &task;
  batch->n = n;
  batch->deadline = deadline;
  batch->ran.assign(n, false);
  if (n > 1) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(batch);
    }
    for (size_t i = 1; i < std::min(n, threads_.size() + 1); ++i) work_cv_.notify_one();
  }
  // The caller works too: a batch of one key needs no hand-off.
  while (std::optional<size_t> i = batch->claim()) batch->execute(*i);
  std::unique_lock lock(batch->mutex);
  const auto steady_deadline = std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(deadline.time_since_epoch()));
  const auto all_done = [&] { return batch->claimed == n && batch->running == 0; };
  if (!batch->cv.wait_until(lock, steady_deadline, all_done)) {
    // Unclaimed tasks never start; running ones are waited for.
    batch->cancelled = true;
    batch->cv.wait(lock, [&] { return batch->running == 0; });
  }
  return batch->ran;
}

void TaskPool::worker() {
  for (;;) {
    std::shared_ptr<Batch> batch;
    std::optional<size_t> i;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      batch = queue_.front();
      i = batch->claim();
      if (!i || batch->exhausted()) queue_.pop_front();
    }
    if (i) batch->execute(*i);
  }
}

}  // namespace kvtier
