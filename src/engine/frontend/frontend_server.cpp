#include "kvtier/engine/frontend_server.h"

#include <httplib.h>

#include <atomic>
#include <ctime>
#include <iostream>

#include "kvtier/engine/byte_vocab.h"
#include "kvtier/engine/client_connection.h"
#include "kvtier/engine/engine_shape.h"
#include "kvtier/engine/http_endpoint.h"
#include "kvtier/engine/http_json.h"
#include "kvtier/engine/openai_request.h"
#include "kvtier/engine/openai_response.h"
#include "kvtier/engine/routing_info.h"

namespace kvtier {
namespace {

// How long one wait on a request's stream lasts before the handler checks its client.
constexpr auto kWaitSlice = std::chrono::milliseconds(100);

RequestError engine_error(int status, std::string message, std::string code) {
  return typed_error("engine_error", status, std::move(message), std::move(code));
}

// The text of generated tokens; a token the vocabulary cannot print is an engine error.
std::optional<std::string> text_of(const std::vector<TokenId>& tokens) {
  try {
    return detokenize(tokens);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

// One request in flight, shared by its handler and (for streams) its content provider.
struct Exchange {
  CoreManager* manager = nullptr;
  std::shared_ptr<RequestStream> stream;
  ResponseShape shape;
  CompletionUsage usage;
  std::chrono::steady_clock::time_point deadline;
  std::optional<ClientConnection> client;  // nullopt: not found, never seen as gone
  HttpEndpoint::RequestSlot slot;          // one of max_requests_in_flight, held to the end
  bool opened = false;                     // chat stream: role chunk sent

  // The client hung up: the request is aborted.
  bool client_gone() {
    if (!client || !client->closed()) return false;
    manager->abort(stream->id());
    return true;
  }

  // The next event, or an error event once the deadline passed (the request is aborted).
  std::optional<StreamEvent> next() {
    if (std::chrono::steady_clock::now() < deadline) {
      std::optional<StreamEvent> event = stream->next(kWaitSlice);
      if (event) {
        usage.prompt_tokens = std::max(usage.prompt_tokens, event->prompt_tokens);
        usage.cached_tokens = std::max(usage.cached_tokens, event->cached_tokens);
        usage.completion_tokens += static_cast<uint32_t>(event->tokens.size());
      }
      return event;
    }
    manager->abort(stream->id());
    StreamEvent timeout;
    timeout.kind = StreamEvent::Kind::kError;
    timeout.error = "the request did not finish within engine.request_timeout_s";
    timeout.http_status = 504;
    return timeout;
  }
};

// The error answer of a request that ended with `event` (kError).
RequestError out_of_vocabulary() {
  return engine_error(500, "the engine produced a token outside the vocabulary", "internal_error");
}

RequestError error_of(const StreamEvent& event) {
  if (event.http_status == 400) return RequestError{400, event.error, ""};
  if (event.http_status == 504) return engine_error(504, event.error, "request_timeout");
  return engine_error(event.http_status, event.error, "engine_failed");
}

}  // namespace

struct FrontendServer::Impl {
  CoreManager& manager;
  Config config;
  uint64_t max_request_tokens;
  httplib::Server http;
  HttpEndpoint endpoint;

  Impl(CoreManager& m, const Config& c)
      : manager(m),
        config(c),
        max_request_tokens(kvtier::max_request_tokens(engine_shape(c))),
        endpoint(http, c.engine.max_requests_in_flight) {
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const HealthReport report = manager.health();
      reply_json(res, report.http_status, report.body);
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      EngineMetrics metrics = manager.metrics();
      metrics.requests_refused_total = endpoint.refused();
      res.set_content(render_metrics(metrics), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      reply_json(res, 200,
                 {{"object", "list"},
                  {"data", nlohmann::json::array({{{"id", config.engine.model_name},
                                                   {"object", "model"},
                                                   {"created", 0},
                                                   {"owned_by", "kvtier"}}})}});
    });
    // For `kvtier router` (docs/router.md): how this instance keys prompts, where its cores
    // publish their KV events, and the limits it checks requests against.
    http.Get("/kvtier/routing", [routing = RoutingInfo::of(config).to_json()](
                                    const httplib::Request&, httplib::Response& res) {
      reply_json(res, 200, routing);
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, false);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, true);
    });
    set_json_error_handlers(http, "engine_error");
  }

  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    std::optional<HttpEndpoint::RequestSlot> slot = endpoint.admit();
    if (!slot) {
      endpoint.refuse(res, "engine_error");
      return;
    }
    const RequestLimits limits{config.engine.model_name, config.engine.max_tokens,
                               config.model.max_context, max_request_tokens};
    auto request = parse_completion_request(req.body, chat, limits);
    if (!request) {
      reply_json(res, request.error().http_status, request.error().body());
      return;
    }
    auto stream = manager.submit(tokenize(request->prompt), request->max_tokens);
    if (!stream) {
      reply_json(res, 503, engine_error(503, stream.error().message, "engine_unavailable").body());
      return;
    }
    auto exchange = std::make_shared<Exchange>(
        &manager, *stream,
        ResponseShape(chat, (chat ? "chatcmpl-" : "cmpl-") + (*stream)->id(),
                      config.engine.model_name, static_cast<int64_t>(std::time(nullptr))),
        CompletionUsage{},
        std::chrono::steady_clock::now() +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                seconds_to_duration(config.engine.request_timeout_s)),
        ClientConnection::find(req.remote_addr, req.remote_port, req.local_port), std::move(*slot));
    if (request->stream) {
      stream_response(res, exchange, chat, request->include_usage);
    } else {
      whole_response(res, *exchange);
    }
  }

  // Waits for the whole output; each wait is bounded (see Exchange::next). A client that hung
  // up ends the request; its answer goes nowhere. Its connection is looked at after every wait,
  // not only after one that timed out: a request that yields tokens steadily never times out.
  static void whole_response(httplib::Response& res, Exchange& exchange) {
    std::vector<TokenId> tokens;
    for (;;) {
      std::optional<StreamEvent> event = exchange.next();
      if (exchange.client_gone()) {
        // Nobody reads this (a client that only half-closed might): an error, never a 200
        // without a body.
        reply_json(res, 499,
                   engine_error(499, "the client closed its connection", "client_closed").body());
        return;
      }
      if (!event) continue;
      tokens.insert(tokens.end(), event->tokens.begin(), event->tokens.end());
      if (event->kind == StreamEvent::Kind::kError) {
        reply_json(res, event->http_status, error_of(*event).body());
        return;
      }
      if (event->kind != StreamEvent::Kind::kDone) continue;
      const std::optional<std::string> text = text_of(tokens);
      if (!text) {
        reply_json(res, 500, out_of_vocabulary().body());
        return;
      }
      reply_json(res, 200, exchange.shape.full(*text, event->finish_reason, exchange.usage));
      return;
    }
  }

  // SSE: one chunk per `out`, the finish_reason's, with `include_usage` a chunk of usage and no
  // choices, then [DONE]; on failure an `error` event and the end (H5).
  void stream_response(httplib::Response& res, std::shared_ptr<Exchange> exchange, bool chat,
                       bool include_usage) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [exchange, chat, include_usage, manager = &manager](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& text) {
            if (sink.write(text.data(), text.size())) return true;
            manager->abort(exchange->stream->id());  // the client went away
            return false;
          };
          if (chat && !exchange->opened) {
            exchange->opened = true;
            return write(sse_event(exchange->shape.role_chunk()));
          }
          std::optional<StreamEvent> event = exchange->next();
          if (!event) {
            if (sink.is_writable() && !exchange->client_gone()) return true;  // wait again
            manager->abort(exchange->stream->id());  // the client went away
            return false;
          }
          std::optional<std::string> text = text_of(event->tokens);
          if (!text) {  // as a whole answer says it: 500
            manager->abort(exchange->stream->id());
            const bool ok = write(sse_event(out_of_vocabulary().body(), "error"));
            sink.done();
            return ok;
          }
          if (event->kind == StreamEvent::Kind::kError) {
            const bool ok = write(sse_event(error_of(*event).body(), "error"));
            sink.done();
            return ok;
          }
          if (!text->empty() && !write(sse_event(exchange->shape.chunk(*text)))) return false;
          if (event->kind == StreamEvent::Kind::kDone) {
            std::string end = sse_event(exchange->shape.final_chunk(event->finish_reason));
            if (include_usage) end += sse_event(exchange->shape.usage_chunk(exchange->usage));
            const bool ok = write(end + kSseDone);
            sink.done();
            return ok;
          }
          return true;
        });
  }
};

FrontendServer::FrontendServer(CoreManager& manager, const Config& config)
    : impl_(std::make_unique<Impl>(manager, config)) {}

FrontendServer::~FrontendServer() {
  stop();
}

Result<int> FrontendServer::bind() {
  const EngineConfig& engine = impl_->config.engine;
  return impl_->endpoint.bind(engine.host, static_cast<int>(engine.port),
                              "engine.host / engine.port");
}

void FrontendServer::run() {
  impl_->endpoint.run();
}

void FrontendServer::stop() {
  impl_->endpoint.stop();
}

}  // namespace kvtier
