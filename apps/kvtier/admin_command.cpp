// `kvtier admin`: a live summary of a running kvtierd for an operator, from its STATS reply
// (docs/operations.md "Admin"). Needs no registration: it asks over a DEALER socket of its own.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <random>
#include <thread>
#include <zmq.hpp>

#include "commands.h"
#include "kvtier/server/protocol.h"

namespace kvtier::cli {
namespace {

using Fields = std::map<std::string, uint64_t>;

struct AdminFlags {
  std::string endpoint;     // empty: server.endpoint
  double interval_s = 2.0;  // between refreshes
  double timeout_s = 0;     // 0: server.request_timeout_s
  bool once = false;
};

// One STATS round trip; an error when no reply comes within `timeout`.
Result<Fields> fetch_stats(zmq::context_t& context, const std::string& endpoint,
                           std::chrono::milliseconds timeout, uint64_t id) {
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  try {
    socket.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cannot connect to " + endpoint + ": " + e.what());
  }
  server::Request request;
  request.id = id;
  request.op = server::Op::kStats;
  socket.send(zmq::buffer(server::encode_request(request)), zmq::send_flags::dontwait);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    if (left.count() <= 0 || zmq::poll(&item, 1, left) == 0) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", std::chrono::duration<double>(timeout).count());
      return make_error(ErrorCode::kUnavailable, "no reply from kvtierd at " + endpoint +
                                                     " within " + seconds +
                                                     " s (is it running? server.endpoint)");
    }
    zmq::message_t frame;
    if (!socket.recv(frame)) continue;
    auto reply = server::decode_reply(server::as_bytes(frame.to_string_view()));
    if (!reply) return make_error(ErrorCode::kInternal, "bad reply: " + reply.error().message);
    if (!reply->event.empty() || reply->id != id) continue;  // an event, or a stale reply
    if (!reply->ok) {
      return make_error(ErrorCode::kInternal,
                        "STATS failed: " + reply->code + ": " + reply->message);
    }
    Fields fields;
    for (const auto& [name, value] : reply->fields) fields[std::string(name)] = value;
    return fields;
  }
}

uint64_t get(const Fields& f, const std::string& name) {
  auto it = f.find(name);
  return it == f.end() ? 0 : it->second;
}

std::string bytes_text(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f%s" : "%.1f%s", value, units[unit]);
  return text;
}

