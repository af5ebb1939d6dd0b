// CacheClient: a rank's connection to kvtierd, as the worker side of the connector uses it when
// `cache.mode: server`.
//
// Contract:
// - Every call returns at once with a future; every future resolves by its deadline (F8),
//   counted from the call (client and server queue time included): requests that move no data
//   use request_timeout, STORE/RETRIEVE use transfer_deadline.
// - STORE/RETRIEVE futures resolve to a TransferResult: Completed on success; Failed on an
//   error reply (the server answers a failed transfer only after its copies on this client's
//   memory stopped, F11), when the request was never sent (cache degraded, no connection, a
//   request larger than the server's max_frame_bytes), or when it is outstanding as the server's
//   SHUTDOWN event arrives (the server answered every transfer it started before the event);
//   Unprovable on an "unprovable" error reply, at the deadline, or when the server is lost
//   while it is outstanding (the connection is gone, or the boot id changed). Unprovable means:
//   keep the blocks' leases forever and fail stop (F7); fail_stopped() turns true and stays, and
//   from then on STORE/RETRIEVE are Failed without being sent (a server copy may still use the
//   memory they would name).
// - Health: OK while registered with a live server. A server that does not answer a PING
//   within one heartbeat interval, that cannot be reached, or whose boot id changed makes the
//   client DEGRADED (so a dead or hung server is seen within two intervals); while not OK, lookups
//   fail with kUnavailable and stores/retrievals are Failed without being sent (the engine
//   recomputes, H7). The client keeps pinging, re-registers with a server that came back, and turns
//   OK again. A SHUTDOWN event from the server turns it SHUTDOWN until a server answers again.
// - Every connect and wait is bounded; the destructor resolves what is outstanding (transfers
//   sent: Unprovable; not yet sent: Failed) and returns promptly.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/core/config.h"
#include "kvtier/server/curve_keys.h"
#include "kvtier/server/protocol.h"
#include "kvtier/transfer/transfer_result.h"

namespace kvtier::server {

enum class ClientState { kOk, kDegraded, kShutdown };
std::string_view to_string(ClientState state);

struct ClientHealth {
  ClientState state = ClientState::kDegraded;
  std::string reason;           // why not OK; empty when OK
  bool fail_stopped = false;    // a transfer was Unprovable (F7): the engine must fail stop
  uint64_t server_boot_id = 0;  // of the server registered with; 0 before the first
  // Lower tiers of the server that are DOWN (H7), as of the last PING reply. The server still
  // answers (state stays OK); the engine's health names them as degraded.
  std::vector<std::string> degraded_tiers;
};

struct ClientOptions {
  std::string endpoint = "ipc:///tmp/kvtierd.sock";
  Duration heartbeat_interval = std::chrono::seconds(1);
  Duration request_timeout = std::chrono::seconds(5);
  Duration transfer_deadline = std::chrono::seconds(40);
  Duration connect_timeout = std::chrono::seconds(5);
  // CURVE (docs/operations.md): with curve_server_key set, the client connects as a CURVE client
  // with its own key pair `curve_keys` and admits only a server holding that key. A server that
  // refuses the key never answers: the client stays DEGRADED ("connecting").
  std::string curve_server_key;  // kvtierd's public key, Z85; empty: no CURVE
  CurveKeyPair curve_keys;       // this client's key pair (its public key is in the tenants file)

  // From the `server` and `transfer` sections: the transfer deadline is transfer_deadline_s +
  // completion_margin_s, so that the server's own (engine) deadline decides first. With
  // server.curve_server_key set, reads the key pair file server.curve_key_file; throws
  // std::invalid_argument (naming the field) when it cannot.
  static ClientOptions from_config(const Config& config);
};

// What REGISTER sends: this rank's layout and its KV memory (shared memory on the host device).
struct Registration {
  uint32_t rank = 0;
  KvLayout layout;
  SharedKvMemory memory;
};

// LOOKUPs given together (lookup_many), their keys in one vector rather than a vector each: the
// i-th has keys[ends[i - 1], ends[i]) (from 0 for the first).
struct LookupBatch {
  std::vector<ChunkKey> keys;
  std::vector<size_t> ends;

