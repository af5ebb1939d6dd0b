#include "kvtier/engine/backend_pool.h"

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "kvtier/core/kv_event_subscriber.h"
#include "kvtier/core/log.h"
#include "kvtier/core/prometheus_text.h"
#include "kvtier/engine/byte_vocab.h"
#include "kvtier/engine/prefix_index.h"
#include "kvtier/engine/routing_info.h"

namespace kvtier {

Result<BackendAddress> parse_backend_url(const std::string& url) {
  const auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::kInvalidArgument, "backend '" + url + "': " + why);
  };
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) return bad("expected http://host:port");
  std::string rest = url.substr(kScheme.size());
  if (rest.ends_with('/')) rest.pop_back();
  if (rest.find('/') != std::string::npos)
    return bad("a path is not allowed, only http://host:port");
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("expected http://host:port");
  std::string host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  if (host.starts_with('[') && host.ends_with(']')) host = host.substr(1, host.size() - 2);
  if (host.empty() || host.find_first_of("[]") != std::string::npos) return bad("bad host");
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) == 0 ||
      std::stoi(port) > 65535) {
    return bad("the port must be a number in [1, 65535]");
  }
  return BackendAddress{.url = url, .host = host, .port = std::stoi(port)};
}

namespace {

// How long the thread waits between polls of the event streams.
constexpr auto kEventPoll = std::chrono::milliseconds(5);

struct Backend {
  BackendAddress address;
  // Guarded by the pool's mutex.
  bool healthy = false;  // last /health answered 200
  // What it said at GET /kvtier/routing; `described` while that was read since /health last
  // answered otherwise (a backend may come back restarted with other limits or publishers).
  std::optional<RoutingInfo> info;
  bool described = false;
  PrefixIndex index{0};
  uint32_t indexed_cores = 0;  // the index's slots: one per publisher subscribed to
  uint32_t requests = 0;       // the router's requests in flight on it
  uint64_t work = 0;           // their work (request_work)
  uint64_t routed = 0;
  uint64_t hits = 0;
  uint64_t failed = 0;
  uint64_t batches = 0;
  // The health thread's alone.
  std::vector<std::unique_ptr<KvEventSubscriber>> subscribers;

  bool in_rotation() const { return healthy && described; }
  // Its info while in rotation, else null.
  const RoutingInfo* serving() const { return in_rotation() && info ? &*info : nullptr; }
};

}  // namespace

struct BackendPool::Impl {
  BackendPoolOptions options;
  std::vector<Backend> backends;
  std::thread thread;

  mutable std::mutex mutex;  // guards the Backends' guarded fields and what follows
  std::condition_variable wake;
  bool stop = false;

  // GET `path` on `backend`: (status, body); status 0 for no answer. The whole exchange ends
  // within twice health_timeout and reads at most kMaxAnswerBytes: a backend trickling an
  // endless body must not hold up the health of every other backend (their checks wait for
  // this one's) or the pool's shutdown.
  std::pair<int, std::string> get(const BackendAddress& backend, const std::string& path) const {
    constexpr size_t kMaxAnswerBytes = size_t{1} << 20;
    httplib::Client client(backend.host, backend.port);
    client.set_connection_timeout(options.health_timeout);
    client.set_read_timeout(options.health_timeout);
    client.set_write_timeout(options.health_timeout);
    const auto deadline = std::chrono::steady_clock::now() + 2 * options.health_timeout;
    std::string body;
    const char* cut = nullptr;
    const httplib::Result result = client.Get(path, [&](const char* data, size_t size) {
      if (body.size() + size > kMaxAnswerBytes) cut = "an answer of more than 1 MiB";
      if (std::chrono::steady_clock::now() > deadline) cut = "an answer still coming";
      if (cut != nullptr) return false;
      body.append(data, size);
      return true;
    });
    if (cut != nullptr) return {0, cut};
    if (!result) return {0, httplib::to_string(result.error())};
    return {result->status, body};
  }

