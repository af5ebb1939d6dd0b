#include "serve_instance.h"

#include <httplib.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace kvtier::bench {

double ms_since(BenchClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(BenchClock::now() - t0).count();
}

double metric_sum(const std::string& metrics_text, const std::string& name) {
  std::istringstream lines(metrics_text);
  double total = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(name + "{") || line.starts_with(name + " "))
      total += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return total;
}

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

}  // namespace

namespace {

std::vector<std::string> serve_argv(const std::string& exe, const std::vector<std::string>& sets) {
  std::vector<std::string> argv = {exe, "serve"};
  for (const std::string& s : sets) argv.insert(argv.end(), {"--set", s});
  return argv;
}

}  // namespace

ServeInstance::ServeInstance(const std::string& exe, const std::vector<std::string>& sets,
                             std::chrono::milliseconds ready_timeout)
    : ServeInstance(serve_argv(exe, sets), ready_timeout) {}

ServeInstance::ServeInstance(const std::vector<std::string>& argv,
                             std::chrono::milliseconds ready_timeout) {
  dir_ = std::filesystem::temp_directory_path() /
         ("kvtier-bench-serve-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
  std::filesystem::create_directories(dir_);
  process_ = ChildProcess::spawn(argv, {.output_file = dir_ / "out.log"});
  try {
    wait_ready(ready_timeout);
  } catch (...) {
    process_.kill_and_reap();  // the destructor does not run for a constructor that throws
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    throw;
  }
}

void ServeInstance::wait_ready(std::chrono::milliseconds ready_timeout) {
  const auto deadline = BenchClock::now() + ready_timeout;
  const std::regex line(R"(serving .* on http://([0-9.]+):([0-9]+))");
  while (BenchClock::now() < deadline) {
    const std::string text = read_file(dir_ / "out.log");
    std::smatch m;
    if (std::regex_search(text, m, line)) {
      host_ = m[1];
      port_ = std::stoi(m[2]);
      break;
    }
    if (const auto& how = process_.poll_exit()) {
      throw ServeExited("kvtier serve " + *how +
                        " before it served; its output: " + (text.empty() ? "(none)" : text));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // waiting for a process start
  }
  if (port_ == 0) throw std::runtime_error("kvtier serve did not print its port: " + log_tail());
  while (health() != 200) {
    if (const auto& how = process_.poll_exit())
      throw ServeExited("kvtier serve " + *how + " before /health answered 200: " + log_tail());
    if (BenchClock::now() >= deadline)
      throw std::runtime_error("kvtier serve never answered /health 200: " + log_tail());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ServeInstance::~ServeInstance() {
  process_.stop(std::chrono::seconds(10));  // SIGTERM: graceful, its run dir is removed
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

bool ServeInstance::running() {
  return !process_.poll_exit().has_value() && process_.running();
}

std::string ServeInstance::log_tail(size_t bytes) const {
  const std::string text = read_file(dir_ / "out.log");
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

HttpAnswer ServeInstance::get(const std::string& path, std::chrono::milliseconds timeout) const {
  httplib::Client c(host_, port_);
  c.set_connection_timeout(timeout);
  c.set_read_timeout(timeout);
  auto r = c.Get(path);
  if (!r) return {};
  return {r->status, r->body};
}

StreamResult ServeInstance::stream(const std::string& prompt, size_t max_tokens,
                                   std::chrono::milliseconds timeout,
                                   std::optional<size_t> hang_up_after) const {
  httplib::Client c(host_, port_);
  c.set_connection_timeout(std::chrono::seconds(2));
  c.set_read_timeout(timeout);
  c.set_write_timeout(std::chrono::seconds(5));
  const nlohmann::json body = {{"prompt", prompt},
                               {"max_tokens", max_tokens},
                               {"temperature", 0},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}}}};
  StreamResult result;
  std::string pending;
  size_t events = 0;
  const auto t0 = BenchClock::now();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (BenchClock::now() - t0 > timeout) return false;  // a stream that never ends: give up
    pending.append(data, size);
    for (size_t end = pending.find("\n\n"); end != std::string::npos; end = pending.find("\n\n")) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.starts_with("event: error")) result.error_event = true;
      if (event == "data: [DONE]") result.done = !result.error_event;
      if (!event.starts_with("data: ") || event == "data: [DONE]") continue;
      const auto j = nlohmann::json::parse(event.substr(6), nullptr, false);
      if (!j.is_object()) continue;
      if (const auto usage = j.find("usage"); usage != j.end() && usage->is_object()) {
        result.prompt_tokens = usage->value("prompt_tokens", size_t{0});
        const auto details = usage->find("prompt_tokens_details");
        if (details != usage->end() && details->is_object())
          result.cached_tokens = details->value("cached_tokens", size_t{0});
      }
      if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) continue;
      const std::string piece = j["choices"][0].value("text", "");
      if (!piece.empty()) {
        result.last_piece_ms = ms_since(t0);
        if (!result.ttft_ms) result.ttft_ms = result.last_piece_ms;
        ++result.pieces;
      }
      result.text += piece;
      if (hang_up_after && ++events >= *hang_up_after) {
        result.hung_up = true;
        return false;  // closes the connection mid-stream
      }
    }
    return true;
  };
  auto r = c.send(req);
  result.status = r ? r->status : 0;
  if (result.hung_up) result.done = false;
  result.wall_ms = ms_since(t0);
  return result;
}

std::pair<double, std::string> ServeInstance::complete(const std::string& prompt,
                                                       size_t max_tokens) const {
  const StreamResult r = stream(prompt, max_tokens, std::chrono::seconds(600));
  if (r.status != 200 || !r.ttft_ms || !r.done) {
    throw std::runtime_error("completion failed: status " + std::to_string(r.status) +
                             (r.error_event ? " and an error event" : ""));
  }
  return {*r.ttft_ms, r.text};
}

}  // namespace kvtier::bench
