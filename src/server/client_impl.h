// ClientImpl: CacheClient's state. API threads only call enqueue() and the health accessors;
// everything else (the DEALER socket, outstanding requests, heartbeat, registration) belongs to
// the I/O thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "kvtier/server/client.h"

namespace kvtier::server {

class ClientImpl {
 public:
  // How a request ended: its reply arrived, its deadline passed, the server was lost while it
  // was outstanding, or it was never sent.
  enum class End { kReply, kDeadline, kLost, kNotSent };
  struct Call {
    Request request;
    TimePoint deadline;
    bool needs_ok = false;  // skipped (kNotSent) unless the client is OK
    bool transfer = false;
    // Called exactly once, on the I/O thread (or on the caller's thread when skipped).
    std::function<void(End, const Reply*, std::string why)> on_end;
  };

  ClientImpl(ClientOptions options, Registration registration);
  ~ClientImpl();

  const ClientOptions& options() const { return options_; }
  void enqueue(Call call);
  ClientHealth health() const;
  bool wait_until_ok(Duration timeout) const;

  Call transfer_call(Request request, JobId job, Direction direction,
                     const std::shared_ptr<std::promise<TransferResult>>& promise);
  Call plain_call(Request request, Duration timeout, bool needs_ok,
                  std::function<void(Result<Reply>)> done);
  // UNREGISTER; on success the I/O thread stops registering again.
  Call unregister_call(std::function<void(Result<Reply>)> done);

 private:
  void run();
  void wake();
  void send(Call call);
  void receive_all();
  void expire(TimePoint now);
  void lose_outstanding(const std::string& why);
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
  std::map<uint64_t, Call> outstanding_;
  uint64_t next_id_ = 1;
  TimePoint next_ping_{};
  bool ping_outstanding_ = false;
  bool register_outstanding_ = false;
  bool registered_ = false;
  bool keep_registered_ = true;  // false after unregister()
  uint64_t boot_id_ = 0;
};

}  // namespace kvtier::server
