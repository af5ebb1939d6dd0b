#include "kvtier/engine/routing_info.h"

#include "kvtier/engine/engine_shape.h"

namespace kvtier {
namespace {

nlohmann::json namespace_json(const KeyNamespace& ns) {
  return {{"model", ns.model},
          {"layout_fingerprint", ns.layout_fingerprint},
          {"group", ns.group},
          {"cache_salt", ns.cache_salt}};
}

KeyNamespace namespace_of(const nlohmann::json& j) {
  return {.model = j.at("model").get<std::string>(),
          .layout_fingerprint = j.at("layout_fingerprint").get<uint64_t>(),
          .group = j.at("group").get<uint32_t>(),
          .cache_salt = j.at("cache_salt").get<std::string>()};
}

}  // namespace

RoutingInfo RoutingInfo::of(const Config& config) {
  const EngineShape shape = engine_shape(config);
  RoutingInfo info{.limits = {.model_name = config.engine.model_name,
                              .default_max_tokens = config.engine.max_tokens,
                              .max_context = config.model.max_context,
                              .max_request_tokens = max_request_tokens(shape)},
                   .keying = prompt_keying(shape),
                   .publishers = {}};
  if (!config.events.endpoint.empty()) {
    for (uint32_t n = 0; n < config.engine.engine_cores; ++n) {
      info.publishers.push_back(
          {.endpoint = core_events_endpoint(config.events.endpoint, n),
           .replay_endpoint = core_events_endpoint(config.events.replay_endpoint, n)});
    }
  }
  return info;
}

nlohmann::json RoutingInfo::to_json() const {
  nlohmann::json publishers_json = nlohmann::json::array();
  for (const Publisher& p : publishers) {
    publishers_json.push_back({{"endpoint", p.endpoint}, {"replay_endpoint", p.replay_endpoint}});
  }
  return {{"model", limits.model_name},
          {"max_tokens", limits.default_max_tokens},
          {"max_context", limits.max_context},
          {"max_request_tokens", limits.max_request_tokens},
          {"block_size", keying.block_size},
          {"device_namespace", namespace_json(keying.device_namespace)},
          {"chunk_tokens", keying.chunk_tokens},
          {"host_namespace", namespace_json(keying.host_namespace)},
          {"publishers", std::move(publishers_json)}};
}

std::expected<RoutingInfo, std::string> RoutingInfo::from_json(const nlohmann::json& j) {
  try {
    RoutingInfo info;
    info.limits = {.model_name = j.at("model").get<std::string>(),
                   .default_max_tokens = j.at("max_tokens").get<uint32_t>(),
                   .max_context = j.at("max_context").get<uint32_t>(),
                   .max_request_tokens = j.at("max_request_tokens").get<uint64_t>()};
    info.keying = {.device_namespace = namespace_of(j.at("device_namespace")),
                   .block_size = j.at("block_size").get<uint32_t>(),
                   .host_namespace = namespace_of(j.at("host_namespace")),
                   .chunk_tokens = j.at("chunk_tokens").get<uint32_t>()};
    if (info.keying.block_size == 0 || info.keying.chunk_tokens == 0) {
      return std::unexpected("block_size and chunk_tokens must be positive");
    }
    for (const nlohmann::json& p : j.at("publishers")) {
      info.publishers.push_back({.endpoint = p.at("endpoint").get<std::string>(),
                                 .replay_endpoint = p.at("replay_endpoint").get<std::string>()});
    }
    return info;
  } catch (const nlohmann::json::exception& e) {
    return std::unexpected(std::string("malformed routing info: ") + e.what());
  }
}

std::string reachable_endpoint(const std::string& endpoint, const std::string& host) {
  for (const std::string any : {"tcp://*:", "tcp://0.0.0.0:", "tcp://[::]:"}) {
    if (endpoint.starts_with(any)) {
      const bool v6 = host.find(':') != std::string::npos;
      return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + endpoint.substr(any.size());
    }
  }
  return endpoint;
}

}  // namespace kvtier