// The summary of one STATS reply; `previous` (the last refresh, `elapsed_s` ago) adds rates.
std::string summary(const std::string& endpoint, const Fields& f, const Fields* previous,
                    double elapsed_s) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "kvtierd %s  boot %llx  clients %llu  transfers in flight %llu  locks %llu\n",
                endpoint.c_str(), static_cast<unsigned long long>(get(f, "boot_id")),
                static_cast<unsigned long long>(get(f, "clients")),
                static_cast<unsigned long long>(get(f, "transfers_in_flight")),
                static_cast<unsigned long long>(get(f, "locks")));
  out += line;
  const uint64_t requests = get(f, "requests");
  std::string rate;
  if (previous && elapsed_s > 0) {
    char r[64];
    std::snprintf(r, sizeof r, " (%.0f/s)",
                  static_cast<double>(requests - get(*previous, "requests")) / elapsed_s);
    rate = r;
  }
  std::snprintf(
      line, sizeof line,
      "requests  %llu%s  error replies %llu  rejected frames %llu  limit rejections %llu\n",
      static_cast<unsigned long long>(requests), rate.c_str(),
      static_cast<unsigned long long>(get(f, "error_replies")),
      static_cast<unsigned long long>(get(f, "rejected_frames")),
      static_cast<unsigned long long>(get(f, "limit_rejections")));
  out += line;
  std::snprintf(
      line, sizeof line,
      "host pool slots  ready %llu  pending %llu  free %llu  pinned %llu  quarantined %llu"
      "  evictions %llu  audit %s\n",
      static_cast<unsigned long long>(get(f, "slots_ready")),
      static_cast<unsigned long long>(get(f, "slots_pending")),
      static_cast<unsigned long long>(get(f, "slots_free")),
      static_cast<unsigned long long>(get(f, "slots_pinned")),
      static_cast<unsigned long long>(get(f, "slots_quarantined")),
      static_cast<unsigned long long>(get(f, "evictions")),
      get(f, "cache_audit_ok") == 1 ? "ok" : "FAILED");
  out += line;
  const server::Reply as_reply{.fields = server::ReplyFields(f)};
  const auto tiers = server::tier_fields_of(as_reply);
  if (!tiers.empty()) {
    out += "tiers";
    for (const auto& [name, t] : tiers) {
      const auto get_t = [&](const char* k) {
        auto it = t.find(k);
        return static_cast<unsigned long long>(it == t.end() ? 0 : it->second);
      };
      std::snprintf(line, sizeof line, "  %s %s (hits %llu misses %llu errors %llu)", name.c_str(),
                    get_t("down") == 1 ? "DOWN" : "up", get_t("hits"), get_t("misses"),
                    get_t("errors"));
      out += line;
    }
    out += "\n";
  }
  // Per tenant: "tenant.<name>.<counter>" and "tenant.<name>.rejected.<code>".
  std::map<std::string, Fields> tenants;
  for (const auto& [name, value] : f) {
    if (!name.starts_with("tenant.")) continue;
    const std::string rest = name.substr(7);
    if (const size_t r = rest.find(".rejected."); r != std::string::npos) {
      tenants[rest.substr(0, r)]["rejected"] += value;
    } else if (const size_t dot = rest.rfind('.'); dot != std::string::npos) {
      tenants[rest.substr(0, dot)][rest.substr(dot + 1)] = value;
    }
  }
  std::snprintf(line, sizeof line, "%-12s %10s %10s %10s %7s %12s %12s %9s %11s %9s\n", "tenant",
                "lookups", "hit", "missed", "hit%", "stored", "retrieved", "evicted", "quarantined",
                "rejected");
  out += line;
  for (const auto& [name, t] : tenants) {
    const uint64_t hit = get(t, "hit_chunks");
    const uint64_t missed = get(t, "missed_chunks");
    const double ratio = hit + missed == 0
                             ? 0
                             : 100.0 * static_cast<double>(hit) / static_cast<double>(hit + missed);
    std::snprintf(
        line, sizeof line, "%-12s %10llu %10llu %10llu %6.1f%% %12s %12s %9llu %11llu %9llu\n",
        name.c_str(), static_cast<unsigned long long>(get(t, "lookups")),
        static_cast<unsigned long long>(hit), static_cast<unsigned long long>(missed), ratio,
        bytes_text(get(t, "stored_bytes")).c_str(), bytes_text(get(t, "retrieved_bytes")).c_str(),
        static_cast<unsigned long long>(get(t, "evicted_chunks")),
        static_cast<unsigned long long>(get(t, "quarantined_slots")),
        static_cast<unsigned long long>(get(t, "rejected")));
    out += line;
  }
  return out;
}

}  // namespace

Action add_admin_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "admin",
      "Live summary of a running kvtierd (its STATS): clients, requests, host pool, "
      "tiers, per-tenant hits and bytes (docs/operations.md)");
  auto flags = std::make_shared<AdminFlags>();
  cmd->add_option("--endpoint", flags->endpoint, "kvtierd's endpoint (default: server.endpoint)");
  cmd->add_option("--interval", flags->interval_s, "Seconds between refreshes")
      ->check(finite_in(0.1, 3600.0));
  cmd->add_option("--timeout", flags->timeout_s,
                  "Seconds to wait for each reply (default: server.request_timeout_s)")
      ->check(finite_in(0.01, 3600.0));
  cmd->add_flag("--once", flags->once, "Print one summary and exit");
  return [cmd, flags](const Config& config) -> int {
    if (!cmd->parsed()) return -1;
    const std::string endpoint = flags->endpoint.empty() ? config.server.endpoint : flags->endpoint;
    const double timeout_s =
        flags->timeout_s > 0 ? flags->timeout_s : config.server.request_timeout_s;
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    zmq::context_t context;
    std::optional<Fields> previous;
    auto previous_at = std::chrono::steady_clock::now();
    const bool terminal = isatty(STDOUT_FILENO) == 1;
    for (uint64_t id = 1;; ++id) {
      const Result<Fields> stats = fetch_stats(context, endpoint, timeout, id);
      if (!stats) {
        std::cerr << "kvtier admin: " << stats.error().message << "\n";
        return 1;
      }
      const auto now = std::chrono::steady_clock::now();
      const double elapsed = std::chrono::duration<double>(now - previous_at).count();
      if (terminal && !flags->once) std::cout << "\033[H\033[2J";  // clear the screen
      std::cout << summary(endpoint, *stats, previous ? &*previous : nullptr, elapsed)
                << std::flush;
      if (flags->once) return 0;
      if (!terminal) std::cout << "\n";
      previous = *stats;
      previous_at = now;
      std::this_thread::sleep_for(std::chrono::duration<double>(flags->interval_s));
    }
  };
}

}  // namespace kvtier::cli