  // One health check of backend n, whose /health answered (status, body); reads its RoutingInfo
  // when it comes (back) into rotation.
  void check(size_t n, int status, const std::string& body) {
    Backend& b = backends[n];
    bool was_in = false;
    bool read_info = false;
    {
      std::lock_guard lock(mutex);
      was_in = b.in_rotation();
      b.healthy = status == 200;
      if (!b.healthy) b.described = false;
      read_info = b.healthy && !b.described;
      if (!b.healthy && was_in) {
        log_warning("backend out of rotation: /health answered " +
                        (status == 0 ? body : std::to_string(status)),
                    {{"backend", b.address.url}});
      }
    }
    if (!read_info) return;
    const auto [info_status, info_body] = get(b.address, "/kvtier/routing");
    std::optional<RoutingInfo> info;
    if (info_status == 200) {
      auto parsed = RoutingInfo::from_json(nlohmann::json::parse(info_body, nullptr, false));
      if (parsed) info = std::move(*parsed);
      if (!parsed) log_warning(parsed.error(), {{"backend", b.address.url}});
    } else {
      log_warning("backend kept out of rotation: GET /kvtier/routing answered " +
                      (info_status == 0 ? info_body : std::to_string(info_status)),
                  {{"backend", b.address.url}});
    }
    if (!info) return;
    // A backend coming (back) into rotation is subscribed to afresh and its index starts empty:
    // it may be a new process on the same endpoints, whose cache holds nothing of the old one's
    // (a subscriber kept would learn of the restart only from the new process's first batch,
    // which an idle backend never sends). A fresh subscriber replays the current process's
    // history or snapshot.
    const bool resubscribe = options.policy == "cache";
    if (resubscribe) {
      b.subscribers.clear();
      for (const RoutingInfo::Publisher& p : info->publishers) {
        try {
          b.subscribers.push_back(std::make_unique<KvEventSubscriber>(KvEventSubscriberOptions{
              .endpoint = reachable_endpoint(p.endpoint, b.address.host),
              .replay_endpoint = p.replay_endpoint.empty()
                                     ? ""
                                     : reachable_endpoint(p.replay_endpoint, b.address.host)}));
        } catch (const std::exception& e) {  // zmq::error_t is no runtime_error (EMFILE)
          // A hint only: this core's share of the backend is routed to by load.
          log_warning("routing without a core's KV events",
                      {{"backend", b.address.url}, {"error", e.what()}});
          b.subscribers.push_back(nullptr);
        }
      }
      if (info->publishers.empty()) {
        log_warning("backend publishes no KV events (events.endpoint): routed to by load",
                    {{"backend", b.address.url}});
      }
    }
    std::lock_guard lock(mutex);
    if (resubscribe) {
      b.indexed_cores = static_cast<uint32_t>(b.subscribers.size());
      b.index = PrefixIndex(b.indexed_cores);
    }
    b.info = std::move(info);
    b.described = true;
    log_info("backend in rotation", {{"backend", b.address.url}});
  }

  // What the backends' KV events say, into their indexes. Never blocks.
  void receive_events() {
    for (Backend& b : backends) {
      for (uint32_t n = 0; n < b.subscribers.size(); ++n) {
        if (!b.subscribers[n]) continue;
        const std::vector<KvEventBatch> batches = b.subscribers[n]->poll(Duration::zero());
        if (batches.empty()) continue;
        std::lock_guard lock(mutex);
        for (const KvEventBatch& batch : batches) b.index.apply(n, batch);
        b.batches += batches.size();
      }
    }
  }

  void run() {
    auto next_check = std::chrono::steady_clock::now();
    for (;;) {
      if (std::chrono::steady_clock::now() >= next_check) {
        // Every backend's /health at once: one that does not answer costs a round its
        // health_timeout once, not once more for every backend checked after it. (With both
        // policies libstdc++ runs a call inline when no thread can be started.)
        std::vector<std::future<std::pair<int, std::string>>> answers;
        answers.reserve(backends.size());
        for (const Backend& b : backends) {
          answers.push_back(std::async(std::launch::async | std::launch::deferred,
                                       [this, &b] { return get(b.address, "/health"); }));
        }
        for (size_t n = 0; n < backends.size(); ++n) {
          const auto [status, body] = answers[n].get();
          check(n, status, body);
        }
        next_check = std::chrono::steady_clock::now() + options.health_interval;
      }
      receive_events();
      std::unique_lock lock(mutex);
      if (wake.wait_for(lock, kEventPoll, [this] { return stop; })) return;
    }
  }
};

BackendPool::BackendPool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

