#include "io_engine.h"

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <vector>

#include "kvtier/core/log.h"
#include "kvtier/core/task_pool.h"

namespace kvtier::tier_internal {
namespace {

// Requests go out once this many bytes are prepared (see refill).
constexpr size_t kSubmitBytes = size_t{1} << 20;
// Reads that complete together are verified on the helper threads too from this many bytes on:
// below it, handing work to another thread (a wakeup each) costs more than the checksums.
constexpr size_t kParallelVerifyBytes = size_t{1} << 20;

bool past(TimePoint deadline) {
  return SteadyClock::instance().now() >= deadline;
}

// The first exception a prepare or complete raised in one run() (several threads may raise):
// run() starts nothing more, waits for what is in flight (the kernel may still be writing the
// caller's buffers), then raises it.
class FirstException {
 public:
  void keep(std::exception_ptr e) {
    std::lock_guard lock(mutex_);
    if (!first_) first_ = std::move(e);
    has_.store(true);
  }
  bool has() const { return has_.load(); }
  void rethrow_if_any() {
    if (has_.load()) std::rethrow_exception(first_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
  std::atomic<bool> has_{false};
};

// ---- io_uring ----

class Ring {
 public:
  // Returns 0 or -errno from io_uring_queue_init.
  int init(unsigned entries) {
    entries_ = entries;
    // COOP_TASKRUN (5.19): completions are posted when this thread next enters the kernel,
    // which it does to wait for them anyway, instead of interrupting it.
    int ret = io_uring_queue_init(entries, &ring_, IORING_SETUP_COOP_TASKRUN);
    if (ret == -EINVAL) ret = io_uring_queue_init(entries, &ring_, 0);
    if (ret == 0) {
      ready_ = true;
      ret = probe();
    }
    if (ret == 0) {
      slots_.resize(2 * size_t{entries});  // in flight + completed, not yet handed back
      slot_item_.resize(slots_.size());
      slot_read_bytes_.resize(slots_.size());
      slot_iov_.resize(slots_.size());
    }
    return ret;
  }
  ~Ring() {
    if (ready_) io_uring_queue_exit(&ring_);
  }

  // A sandbox may allow io_uring_setup and refuse io_uring_enter: one NOP through the ring
  // tells. 0 or -errno.
  int probe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_nop(sqe);
    int ret;
    do {
      ret = io_uring_submit_and_wait(&ring_, 1);
    } while (ret == -EINTR);
    if (ret < 0) return ret;
    io_uring_cqe* cqe = nullptr;
    ret = io_uring_peek_cqe(&ring_, &cqe);
    if (ret < 0) return ret;
    const int result = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    return result < 0 ? result : 0;
  }

  // `helpers` (may be null) run completions alongside the calling thread when several are
  // ready at once.
  size_t run(size_t n, size_t depth, const IoEngine::Prepare& prepare,
             const IoEngine::Complete& complete, TimePoint deadline, TaskPool* helpers) {
    depth = std::clamp<size_t>(depth, 1, entries_);
    std::vector<uint32_t> free_slots;
    free_slots.reserve(slots_.size());
    for (uint32_t s = 0; s < slots_.size(); ++s) free_slots.push_back(s);
    struct Done {
      uint32_t slot;
      int64_t result;
    };
    std::vector<Done> done;
    size_t next = 0;
    size_t inflight = 0;
    bool expired = false;
    FirstException raised;

    const auto refill = [&] {
      size_t queued = 0;  // bytes and requests prepared since the last submission
      size_t unsubmitted = 0;
      while (!expired && next < n && inflight < depth && !free_slots.empty()) {
        if (past(deadline)) {
          expired = true;
          break;
        }
        const uint32_t s = free_slots.back();
        const size_t item = next++;
        IoRequest request;
        bool prepared = false;
        try {
          prepared = prepare(item, slots_[s], request);
        } catch (...) {
          raised.keep(std::current_exception());
          expired = true;  // nothing more starts; what is in flight is waited for
          break;
        }
        if (!prepared) continue;
        free_slots.pop_back();
        slot_item_[s] = item;
        slot_read_bytes_[s] = request.write ? 0 : request.bytes();
        slot_iov_[s] = request.iov;                    // the kernel reads the iovecs at submission
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: inflight < entries
        if (request.write) {
          io_uring_prep_writev(sqe, request.fd, slot_iov_[s].data(), request.iovcnt,
                               request.offset);
        } else {
          io_uring_prep_readv(sqe, request.fd, slot_iov_[s].data(), request.iovcnt, request.offset);
        }
        io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(uintptr_t{s}));
        ++inflight;
        // Out in groups of kSubmitBytes: one submission lets the block layer merge adjacent
        // requests into device IOs of that size (what devices take at most, and what matters
        // where IOs per second are capped, as on cloud disks), while the device need not wait
        // for a whole batch's checksums and copies before its first request. A request that
        // finds the device idle (nothing of this run in flight: a run's first, or the first
        // after the queue drained) goes out alone at once, without waiting for its group.
        queued += request.bytes();
        ++unsubmitted;
        if (queued >= kSubmitBytes || inflight == unsubmitted) {
          submit(0);
          queued = 0;
          unsubmitted = 0;
        }
      }
      if (queued > 0) submit(0);
    };

    for (;;) {
      refill();
      if (inflight == 0) break;
      submit(1);  // also flushes anything a transient error left in the queue
      unsigned head;
      unsigned count = 0;
      io_uring_cqe* cqe;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        done.push_back(
            {static_cast<uint32_t>(reinterpret_cast<uintptr_t>(io_uring_cqe_get_data(cqe))),
             int64_t{cqe->res}});
        ++count;
      }
      io_uring_cq_advance(&ring_, count);
      inflight -= count;
      refill();  // the next requests go out before the completions' CPU work (checksums)
      // Completions that arrived together (the device often finishes merged requests at
      // once, and the last ones of a batch have nothing in flight behind them) are verified
      // in parallel.
      const auto finish = [&](size_t k) {
        try {
          complete(slot_item_[done[k].slot], slots_[done[k].slot], done[k].result);
        } catch (...) {
          raised.keep(std::current_exception());
        }
      };
      size_t reads = 0, read_bytes = 0;  // a write's completion is bookkeeping only
      for (const Done& d : done) {
        reads += slot_read_bytes_[d.slot] > 0;
        read_bytes += slot_read_bytes_[d.slot];
      }
      if (reads > 1 && helpers != nullptr && read_bytes >= kParallelVerifyBytes) {
        helpers->run(done.size(), finish, SteadyClock::instance().now() + std::chrono::hours(24));
      } else {
        for (size_t k = 0; k < done.size(); ++k) finish(k);
      }
      for (const Done& d : done) free_slots.push_back(d.slot);
      done.clear();
      if (raised.has()) expired = true;
    }
    raised.rethrow_if_any();
    return next;
  }

