#include "kvtier/engine/request_stream.h"

namespace kvtier {

bool RequestStream::push(StreamEvent event) {
  {
    std::lock_guard lock(mutex_);
    if (ended_) return false;
    ended_ = event.final();
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
  return true;
}

std::optional<StreamEvent> RequestStream::next(Duration timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  StreamEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

bool RequestStream::ended() const {
  std::lock_guard lock(mutex_);
  return ended_;
}

}  // namespace kvtier
