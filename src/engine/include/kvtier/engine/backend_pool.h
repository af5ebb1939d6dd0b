// BackendPool: the `kvtier serve` instances behind `kvtier router` (docs/router.md), and which
// one each request goes to.
//
// One thread polls every backend's GET /health every health_interval. A backend is in rotation
// while its last /health answered 200 and it has described itself (GET /kvtier/routing,
// RoutingInfo, read again each time it comes back); an answer other than 200, no answer within
// health_timeout, or a request the router could not deliver to it (unreachable()) takes it out
// until /health answers 200 again.
//
// Routing by cache (policy "cache"): the same thread subscribes to the KV events of every engine
// core of every backend (its RoutingInfo's publishers; a tcp endpoint bound on every interface
// is reached at the backend's host) and keeps one PrefixIndex per backend, one slot per core. A
// backend holds what its best core holds; pick() weighs that against the work the router has in
// flight on each backend with choose_core() (prefix_index.h), as the frontend does over its
// cores. The index is a hint: a backend whose events are down, lost or never published is
// routed to by its load alone, and its requests are served the same. Policy "load": the backend
// with the fewest of the router's requests in flight (least_loaded()).
//
// Thread-safety: every public member may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/core/status.h"
#include "kvtier/engine/openai_request.h"

namespace kvtier {

struct BackendAddress {
  std::string url;  // as given: http://host:port
  std::string host;
  int port = 0;
};

// "http://host:port" (a trailing '/' is allowed; host may be [v6]). The message says what is
// wrong with it.
Result<BackendAddress> parse_backend_url(const std::string& url);

struct BackendPoolOptions {
  std::vector<BackendAddress> backends;
  std::string policy = "cache";  // cache | load
  Duration health_interval = std::chrono::milliseconds(500);
  Duration health_timeout = std::chrono::seconds(1);
};

class BackendPool {
 public:
  // Starts the health and events thread; every backend starts out of rotation. kInvalidArgument
  // for no backend or an unknown policy.
  static Result<std::unique_ptr<BackendPool>> start(BackendPoolOptions options);
  // Stops the thread.
  ~BackendPool();
  BackendPool(const BackendPool&) = delete;
  BackendPool& operator=(const BackendPool&) = delete;

  // The limits of a backend in rotation (they all serve the same model), to check a request by
  // before it is routed; nullopt while none is in rotation.
  std::optional<RequestLimits> limits() const;

  // A request routed: to which backend, and what it adds to that backend's work in flight.
  struct Pick {
    size_t backend = 0;
    uint64_t work = 0;
  };
  // The backend in rotation a prompt goes to, its request counted in flight there until done();
  // nullopt when none is in rotation. `exclude`: backends this request already failed on.
  std::optional<Pick> pick(std::string_view prompt, uint32_t max_tokens,
                           const std::vector<size_t>& exclude = {});
  // The request of `pick` ended; `failed`: without an answer from the backend.
  void done(const Pick& pick, bool failed = false);
  // A request could not reach `backend` (no connection): out of rotation until /health is 200.
  void unreachable(size_t backend, const std::string& why);

  const BackendAddress& address(size_t backend) const;
  size_t size() const;
  size_t in_rotation() const;
  // Whether `backend` is in rotation (tests).
  bool in_rotation(size_t backend) const;
  // Blocks the index holds for `backend` on `medium`, summed over its cores (tests).
  size_t indexed_blocks(size_t backend, std::string_view medium) const;
  // Prometheus text, per backend: requests routed, in rotation 0/1, routing hits (requests
  // routed to a backend that held some of their prefix), requests that got no answer from it,
  // requests in flight, KV event batches applied, blocks indexed on device and host.
  std::string metrics() const;

 private:
  struct Impl;
  explicit BackendPool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
