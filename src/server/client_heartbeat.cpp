// CacheClient's heartbeat and registration (I/O thread only).
//
// One PING is outstanding at a time, sent every heartbeat interval with a deadline of one
// interval: a server that died or hangs is noticed by the first PING after it, at most two
// intervals later (H7), and the client turns DEGRADED. A PING that cannot be sent (the
// connection is gone: the server process died) also loses every outstanding request, transfers
// as Unprovable (F7). A PONG carries the server's boot id; a different one than the client
// registered with means the server restarted and lost every session: outstanding requests are
// lost the same way, and the client registers again.
#include <algorithm>

#include "client_impl.h"

namespace kvtier::server {

void ClientImpl::set_state(ClientState state, std::string reason, uint64_t boot_id) {
  {
    std::lock_guard lock(health_mu_);
    health_.state = state;
    health_.reason = std::move(reason);
    if (boot_id != 0) health_.server_boot_id = boot_id;
  }
  health_cv_.notify_all();
}

void ClientImpl::heartbeat(TimePoint now) {
  if (ping_outstanding_ || now < next_ping_) return;
  next_ping_ = now + options_.heartbeat_interval;
  ping_outstanding_ = true;
  Call ping;
  ping.requests.push_back(Request{.op = Op::kPing});
  ping.deadline = now + options_.heartbeat_interval;
  ping.on_end = [this](size_t, End end, const Reply* reply, const std::string& why) {
    ping_outstanding_ = false;
    if (end == End::kReply && reply->ok) {
      {
        std::lock_guard lock(health_mu_);
        health_.degraded_tiers = degraded_tiers_of(*reply);
      }
      on_pong(reply->field("boot_id"));
    } else if (end == End::kDeadline) {
      // Slow or hung, but still connected: new loads and stores are skipped, while requests
      // already sent keep waiting for their replies until their own deadlines (F8).
      if (health().state != ClientState::kShutdown) {
        set_state(ClientState::kDegraded, "no PING reply within the heartbeat interval");
      }
    } else {
      on_server_lost("server unreachable: " + why);
    }
  };
  send(std::move(ping));
}

void ClientImpl::on_pong(uint64_t boot_id) {
  // Compared with the last registration's server also while unregistered: a restarted server
  // may have said not_registered before its first PONG.
  if (boot_id_ != 0 && boot_id != boot_id_) {
    forget_registration();
    boot_id_ = 0;
    set_state(ClientState::kDegraded, "server restarted (boot id changed)");
    lose_outstanding("server restarted: its state is gone");
  }
  if (!registered_) {
    if (!register_outstanding_ && keep_registered_) send_register();
    return;
  }
  if (health().state == ClientState::kDegraded) set_state(ClientState::kOk, "", boot_id);
}

void ClientImpl::on_server_lost(const std::string& why) {
  // A disconnect with a transfer outstanding: nothing proves the server's copies stopped, so
  // outstanding transfers are Unprovable (F7); other requests fail as unavailable.
  // The state changes first, so that whoever sees a lost transfer's future sees DEGRADED too.
  if (health().state != ClientState::kShutdown) set_state(ClientState::kDegraded, why);
  // Registered again once a server answers (the same one answers as before, with what it
  // takes; one started anew may be another version): until then no batches.
  forget_registration();
  lose_outstanding("server lost: " + why);
}

void ClientImpl::forget_registration() {
  registered_ = false;
  max_batch_ = 1;  // until a server says again that it takes batches
}

void ClientImpl::on_registration_lost() {
  forget_registration();
  if (health().state != ClientState::kShutdown) {
    set_state(ClientState::kDegraded, "the server does not know this client; registering again");
  }
}

void ClientImpl::on_shutdown_event() {
  forget_registration();
  set_state(ClientState::kShutdown, "server shut down");
  // The event follows the replies of every transfer the server started (it drained first):
  // one still outstanding was refused or never read, and no copy of it ran.
  lose_outstanding("server shut down before starting it", End::kNotStarted);
}

ClientImpl::Call ClientImpl::unregister_call(std::function<void(Result<Reply>)> done) {
  Call call = plain_call(Request{.op = Op::kUnregister}, options_.request_timeout, false, {});
  call.on_end = [this, done = std::move(done)](size_t, End end, Reply* reply, std::string why) {
    if (end == End::kReply && reply->ok) {
      forget_registration();
      keep_registered_ = false;
      set_state(ClientState::kDegraded, "unregistered");
      done(*reply);
    } else if (end == End::kReply) {
      done(make_error(ErrorCode::kFailedPrecondition, reply->code + ": " + reply->message));
    } else {
      done(make_error(ErrorCode::kUnavailable, std::move(why)));
    }
  };
  return call;
}

void ClientImpl::send_register() {
  register_outstanding_ = true;
  Call call;
  Request r{.op = Op::kRegister};
  r.rank = registration_.rank;
  r.layout = registration_.layout;
  r.memory = registration_.memory;
  call.requests.push_back(std::move(r));
  call.deadline = SteadyClock::instance().now() + options_.connect_timeout;
  call.on_end = [this](size_t, End end, const Reply* reply, const std::string& why) {
    register_outstanding_ = false;
    const bool shutdown = health().state == ClientState::kShutdown;
    // A REGISTER sent again after its first attempt's deadline (its reply lost) is answered as
    // the first one was: the server's REGISTER is idempotent.
    if (end == End::kReply && reply->ok) {
      registered_ = true;
      boot_id_ = reply->field("boot_id");
      // A server that does not say it takes batches gets every request in its own frame.
      max_batch_ = std::clamp<uint64_t>(reply->field("max_batch", 1), 1, kMaxBatchRequests);
      max_frame_bytes_ = reply->field("max_frame_bytes");
      if (max_frame_bytes_ == 0) max_batch_ = 1;
      set_state(ClientState::kOk, "", boot_id_);
      return;
    }
    if (shutdown) return;  // a draining server refuses registrations: still SHUTDOWN
    set_state(ClientState::kDegraded,
              end == End::kReply ? "registration refused: " + reply->code + ": " + reply->message
                                 : "registration: " + why);
  };
  send(std::move(call));
}

}  // namespace kvtier::server
