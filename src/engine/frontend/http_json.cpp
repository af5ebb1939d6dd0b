#include "kvtier/engine/http_json.h"

#include <httplib.h>

#include <exception>

#include "kvtier/core/log.h"

namespace kvtier {

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void reply_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

RequestError typed_error(std::string type, int status, std::string message, std::string code) {
  RequestError error{status, std::move(message), ""};
  error.type = std::move(type);
  error.code = std::move(code);
  return error;
}

void set_json_error_handlers(httplib::Server& http, const std::string& type) {
  http.set_exception_handler(
      [type](const httplib::Request& req, httplib::Response& res, const std::exception_ptr& error) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
          what = "an exception of unknown type";
        }
        log_error("request failed: " + what,
                  {{"client", req.remote_addr + ":" + std::to_string(req.remote_port)},
                   {"request", req.method + " " + req.path}});
        reply_json(res, 500, typed_error(type, 500, what, "internal_error").body());
      });
  // An answer cpp-httplib made itself, with no body: a route not found, or a request it could
  // not read.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message;
    switch (res.status) {
      case 404:
      case 405:
        message = "no route " + req.method + " " + req.path;
        break;
      case 413:
        message =
            "the request body is larger than 64 MiB (or is a form larger than 8 KiB: send "
            "JSON with Content-Type: application/json)";
        break;
      case 414:
        message = "the request URI is too long";
        break;
      case 400:
        message = "malformed HTTP request";
        break;
      default:
        message = "HTTP " + std::to_string(res.status);
    }
    reply_json(res, res.status, RequestError{res.status, message, ""}.body());
  });
}

}  // namespace kvtier
