#include "kvtier/core/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace kvtier {
namespace {

struct Logger {
  std::shared_ptr<spdlog::logger> logger;
  bool json = false;
};

spdlog::level::level_enum spdlog_level(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarning:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

LogLevel parse_level(std::string_view name) {
  for (auto [text, level] : {std::pair{"trace", LogLevel::kTrace},
                             {"debug", LogLevel::kDebug},
                             {"info", LogLevel::kInfo},
                             {"warning", LogLevel::kWarning},
                             {"error", LogLevel::kError},
                             {"off", LogLevel::kOff}}) {
    if (name == text) return level;
  }
  throw std::invalid_argument("log.level: unknown level '" + std::string(name) + "'");
}

// A JSON string literal; bytes that are not UTF-8 are replaced (a message may quote client input).
std::string json_string(std::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The role, pid, time and level come from the pattern; the message and its fields from log().
// spdlog's level names are the configuration's (trace, debug, info, warning, error).
Logger make_logger(const LogConfig& config, std::string_view role) {
  if (config.format != "text" && config.format != "json") {
    throw std::invalid_argument("log.format: unknown format '" + config.format + "'");
  }
  Logger l;
  l.json = config.format == "json";
  l.logger =
      std::make_shared<spdlog::logger>("kvtier", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  std::string escaped_role;  // '%' starts a pattern flag
  for (char c : role) escaped_role += c == '%' ? std::string("%%") : std::string(1, c);
  const std::string time = "%Y-%m-%dT%H:%M:%S.%fZ";
  if (l.json) {
    std::string quoted = json_string(escaped_role);
    l.logger->set_pattern(
        "{\"time\":\"" + time + "\",\"level\":\"%l\",\"role\":" + quoted + ",\"pid\":%P,%v}",
        spdlog::pattern_time_type::utc);
  } else {
    l.logger->set_pattern(time + " %l " + escaped_role + "[%P] %v", spdlog::pattern_time_type::utc);
  }
  l.logger->set_level(spdlog_level(parse_level(config.level)));
  l.logger->flush_on(spdlog::level::trace);  // every line reaches stderr as it is written
  return l;
}

std::mutex& logger_mutex() {
  static std::mutex mu;
  return mu;
}

Logger& current() {
  static Logger logger = make_logger(LogConfig{}, "kvtier");
  return logger;
}

// A copy under the mutex, so init_logging() may replace the logger while others write.
Logger snapshot() {
  std::lock_guard lock(logger_mutex());
  return current();
}

}  // namespace

void init_logging(const LogConfig& config, std::string_view role) {
  Logger next = make_logger(config, role);
  std::lock_guard lock(logger_mutex());
  current() = std::move(next);
}

bool log_enabled(LogLevel level) {
  return level != LogLevel::kOff && snapshot().logger->should_log(spdlog_level(level));
}

void log(LogLevel level, std::string_view message, LogFields fields) {
  if (level == LogLevel::kOff) return;
  const Logger l = snapshot();
  const spdlog::level::level_enum lvl = spdlog_level(level);
  if (!l.logger->should_log(lvl)) return;
  std::string line;
  if (l.json) {
    line = "\"msg\":" + json_string(message);
    for (const auto& [key, value] : fields)
      line += "," + json_string(key) + ":" + json_string(value);
  } else {
    line = message;
    // One event, one line: a message quoting client input may hold line breaks.
    for (char& c : line) c = c == '\n' || c == '\r' ? ' ' : c;
    for (const auto& [key, value] : fields) {
      line += " ";
      line += key;
      line += "=";
      line += value;
    }
  }
  l.logger->log(lvl, spdlog::string_view_t(line.data(), line.size()));
}

}  // namespace kvtier
