#include "kvtier/engine/router_server.h"

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <mutex>
#include <thread>

#include "kvtier/core/log.h"
#include "kvtier/core/stop_signals.h"
#include "kvtier/engine/client_connection.h"
#include "kvtier/engine/http_endpoint.h"
#include "kvtier/engine/http_json.h"
#include "kvtier/engine/openai_request.h"
#include "kvtier/engine/openai_response.h"
#include "kvtier/engine/stop_latch.h"

namespace kvtier {
namespace {

// How long the router waits to connect to a backend.
constexpr auto kConnectTimeout = std::chrono::seconds(2);
// How long one wait for a stream's next piece lasts before the provider checks its client.
constexpr auto kWaitSlice = std::chrono::milliseconds(100);

RequestError router_error(int status, std::string message, std::string code) {
  return typed_error("router_error", status, std::move(message), std::move(code));
}

// One request to a backend, read by a thread of its own so that the handler can pass its
// pieces on as they come. The handler and the content provider wait on it.
struct Relay {
  std::mutex mutex;
  std::condition_variable changed;
  int status = 0;  // 0 until the backend's headers arrived
  std::string content_type;
  std::string retry_after;  // the backend's Retry-After (a 429's), passed on
  std::deque<std::string> pieces;
  std::string passed_tail;  // the last two bytes passed on to the client (a stream's)
  bool ended = false;
  std::string error;  // why the backend request failed, when it did
  bool connected = true;
  std::atomic<bool> cancel{false};    // the client went away: end the backend's request
  httplib::Client* client = nullptr;  // the thread's, while it sends
  std::thread thread;

  void start(const BackendAddress& backend, const httplib::Request& client_request,
             Duration read_timeout) {
    thread = std::thread([this, host = backend.host, port = backend.port,
                          path = client_request.path, body = client_request.body, read_timeout] {
      httplib::Client client(host, port);
      {
        std::lock_guard lock(mutex);
        this->client = &client;
      }
      client.set_connection_timeout(kConnectTimeout);
      client.set_read_timeout(read_timeout);
      client.set_write_timeout(std::chrono::seconds(30));
      httplib::Request req;
      req.method = "POST";
      req.path = path;
      req.body = body;
      req.set_header("Content-Type", "application/json");
      req.response_handler = [this](const httplib::Response& res) {
        std::lock_guard lock(mutex);
        status = res.status;
        content_type = res.get_header_value("Content-Type");
        retry_after = res.get_header_value("Retry-After");
        changed.notify_all();
        return !cancel.load();
      };
      req.content_receiver = [this](const char* data, size_t size, uint64_t, uint64_t) {
        std::lock_guard lock(mutex);
        pieces.emplace_back(data, size);
        changed.notify_all();
        return !cancel.load();
      };
      const httplib::Result result = client.send(req);
      std::lock_guard lock(mutex);
      this->client = nullptr;
      if (!result && !cancel.load()) {
        error = httplib::to_string(result.error());
        connected = result.error() != httplib::Error::Connection;
      }
      ended = true;
      changed.notify_all();
    });
  }

  // The client went away: the backend's request ends now, not when its next piece arrives
  // (a request still queued or in prefill sends nothing for a long time).
  void stop() {
    cancel = true;
    std::lock_guard lock(mutex);
    if (client != nullptr) client->stop();
  }

  void join() {
    if (thread.joinable()) thread.join();
  }

  // Waits until `ready` holds (under the mutex), or the client of `connection` hung up, which
  // stops the backend's request; then until it ended. `lock` holds the mutex.
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lock, const std::optional<ClientConnection>& connection,
            Ready ready) {
    while (!changed.wait_for(lock, kWaitSlice, ready)) {
      if (connection && connection->closed()) {
        lock.unlock();
        stop();
        lock.lock();
        changed.wait(lock, [&] { return ended; });
        return;
      }
    }
  }
};

}  // namespace

struct RouterServer::Impl {
  BackendPool& pool;
  RouterOptions options;
  httplib::Server http;
  HttpEndpoint endpoint;
  std::atomic<uint64_t> refused{0};

