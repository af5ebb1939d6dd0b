#include "copy_threads.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace kvtier {
namespace {

// Copies bytes [begin, end) of the descriptors' concatenated bytes.
void copy_range(std::span<const CopyDescriptor> descriptors, size_t begin, size_t end) {
  size_t at = 0;  // offset of descriptor d's first byte
  for (const CopyDescriptor& d : descriptors) {
    const size_t d_begin = at;
    at += d.bytes;
    if (at <= begin) continue;
    if (d_begin >= end) break;
    const size_t from = std::max(begin, d_begin) - d_begin;
    const size_t to = std::min<size_t>(end, at) - d_begin;
    std::memcpy(reinterpret_cast<void*>(d.dst + from), reinterpret_cast<const void*>(d.src + from),
                to - from);
  }
}

}  // namespace

struct CopyThreads::Op {
  std::span<const CopyDescriptor> descriptors;
  size_t total_bytes = 0;
  size_t parts = 0;
  size_t claimed = 0;   // parts handed out (guarded by mu_)
  size_t finished = 0;  // parts copied (guarded by mu_)

  // First byte of part i; page-aligned inside the op, so each part starts a whole page.
  size_t part_begin(size_t i) const {
    if (i >= parts) return total_bytes;
    return total_bytes / parts * i / 4096 * 4096;
  }
};

CopyThreads::CopyThreads(size_t threads) {
  if (threads == 0) throw std::invalid_argument("CopyThreads: threads must be >= 1");
  for (size_t i = 1; i < threads; ++i) helpers_.emplace_back([this] { helper_loop(); });
}

CopyThreads::~CopyThreads() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void CopyThreads::run(std::span<const CopyDescriptor> descriptors) {
  size_t total = 0;
  for (const CopyDescriptor& d : descriptors) total += d.bytes;
  const size_t parts = std::min(threads(), total / kMinPartBytes);
  if (parts <= 1) {
    copy_range(descriptors, 0, total);
    return;
  }
  Op op{.descriptors = descriptors, .total_bytes = total, .parts = parts};
  std::unique_lock lock(mu_);
  queue_.push_back(&op);
  work_.notify_all();
  while (op.claimed < op.parts) copy_next_part(op, lock);
  // No part is unclaimed and op has left queue_: only the helpers copying a part still use it.
  done_.wait(lock, [&] { return op.finished == op.parts; });
}

void CopyThreads::copy_next_part(Op& op, std::unique_lock<std::mutex>& lock) {
  const size_t part = op.claimed++;
  if (op.claimed == op.parts) std::erase(queue_, &op);
  lock.unlock();
  copy_range(op.descriptors, op.part_begin(part), op.part_begin(part + 1));
  lock.lock();
  if (++op.finished == op.parts) done_.notify_all();
}

void CopyThreads::helper_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and no op left to help with
    copy_next_part(*queue_.front(), lock);
  }
}

}  // namespace kvtier
