// ClientImpl: CacheClient's state. API threads only call enqueue() and the health accessors;
// everything else (the DEALER socket, outstanding requests, heartbeat, registration) belongs to
// the I/O thread. The I/O thread sends what the API threads queued while it was busy together,
// in batch frames once the server said it takes them (docs/protocol.md, "Batches").
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "kvtier/server/client.h"
#include "lookup_frames.h"

namespace kvtier::server {

class ClientImpl {
 public:
  // How a request ended: its reply arrived, its deadline passed, the server was lost while it
  // was outstanding, or it was never sent, or not started (its server shut down first: a
  // draining kvtierd answers every transfer it started before its farewell event).
  enum class End { kReply, kDeadline, kLost, kNotSent, kNotStarted };
  // One request, or several queued together (lookup_many): each has its own id and reply.
  struct Call {
    std::vector<Request> requests;
    // Or (lookup, lookup_many) LOOKUPs, encoded from their keys without a Request each.
    LookupBatch lookups;
    uint64_t lock_ms = 0;   // of every LOOKUP of the call
    TimePoint deadline;     // of every request of the call
    bool needs_ok = false;  // skipped (kNotSent) unless the client is OK
    // STORE/RETRIEVE: names the client's memory, so skipped (kNotSent) once the client fail
    // stopped (F7): a server copy of an Unprovable transfer may still use that memory.
    bool moves_data = false;
    // Called exactly once for each request (its index in `requests`), on the I/O thread (or on
    // the caller's thread when skipped). `reply` is set for kReply only; it may be moved from.
    std::function<void(size_t index, End, Reply* reply, std::string why)> on_end;
    // Set for a call of LOOKUPs: called instead of on_end for a success reply read on the
    // LOOKUP fast path (read_lookup_replies), with no Reply built for it.
    std::function<void(size_t index, const LookupReply&)> on_lookup;

    size_t size() const { return requests.empty() ? lookups.size() : requests.size(); }
  };

  ClientImpl(ClientOptions options, Registration registration);
  ~ClientImpl();

  const ClientOptions& options() const { return options_; }
  void enqueue(Call call);
  // Several calls, queued together (one wake of the I/O thread); each ends as enqueue's would.
  void enqueue_all(std::vector<Call> calls);
  ClientHealth health() const;
  bool fail_stopped() const;  // health().fail_stopped, without copying the rest
  bool wait_until_ok(Duration timeout) const;

  Call transfer_call(Request request, JobId job, Direction direction,
                     const std::shared_ptr<std::promise<TransferResult>>& promise);
  Call plain_call(Request request, Duration timeout, bool needs_ok,
                  std::function<void(Result<Reply>)> done);
  // How a request ended, as a plain call's result: the reply (moved from), an error reply as
  // an Error, or kDeadlineExceeded / kUnavailable.
  static Result<Reply> result_of(End end, Reply* reply, std::string why);
  // UNREGISTER; on success the I/O thread stops registering again.
  Call unregister_call(std::function<void(Result<Reply>)> done);

 private:
  void run();
  void wake();
  // A call sent: its requests have ids first, first + 1, ...; `ended` marks those whose on_end
  // ran. Kept (in sent_, by first id) until every request ended.
  struct Sent {
    Call call;
    uint64_t first = 0;
    std::vector<bool> ended;
    size_t remaining = 0;
  };
  void send(Call call);
  // The calls taken from the outbox, in order: their requests in batch frames of up to
  // max_batch_ requests and max_frame_bytes_ bytes while the server takes batches, else each in
  // its own frame. A request whose frame could not be sent ends kNotSent.
  void send_all(std::deque<Call>& calls);
  // The sent call holding request `id` and the request's index in it; nullptr when none (a late
  // reply after its deadline).
  std::pair<Sent*, size_t> find_sent(uint64_t id);
  // Marks request `index` of `sent` ended and returns the call to end it with (nullptr when it
  // had ended): `sent`'s, or, when it was the call's last request, the call moved out of sent_
  // into `done` (its callback may send, or lose every outstanding request).
  Call* settle(Sent& sent, size_t index, std::optional<Sent>& done);
  void end_request(Sent& sent, size_t index, End end, Reply* reply, std::string why);
  // A LOOKUP success read on the fast path: on_lookup, or on_end with the Reply it stands for.
  void end_lookup(const LookupReplyItem& reply);
  // Every request of `calls` that has not ended (the calls are out of sent_ already).
  void end_every(std::vector<Sent>& calls, End end, const std::string& why);
  void receive_all();
  void expire(TimePoint now);
  // Ends every outstanding request: kLost (the server may still act on it) or kNotStarted.
  void lose_outstanding(const std::string& why, End end = End::kLost);
  void mark_fail_stopped();

  // client_heartbeat.cpp
  void heartbeat(TimePoint now);
  void on_pong(uint64_t boot_id);
  void on_server_lost(const std::string& why);
  void on_registration_lost();
  void on_shutdown_event();
  void send_register();
  void set_state(ClientState state, std::string reason, uint64_t boot_id = 0);

  const ClientOptions options_;
  const Registration registration_;
  const int wake_fd_;
  const std::string routing_id_;
  zmq::context_t context_;
  std::thread thread_;
  std::atomic<bool> stop_{false};

  std::mutex outbox_mu_;
  std::deque<Call> outbox_;

  mutable std::mutex health_mu_;
  mutable std::condition_variable health_cv_;
  ClientHealth health_;

  // I/O thread only.
  zmq::socket_t* dealer_ = nullptr;
  std::map<uint64_t, Sent> sent_;                       // by the first request id
  std::set<std::pair<TimePoint, uint64_t>> deadlines_;  // (deadline, first id) of sent_
  uint64_t next_id_ = 1;
  BatchFrame frame_;                             // the frame being sent, reused
  std::vector<LookupReplyItem> lookup_replies_;  // the frame being received (read_lookup_replies)
  TimePoint next_ping_{};
  bool ping_outstanding_ = false;
  bool register_outstanding_ = false;
  bool registered_ = false;
  bool keep_registered_ = true;  // false after unregister()
  uint64_t boot_id_ = 0;
  // What the registered server takes (its REGISTER reply): requests per batch frame (1: no
  // batches) and bytes per frame. Reset whenever the registration is lost.
  uint64_t max_batch_ = 1;
  uint64_t max_frame_bytes_ = 0;
  void forget_registration();
};

}  // namespace kvtier::server