  Impl(BackendPool& p, const RouterOptions& o)
      : pool(p), options(o), endpoint(http, o.max_requests_in_flight) {
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const size_t in = pool.in_rotation();
      const nlohmann::json counts = {{"backends", pool.size()}, {"in_rotation", in}};
      if (in > 0) {
        nlohmann::json body = {{"status", "ok"}};
        body.update(counts);
        reply_json(res, 200, body);
      } else {
        nlohmann::json body = {{"status", "unavailable"},
                               {"reason", "no backend in rotation (none answers /health 200)"}};
        body.update(counts);
        reply_json(res, 503, body);
      }
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::string text = pool.metrics();
      text +=
          "# HELP kvtier_router_requests_refused_total Requests answered 503: no backend in "
          "rotation.\n# TYPE kvtier_router_requests_refused_total counter\n"
          "kvtier_router_requests_refused_total " +
          std::to_string(refused.load()) + "\n" +
          "# HELP kvtier_router_requests_overloaded_total Requests answered 429: "
          "max_requests_in_flight were in flight.\n"
          "# TYPE kvtier_router_requests_overloaded_total counter\n"
          "kvtier_router_requests_overloaded_total " +
          std::to_string(endpoint.refused()) + "\n";
      res.set_content(text, "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      const std::optional<RequestLimits> limits = pool.limits();
      if (!limits) {
        no_backend(res);
        return;
      }
      reply_json(res, 200,
                 {{"object", "list"},
                  {"data", nlohmann::json::array({{{"id", limits->model_name},
                                                   {"object", "model"},
                                                   {"created", 0},
                                                   {"owned_by", "kvtier"}}})}});
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, false);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, true);
    });
    set_json_error_handlers(http, "router_error");
  }

  void no_backend(httplib::Response& res, const std::string& detail = "") {
    ++refused;
    reply_json(res, 503,
               router_error(503,
                            "no backend in rotation: none answers /health 200" +
                                (detail.empty() ? std::string() : " (" + detail + ")"),
                            "no_backend")
                   .body());
  }

  // The message of a backend's 503 `engine_unavailable` (its engine refused the request before
  // computing anything), else nullopt.
  static std::optional<std::string> engine_unavailable(int status, const std::string& body) {
    if (status != 503) return std::nullopt;
    const auto json = nlohmann::json::parse(body, nullptr, false);
    if (!json.is_object() || !json.contains("error") || !json["error"].is_object()) {
      return std::nullopt;
    }
    const nlohmann::json& error = json["error"];
    if (error.value("code", nlohmann::json()) != "engine_unavailable") return std::nullopt;
    return error.contains("message") && error["message"].is_string()
               ? error["message"].get<std::string>()
               : std::string("engine unavailable");
  }

  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    std::optional<HttpEndpoint::RequestSlot> slot = endpoint.admit();
    if (!slot) {
      endpoint.refuse(res, "router_error");
      return;
    }
    const std::optional<RequestLimits> limits = pool.limits();
    if (!limits) {
      // What needs no backend's limits is checked even so: a body that is no JSON object.
      const auto body = nlohmann::json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object()) {
        reply_json(res, 400,
                   RequestError{400, "the request body must be a JSON object", ""}.body());
        return;
      }
      no_backend(res);
      return;
    }
    auto request = parse_completion_request(req.body, chat, *limits);
    if (!request) {
      reply_json(res, request.error().http_status, request.error().body());
      return;
    }
    // A client that hangs up ends its backend request (found once: the lookup reads /proc).
    const std::optional<ClientConnection> connection =
        ClientConnection::find(req.remote_addr, req.remote_port, req.local_port);
    std::vector<size_t> tried;
    std::string last_error;
    for (;;) {
      const std::optional<BackendPool::Pick> pick =
          pool.pick(request->prompt, request->max_tokens, tried);
      if (!pick) {
        no_backend(res, last_error);
        return;
      }
      const BackendAddress& backend = pool.address(pick->backend);
      auto relay = std::make_shared<Relay>();
      relay->start(backend, req, options.request_timeout);
      std::unique_lock lock(relay->mutex);
      relay->wait(lock, connection, [&] { return relay->status != 0 || relay->ended; });
      if (relay->status == 0 && !relay->connected) {
        // Nothing reached the backend: the next one gets the request.
        last_error = backend.url + ": " + relay->error;
        lock.unlock();
        relay->join();
        pool.done(*pick, true);
        pool.unreachable(pick->backend, "cannot connect (" + relay->error + ")");
        tried.push_back(pick->backend);
        continue;
      }
      const bool streams =
          relay->status == 200 && relay->content_type.starts_with("text/event-stream");
      if (!streams) {
        // A whole answer (or a failure): passed on once complete.
        relay->wait(lock, connection, [&] { return relay->ended; });
        lock.unlock();
        relay->join();
        std::string body;
        for (const std::string& piece : relay->pieces) body += piece;
        const bool failed = !relay->error.empty();
        if (!failed && !relay->cancel) {
          if (auto why = engine_unavailable(relay->status, body)) {
            // The backend's engine refused the request before computing anything (it failed,
            // or is stopping): out of rotation until its /health says otherwise, and the next
            // backend gets the request.
            last_error = backend.url + ": " + *why;
            pool.done(*pick, true);
            pool.unreachable(pick->backend, "its engine is unavailable (" + *why + ")");
            tried.push_back(pick->backend);
            continue;
          }
        }
        pool.done(*pick, failed);
        res.set_header("X-Kvtier-Backend", backend.url);
        if (relay->cancel) {
          // Nobody reads this answer (a client that only half-closed might): an error, never
          // the backend's status without its body.
          reply_json(res, 499,
                     router_error(499, "the client closed its connection", "client_closed").body());
          return;
        }
        if (failed) {
          reply_json(res, 502,
                     router_error(502, "backend " + backend.url + " failed: " + relay->error,
                                  "backend_failed")
                         .body());
          return;
        }
        res.status = relay->status;
        if (!relay->retry_after.empty()) res.set_header("Retry-After", relay->retry_after);
        res.set_content(body, relay->content_type);
        return;
      }
      lock.unlock();
      res.set_header("X-Kvtier-Backend", backend.url);
      stream_response(res, relay, *pick, backend.url, connection,
                      std::make_shared<HttpEndpoint::RequestSlot>(std::move(*slot)));
      return;
    }
  }

  // Passes the backend's SSE stream on piece by piece; a backend that fails mid-stream ends
  // it with an SSE `error` event (H5's shape).
  void stream_response(httplib::Response& res, const std::shared_ptr<Relay>& relay,
                       BackendPool::Pick pick, const std::string& url,
                       std::optional<ClientConnection> connection,
                       std::shared_ptr<HttpEndpoint::RequestSlot> slot) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [relay, url, connection](size_t, httplib::DataSink& sink) {
          std::unique_lock lock(relay->mutex);
          relay->changed.wait_for(lock, kWaitSlice,
                                  [&] { return !relay->pieces.empty() || relay->ended; });
          while (!relay->pieces.empty()) {
            const std::string piece = std::move(relay->pieces.front());
            relay->pieces.pop_front();
            if (!sink.write(piece.data(), piece.size())) {
              lock.unlock();
              relay->stop();  // the client went away
              return false;
            }
            relay->passed_tail += piece.size() > 2 ? piece.substr(piece.size() - 2) : piece;
            if (relay->passed_tail.size() > 2) {
              relay->passed_tail.erase(0, relay->passed_tail.size() - 2);
            }
          }
          if (!relay->ended) {
            // cpp-httplib 0.11's is_writable() does not see a peer that closed: the socket does.
            if (sink.is_writable() && !(connection && connection->closed())) return true;
            lock.unlock();
            relay->stop();
            return false;
          }
          if (!relay->error.empty()) {
            // The backend may have failed inside an event: that event is ended first, so that
            // the error event is read as one of its own.
            const std::string& tail = relay->passed_tail;
            const std::string end_event = tail.empty() || tail == "\n\n" ? ""
                                          : tail.ends_with('\n')         ? "\n"
                                                                         : "\n\n";
            const std::string text =
                end_event +
                sse_event(
                    router_error(502, "backend " + url + " failed mid-stream: " + relay->error,
                                 "backend_failed")
                        .body(),
                    "error");
            (void)sink.write(text.data(), text.size());
          }
          sink.done();
          return true;
        },
        [this, relay, pick, slot](bool) {
          relay->stop();
          relay->join();
          pool.done(pick, !relay->error.empty());
        });  // the slot is given back with the stream's last copy of this function
  }
};

