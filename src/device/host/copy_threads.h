// CopyThreads: the threads that execute one copy op of a HostDevice stream, as a DMA engine
// spreads one transfer over its channels.
//
// Contract:
// - run(descriptors) returns only when every byte of every descriptor is copied. Nothing of the
//   op runs after it returns, so a stream's ops stay in their order, each complete before the
//   next starts, exactly as on one thread. Descriptors are read while the op runs (DMA
//   semantics, as before).
// - An op of at least 2 x kMinPartBytes is cut into up to `threads` parts of about equal bytes;
//   the calling stream thread copies parts too. Parts are claimed, never assigned: when the
//   helpers are busy with another stream's op, the caller copies its own remaining parts, so an
//   op never waits for another op's bytes.
// - Smaller ops, and every op with threads == 1, are copied on the calling thread alone.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "kvtier/device/device.h"

namespace kvtier {

class CopyThreads {
 public:
  // A part smaller than this costs more in the hand-off to a helper than it saves.
  static constexpr size_t kMinPartBytes = size_t{256} << 10;

  // threads: how many threads copy one op, the caller included (>= 1).
  explicit CopyThreads(size_t threads);
  // Joins the helpers. No run() may be in progress.
  ~CopyThreads();
  CopyThreads(const CopyThreads&) = delete;
  CopyThreads& operator=(const CopyThreads&) = delete;

  void run(std::span<const CopyDescriptor> descriptors);
  size_t threads() const { return helpers_.size() + 1; }

 private:
  struct Op;
  void helper_loop();
  // Requires mu_ (held by `lock`, released during the copy): claims op's next part, copies it.
  void copy_next_part(Op& op, std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable work_;  // helpers: an op was queued, or stopping_
  std::condition_variable done_;  // callers: a part of some op finished
  std::deque<Op*> queue_;         // ops with parts not yet claimed
  bool stopping_ = false;
  std::vector<std::thread> helpers_;
};

}  // namespace kvtier