BackendPool::~BackendPool() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<std::unique_ptr<BackendPool>> BackendPool::start(BackendPoolOptions options) {
  if (options.backends.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "router: no backend (--backend URL)");
  }
  if (options.policy != "cache" && options.policy != "load") {
    return make_error(ErrorCode::kInvalidArgument,
                      "router: unknown policy '" + options.policy + "' (cache or load)");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  for (const BackendAddress& address : impl->options.backends) {
    impl->backends.push_back(Backend{.address = address});
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<BackendPool>(new BackendPool(std::move(impl)));
}

std::optional<RequestLimits> BackendPool::limits() const {
  std::lock_guard lock(impl_->mutex);
  for (const Backend& b : impl_->backends) {
    if (const RoutingInfo* info = b.serving()) return info->limits;
  }
  return std::nullopt;
}

std::optional<BackendPool::Pick> BackendPool::pick(std::string_view prompt, uint32_t max_tokens,
                                                   const std::vector<size_t>& exclude) {
  Impl& p = *impl_;
  const std::vector<TokenId> tokens = tokenize(prompt);
  // Keyed outside the lock: hashing is the costly part.
  std::vector<std::optional<PromptKeying>> keying(p.backends.size());
  if (p.options.policy == "cache") {
    std::lock_guard lock(p.mutex);
    for (size_t n = 0; n < p.backends.size(); ++n) {
      if (const RoutingInfo* info = p.backends[n].serving()) keying[n] = info->keying;
    }
  }
  std::vector<std::optional<PromptKeys>> keys(p.backends.size());
  for (size_t n = 0; n < keying.size(); ++n) {
    if (const std::optional<PromptKeying>& k = keying[n]) keys[n] = k->keys(tokens);
  }
  std::lock_guard lock(p.mutex);
  std::vector<CoreLoad> loads;
  loads.reserve(p.backends.size());
  for (size_t n = 0; n < p.backends.size(); ++n) {
    const Backend& b = p.backends[n];
    // What its best core holds: the backend's own frontend sends the request there.
    double cached = 0;
    if (const std::optional<PromptKeys>& k = keys[n]) {
      for (uint32_t core = 0; core < b.indexed_cores; ++core) {
        cached = std::max(cached, b.index.cached_tokens(core, *k));
      }
    }
    const bool excluded = std::ranges::find(exclude, n) != exclude.end();
    loads.push_back({.serving = b.in_rotation() && !excluded,
                     .cached = cached,
                     .work = b.work,
                     .requests = b.requests});
  }
  const std::optional<uint32_t> chosen =
      p.options.policy == "cache" ? choose_core(loads, tokens.size()) : least_loaded(loads);
  if (!chosen) return std::nullopt;
  Backend& b = p.backends[*chosen];
  const Pick pick{.backend = *chosen,
                  .work = request_work(tokens.size(), loads[*chosen].cached, max_tokens)};
  ++b.requests;
  b.work += pick.work;
  ++b.routed;
  if (loads[*chosen].cached > 0) ++b.hits;
  return pick;
}

void BackendPool::done(const Pick& pick, bool failed) {
  std::lock_guard lock(impl_->mutex);
  Backend& b = impl_->backends.at(pick.backend);
  --b.requests;
  b.work -= pick.work;
  if (failed) ++b.failed;
}

void BackendPool::unreachable(size_t backend, const std::string& why) {
  std::lock_guard lock(impl_->mutex);
  Backend& b = impl_->backends.at(backend);
  if (b.healthy) {
    log_warning("backend out of rotation: " + why, {{"backend", b.address.url}});
  }
  b.healthy = false;
  b.described = false;
}

const BackendAddress& BackendPool::address(size_t backend) const {
  return impl_->backends.at(backend).address;
}

size_t BackendPool::size() const {
  return impl_->backends.size();
}

size_t BackendPool::in_rotation() const {
  std::lock_guard lock(impl_->mutex);
  return static_cast<size_t>(
      std::ranges::count_if(impl_->backends, [](const Backend& b) { return b.in_rotation(); }));
}

bool BackendPool::in_rotation(size_t backend) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->backends.at(backend).in_rotation();
}

size_t BackendPool::indexed_blocks(size_t backend, std::string_view medium) const {
  std::lock_guard lock(impl_->mutex);
  const Backend& b = impl_->backends.at(backend);
  size_t total = 0;
  for (uint32_t core = 0; core < b.indexed_cores; ++core) total += b.index.blocks(core, medium);
  return total;
}

std::string BackendPool::metrics() const {
  std::lock_guard lock(impl_->mutex);
  PrometheusText out;
  const auto family = [&](const char* name, const char* type, const char* help, auto value) {
    out.family(name, type, help);
    for (const Backend& b : impl_->backends) {
      out.sample(name, {{"backend", b.address.url}}, static_cast<uint64_t>(value(b)));
    }
  };
  family("kvtier_router_requests_total", "counter", "Requests routed to the backend.",
         [](const Backend& b) { return b.routed; });
  family("kvtier_router_in_rotation", "gauge",
         "1 while the backend's /health answers 200 and requests go to it.",
         [](const Backend& b) { return b.in_rotation() ? 1 : 0; });
  family("kvtier_router_routing_hits_total", "counter",
         "Requests routed to the backend while its KV events said it held part of their prefix.",
         [](const Backend& b) { return b.hits; });
  family("kvtier_router_request_failures_total", "counter",
         "Requests routed to the backend that got no answer from it.",
         [](const Backend& b) { return b.failed; });
  family("kvtier_router_requests_in_flight", "gauge", "The router's requests in flight on it.",
         [](const Backend& b) { return b.requests; });
  family("kvtier_router_event_batches_total", "counter",
         "KV event batches applied to the backend's routing index.",
         [](const Backend& b) { return b.batches; });
  out.family("kvtier_router_indexed_blocks", "gauge",
             "Blocks the backend's KV events say its engine cores hold, by medium.");
  for (const Backend& b : impl_->backends) {
    for (const std::string_view medium : {kMediumDevice, kMediumHost}) {
      size_t blocks = 0;
      for (uint32_t core = 0; core < b.indexed_cores; ++core)
        blocks += b.index.blocks(core, medium);
      out.sample("kvtier_router_indexed_blocks",
                 {{"backend", b.address.url}, {"medium", std::string(medium)}},
                 static_cast<uint64_t>(blocks));
    }
  }
  return out.text();
}

}  // namespace kvtier