RouterServer::RouterServer(BackendPool& pool, const RouterOptions& options)
    : impl_(std::make_unique<Impl>(pool, options)) {}

RouterServer::~RouterServer() {
  stop();
}

Result<int> RouterServer::bind() {
  return impl_->endpoint.bind(impl_->options.host, impl_->options.port, "--host / --port");
}

void RouterServer::run() {
  impl_->endpoint.run();
}

void RouterServer::stop() {
  impl_->endpoint.stop();
}

int run_router(const RouterOptions& options, std::ostream& out) {
  StopLatch stop;  // outlives the thread that sets it
  // Before any thread starts (the pool's, the HTTP server's).
  StopSignals stop_signals;
  stop_signals.deliver_to([&stop] { stop.set(); });
  // A client that disconnects mid-answer must not kill the router.
  std::signal(SIGPIPE, SIG_IGN);
  auto pool = BackendPool::start(options.pool);
  if (!pool) {
    log_error(pool.error().message);
    return 2;
  }
  RouterServer server(**pool, options);
  const Result<int> port = server.bind();
  if (!port) {
    log_error(port.error().message);
    return 1;
  }
  std::thread http([&] {
    server.run();
    stop.set();  // the server stopped by itself: end as well
  });
  out << "kvtier: serving router on http://" << options.host << ":" << *port << '\n'
      << std::flush;  // the line callers wait for
  stop.wait();
  server.stop();
  http.join();
  stop_signals.end();
  return 0;
}

}  // namespace kvtier
