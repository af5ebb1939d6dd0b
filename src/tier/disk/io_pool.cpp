#include "io_pool.h"

#include <stdexcept>

namespace kvtier::tier_internal {

struct IoPool::Batch {
  const std::function<void(size_t)>* task;  // valid until the batch is cancelled or done
  std::mutex mutex;
  std::condition_variable cv;
  bool cancelled = false;
  size_t running = 0;
  size_t finished = 0;  // ran or skipped
  std::vector<bool> ran;
};

IoPool::IoPool(size_t threads) {
  if (threads == 0) throw std::invalid_argument("IoPool: threads must be > 0");
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { worker(); });
}

IoPool::~IoPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::vector<bool> IoPool::run(size_t n, const std::function<void(size_t)>& task,
                              TimePoint deadline) {
  if (n == 0) return {};
  auto batch = std::make_shared<Batch>();
  batch->task = &task;
  batch->ran.assign(n, false);
  {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < n; ++i) queue_.push_back(Job{batch, i});
  }
  work_cv_.notify_all();
  std::unique_lock lock(batch->mutex);
  const auto all_done = [&] { return batch->finished == n; };
  const auto steady_deadline = std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(deadline.time_since_epoch()));
  if (!batch->cv.wait_until(lock, steady_deadline, all_done)) {
    // Jobs still queued see `cancelled` and skip; running ones are waited for.
    batch->cancelled = true;
    batch->cv.wait(lock, [&] { return batch->running == 0; });
  }
  return batch->ran;
}

void IoPool::worker() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    Batch& b = *job.batch;
    {
      std::lock_guard lock(b.mutex);
      if (b.cancelled) {
        ++b.finished;
        continue;
      }
      ++b.running;
    }
    (*b.task)(job.index);
    {
      std::lock_guard lock(b.mutex);
      b.ran[job.index] = true;
      --b.running;
      ++b.finished;
    }
    b.cv.notify_all();
  }
}

}  // namespace kvtier::tier_internal