 private:
  // Submits what is queued and waits for `wait` completions. Transient refusals (EINTR,
  // EAGAIN, EBUSY) leave the queue as it is for the next call; anything else means the ring
  // itself is unusable while requests that point at the caller's buffers may be in flight, so
  // the process stops rather than return.
  void submit(unsigned wait) {
    for (;;) {
      const int ret = wait > 0 ? io_uring_submit_and_wait(&ring_, wait) : io_uring_submit(&ring_);
      if (ret >= 0) return;
      if (ret == -EINTR) continue;
      if (ret == -EAGAIN || ret == -EBUSY) {
        if (wait == 0) return;
        continue;
      }
      log_error(std::string("disk tier: io_uring_enter failed: ") + std::strerror(-ret));
      std::abort();
    }
  }

  io_uring ring_{};
  bool ready_ = false;
  unsigned entries_ = 0;
  std::vector<IoSlot> slots_;
  std::vector<size_t> slot_item_;
  std::vector<size_t> slot_read_bytes_;  // bytes the slot's request reads; 0 for a write
  std::vector<std::array<iovec, 3>> slot_iov_;
};

class UringEngine final : public IoEngine {
 public:
  UringEngine(std::vector<std::unique_ptr<Ring>> rings, size_t helpers)
      : free_(std::move(rings)),
        helpers_(helpers > 0 ? std::make_unique<TaskPool>(helpers, TaskPlacement::kOtherCpus)
                             : nullptr) {}

