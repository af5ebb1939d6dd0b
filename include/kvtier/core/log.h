// Logging: one line per event on stderr, written by kvtierd and by every process of `kvtier
// serve` alike (frontend, engine cores, workers), so an operator reads them all the same way.
//
// Every line carries its UTC timestamp, its level, the process role and the pid:
//   text  2026-12-02T00:31:05.123456Z warning kvtierd[4711] message client=7079… request=12
//   json  {"time":"2026-12-02T00:31:05.123456Z","level":"warning","role":"kvtierd","pid":4711,
//          "msg":"message","client":"7079…","request":"12"}        (one object per line)
// The level and format come from the configuration (log.level, log.format). Before
// init_logging() runs, lines are written as text at level info with role "kvtier". Thread-safe;
// a line is written whole (never interleaved with another thread's).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "kvtier/core/config.h"

namespace kvtier {

enum class LogLevel { kTrace, kDebug, kInfo, kWarning, kError, kOff };

// Sets the level, the format and the role this process's lines name (e.g. "kvtierd",
// "frontend", "engine-core 0", "worker 0/1"). May be called again (a process that learns its
// role later); log.level and log.format must be valid (Config::validate() checked them).
void init_logging(const LogConfig& config, std::string_view role);

// Context of a line: key=value pairs after the message (text), or members of the object (json).
// An error names what it concerns, e.g. {{"client", …}, {"tenant", …}, {"request", …}}.
using LogFields = std::initializer_list<std::pair<std::string_view, std::string>>;

bool log_enabled(LogLevel level);
void log(LogLevel level, std::string_view message, LogFields fields = {});

inline void log_debug(std::string_view message, LogFields fields = {}) {
  log(LogLevel::kDebug, message, fields);
}
inline void log_info(std::string_view message, LogFields fields = {}) {
  log(LogLevel::kInfo, message, fields);
}
inline void log_warning(std::string_view message, LogFields fields = {}) {
  log(LogLevel::kWarning, message, fields);
}
inline void log_error(std::string_view message, LogFields fields = {}) {
  log(LogLevel::kError, message, fields);
}

}  // namespace kvtier
