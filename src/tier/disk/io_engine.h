// IoEngine: runs a batch of positioned reads and writes with many in flight, for the disk tier.
//
// run(n, prepare, complete, deadline) asks prepare(i, slot, request) for items 0, 1, ..., n-1
// in order, keeps up to `depth` requests in flight, and calls complete(i, slot, result) once per
// request it submitted, where result is the bytes transferred or -errno. prepare may decide an
// item needs no IO (returns false; complete is not called). A Slot lends each request aligned
// buffers (a header block and a bounce buffer) that stay the request's until complete returns.
// Nothing is prepared once the deadline has passed; requests already submitted are waited for
// (their buffers are the caller's), so run() overruns the deadline by at most one IO time.
// run() returns how many items were prepared: items [0, returned) ran, the rest never started.
// A prepare or complete that raises stops the run as the deadline does: nothing more is
// prepared, every request submitted is completed (complete called), and run() then raises the
// first exception.
//
// Two implementations:
// - io_uring (liburing): a pool of rings, one per concurrent run(); each run submits its
//   requests in batches on its ring and reaps completions on the calling thread. Completion
//   callbacks (the disk tier verifies the chunk's checksum there) run after the freed queue
//   places are refilled and submitted, so the next reads are in flight while they run; several
//   completions that arrived together run in parallel on a small helper pool shared by the
//   rings (the calling thread helps, and helpers on CPUs other than its own: kOtherCpus in
//   task_pool.h), so complete may run on several threads at once.
// - threads: preadv/pwritev on a pool of threads, for kernels or sandboxes without io_uring
//   (io_uring_setup refused by seccomp, io_uring_disabled, ENOSYS). There prepare and complete
//   run on the pool's threads, several at once for different items.
//
// Thread-safety: run() may be called from several threads at once.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "aligned_buffer.h"
#include "kvtier/core/clock.h"

namespace kvtier::tier_internal {

struct IoRequest {
  int fd = -1;
  uint64_t offset = 0;
  bool write = false;
  std::array<iovec, 3> iov{};
  int iovcnt = 0;

  void add(const void* data, size_t bytes) {
    iov[iovcnt++] = iovec{const_cast<void*>(data), bytes};
  }
  size_t bytes() const {
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
    return total;
  }
};

struct IoSlot {
  AlignedBuffer header{kIoAlign};  // one block
  AlignedBuffer bounce;            // grown on demand
};

enum class IoBackend { kAuto, kIoUring, kThreads };

class IoEngine {
 public:
  using Prepare = std::function<bool(size_t item, IoSlot& slot, IoRequest& request)>;
  using Complete = std::function<void(size_t item, IoSlot& slot, int64_t result)>;

  virtual ~IoEngine() = default;
  virtual size_t run(size_t n, size_t depth, const Prepare& prepare, const Complete& complete,
                     TimePoint deadline) = 0;
  virtual IoBackend backend() const = 0;
};

// An io_uring engine with `rings` rings of `depth` entries, or nullptr when io_uring cannot be
// used here; *why_not then says why (the failing call and its errno).
std::unique_ptr<IoEngine> make_uring_engine(size_t rings, size_t depth, std::string* why_not);
std::unique_ptr<IoEngine> make_thread_engine(size_t threads);

}  // namespace kvtier::tier_internal