  void add(std::span<const ChunkKey> lookup) {
    keys.insert(keys.end(), lookup.begin(), lookup.end());
    ends.push_back(keys.size());
  }
  size_t size() const { return ends.size(); }
  std::span<const ChunkKey> operator[](size_t i) const {
    const size_t begin = i == 0 ? 0 : ends[i - 1];
    return std::span(keys).subspan(begin, ends[i] - begin);
  }
};

struct LookupReply {
  size_t hits = 0;       // leading keys that are ready
  bool pending = false;  // the first non-hit is being stored
  uint64_t lock = 0;     // read lock on the hits (0: none); RELEASE it or name it in RETRIEVE
};

class ClientImpl;

class CacheClient {
 public:
  // Starts the I/O thread, which connects and registers in the background; see health().
  CacheClient(ClientOptions options, Registration registration);
  ~CacheClient();
  CacheClient(const CacheClient&) = delete;
  CacheClient& operator=(const CacheClient&) = delete;

  ClientHealth health() const;
  bool fail_stopped() const;
  // Waits (at most `timeout`) until the client is OK; returns whether it is.
  bool wait_until_ok(Duration timeout) const;

  // `lock_for` > 0 read-locks the hits that long (capped by the server's lock_ttl_s).
  std::future<Result<LookupReply>> lookup(std::vector<ChunkKey> keys, Duration lock_for = {});
  // Many LOOKUPs at once, pipelined: lookups[i] is a LOOKUP request of its own, with its own
  // reply and lock, answered as lookup(lookups[i], lock_for) would be; queued together, so they
  // leave in batch frames. One future for all: element i answers lookups[i].
  std::future<std::vector<Result<LookupReply>>> lookup_many(LookupBatch lookups,
                                                            Duration lock_for = {});
  // keys[i] goes to / comes from device blocks blocks[i] of `group`. `hook` (here and in
  // release) is for tests.
  std::future<TransferResult> store(JobId job, uint32_t group, std::vector<ChunkKey> keys,
                                    std::vector<std::vector<uint32_t>> blocks,
                                    TestHook hook = TestHook::kNone);
  std::future<TransferResult> retrieve(JobId job, uint32_t group, std::vector<ChunkKey> keys,
                                       std::vector<std::vector<uint32_t>> blocks, uint64_t lock = 0,
                                       TestHook hook = TestHook::kNone);
  std::future<Status> release(uint64_t lock, TestHook hook = TestHook::kNone);
  // Ends the registration (the server drops this client's locks and mapping) and stops
  // registering again: the client stays DEGRADED ("unregistered") until destroyed. Fails with
  // "busy" while transfers are in flight.
  std::future<Status> unregister();
  // PIN / UNPIN (docs/protocol.md): the keys (all stored) stay cached for `ttl` (whole
  // milliseconds; at most the server's max_pin_ttl_s), whatever else is stored, until unpinned.
  // A pin belongs to this client's tenant, not to the client. Replies carry "pinned" /
  // "unpinned" and "tenant_pinned_keys".
  std::future<Result<Reply>> pin(std::vector<ChunkKey> keys, Duration ttl);
  std::future<Result<Reply>> unpin(std::vector<ChunkKey> keys);
  std::future<Result<Reply>> stats();
  std::future<Result<Reply>> ping();
  std::future<Status> shutdown_server();
  // Any request (tests: hooks); resolves with the reply, an error reply as kInternal/…, or
  // kDeadlineExceeded / kUnavailable.
  std::future<Result<Reply>> call(Request request, Duration timeout);

 private:
  std::future<Status> status_call(Request request);

  std::unique_ptr<ClientImpl> impl_;
};

}  // namespace kvtier::server