  size_t run(size_t n, size_t depth, const Prepare& prepare, const Complete& complete,
             TimePoint deadline) override {
    if (n == 0) return 0;
    std::unique_ptr<Ring> ring;
    {
      std::unique_lock lock(mutex_);
      const auto steady_deadline = std::chrono::steady_clock::time_point(
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              deadline.time_since_epoch()));
      if (!cv_.wait_until(lock, steady_deadline, [&] { return !free_.empty(); })) return 0;
      ring = std::move(free_.back());
      free_.pop_back();
    }
    // The ring goes back also when run() raises: its requests have all completed then.
    struct GiveBack {
      UringEngine& engine;
      std::unique_ptr<Ring>& ring;
      ~GiveBack() {
        {
          std::lock_guard lock(engine.mutex_);
          engine.free_.push_back(std::move(ring));
        }
        engine.cv_.notify_one();
      }
    } give_back{*this, ring};
    return ring->run(n, depth, prepare, complete, deadline, helpers_.get());
  }

  IoBackend backend() const override { return IoBackend::kIoUring; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Ring>> free_;
  std::unique_ptr<TaskPool> helpers_;  // shared by the rings
};

// ---- threads ----

// Transfers the whole request with preadv/pwritev, continuing after short transfers; the
// bytes moved (fewer at end of file) or -errno.
int64_t transfer(const IoRequest& request) {
  std::array<iovec, 3> iov = request.iov;
  int first = 0;
  int64_t total = 0;
  while (first < request.iovcnt) {
    const off_t at = static_cast<off_t>(request.offset + total);
    const ssize_t n = request.write ? ::pwritev(request.fd, &iov[first], request.iovcnt - first, at)
                                    : ::preadv(request.fd, &iov[first], request.iovcnt - first, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;  // end of file
    total += n;
    size_t left = static_cast<size_t>(n);
    while (first < request.iovcnt && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < request.iovcnt) {
      iov[first].iov_base = static_cast<std::byte*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return total;
}

class ThreadEngine final : public IoEngine {
 public:
  explicit ThreadEngine(size_t threads) : pool_(threads) {}

  size_t run(size_t n, size_t, const Prepare& prepare, const Complete& complete,
             TimePoint deadline) override {
    FirstException raised;
    const std::vector<bool> ran = pool_.run(
        n,
        [&](size_t item) {
          if (raised.has()) return;  // nothing more starts
          std::unique_ptr<IoSlot> slot = take_slot();
          try {
            IoRequest request;
            if (prepare(item, *slot, request)) complete(item, *slot, transfer(request));
          } catch (...) {
            raised.keep(std::current_exception());
          }
          give_slot(std::move(slot));
        },
        deadline);
    raised.rethrow_if_any();
    // The pool claims items in order, so the ones that ran are a prefix.
    size_t count = 0;
    while (count < ran.size() && ran[count]) ++count;
    return count;
  }

  IoBackend backend() const override { return IoBackend::kThreads; }

 private:
  std::unique_ptr<IoSlot> take_slot() {
    std::lock_guard lock(mutex_);
    if (slots_.empty()) return std::make_unique<IoSlot>();
    std::unique_ptr<IoSlot> slot = std::move(slots_.back());
    slots_.pop_back();
    return slot;
  }
  void give_slot(std::unique_ptr<IoSlot> slot) {
    std::lock_guard lock(mutex_);
    slots_.push_back(std::move(slot));
  }

  TaskPool pool_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<IoSlot>> slots_;
};

}  // namespace

std::unique_ptr<IoEngine> make_uring_engine(size_t rings, size_t depth, std::string* why_not) {
  std::vector<std::unique_ptr<Ring>> made;
  for (size_t i = 0; i < rings; ++i) {
    auto ring = std::make_unique<Ring>();
    if (const int ret = ring->init(static_cast<unsigned>(depth)); ret < 0) {
      if (why_not) *why_not = std::string("io_uring: ") + std::strerror(-ret);
      return nullptr;
    }
    made.push_back(std::move(ring));
  }
  // Helpers pinned one per CPU, each call waking those on CPUs other than its own
  // (TaskPlacement::kOtherCpus): one per ring and one more, so that a caller on one of their
  // CPUs still has the others; at most the CPUs. With one CPU no one shares the checksums.
  const size_t cpus = TaskPool::usable_cpus().size();
  return std::make_unique<UringEngine>(std::move(made), cpus > 1 ? std::min(rings + 1, cpus) : 0);
}

std::unique_ptr<IoEngine> make_thread_engine(size_t threads) {
  return std::make_unique<ThreadEngine>(threads);
}

}  // namespace kvtier::tier_internal
