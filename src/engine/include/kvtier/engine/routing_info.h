// RoutingInfo: what a `kvtier serve` instance tells a router about itself at
// GET /kvtier/routing (docs/router.md): the model and request limits it validates requests by,
// how it keys a prompt, and where each of its engine cores publishes KV events (docs/events.md).
// `kvtier router` reads it from every backend, so that it routes by the backends' own keys and
// rejects what they would reject, with nothing to configure twice.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvtier/core/config.h"
#include "kvtier/engine/openai_request.h"
#include "kvtier/engine/prefix_index.h"

namespace kvtier {

struct RoutingInfo {
  RequestLimits limits;  // the model served, max_tokens' default, the context and device bounds
  PromptKeying keying;
  // Engine core n's KV events: events.endpoint and events.replay_endpoint as core n binds them
  // (core_events_endpoint). Empty when events.endpoint is not set: no routing by cache.
  struct Publisher {
    std::string endpoint;
    std::string replay_endpoint;  // empty: no replay
    bool operator==(const Publisher&) const = default;
  };
  std::vector<Publisher> publishers;

  // The info of a `kvtier serve` running `config`. Throws std::invalid_argument as
  // engine_shape() does.
  static RoutingInfo of(const Config& config);
  nlohmann::json to_json() const;
  // The message names the missing or ill-typed field.
  static std::expected<RoutingInfo, std::string> from_json(const nlohmann::json& j);
};

// `endpoint` as a subscriber on another machine reaches it: a tcp:// endpoint bound on every
// interface (`*`, 0.0.0.0, [::]) gets `host` instead; anything else is returned as is.
std::string reachable_endpoint(const std::string& endpoint, const std::string& host);

}  // namespace kvtier
