// JSON over cpp-httplib for the engine's HTTP servers (kvtier serve's frontend, kvtier router):
// replies, OpenAI-shaped errors of a server's own error type, and the handlers every such
// server installs for a handler that throws and for a route it does not have.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kvtier/engine/openai_request.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace kvtier {

// `j` as compact text; invalid UTF-8 in a string is replaced, never thrown on.
std::string dump_json(const nlohmann::json& j);

// `body` as the response, application/json, with `status`.
void reply_json(httplib::Response& res, int status, const nlohmann::json& body);

// An error of `type` (e.g. "engine_error", "router_error") with a machine-readable `code`.
RequestError typed_error(std::string type, int status, std::string message, std::string code);

// A handler that throws answers 500 (a `type` error, code internal_error) and is logged with its
// client and request; an answer without a body (an unknown route, 404) gets a JSON error body.
void set_json_error_handlers(httplib::Server& http, const std::string& type);

}  // namespace kvtier
