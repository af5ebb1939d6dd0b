// RequestStream: the output of one request on its way from the core manager's I/O thread to the
// HTTP handler thread that answers it.
//
// Thread-safe: one producer (the I/O thread) pushes, one consumer (the handler) waits with a
// timeout. The stream ends with exactly one final event (done or error); pushes after it are
// ignored, so a late `out` from a core cannot follow the error that ended the request (H5).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/clock.h"

namespace kvtier {

struct StreamEvent {
  enum class Kind { kTokens, kDone, kError };
  Kind kind = Kind::kTokens;
  std::vector<TokenId> tokens;  // kTokens and kDone: new tokens
  std::string finish_reason;    // kDone: "length" or "stop"
  uint32_t prompt_tokens = 0;   // kTokens and kDone, as the core reported them
  uint32_t cached_tokens = 0;
  std::string error;      // kError
  int http_status = 503;  // kError: 400 rejected, 503 engine failure, 504 timeout
  bool final() const { return kind != Kind::kTokens; }
};

class RequestStream {
 public:
  explicit RequestStream(std::string id) : id_(std::move(id)) {}

  const std::string& id() const { return id_; }

  // Ignored once the stream has ended. Returns whether the event was queued.
  bool push(StreamEvent event);
  // The next event, waiting at most `timeout`; nullopt when none came in time.
  std::optional<StreamEvent> next(Duration timeout);
  bool ended() const;

 private:
  const std::string id_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
  bool ended_ = false;  // the final event was pushed
};

}  // namespace kvtier
