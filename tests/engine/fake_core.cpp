// kvtier_fake_core: a scripted stand-in for `kvtier engine-core <n>` that speaks the core side of
// the frontend protocol (docs/engine.md), for the frontend's tests.
//
//   kvtier_fake_core engine-core <n> --run-dir <dir> --config <file> [switches]
// Switches:
//   --hb-ms <ms>         heartbeat interval (default 20)
//   --no-hello           never say hello (the engine stays "starting")
//   --degraded <name>    heartbeats name <name> as degraded from the start
// Each `add` answers max_tokens tokens, two per `out`: token i is 'a' + (prompt size + i) % 26;
// prompt_tokens is the prompt size, cached_tokens half of it. Prompt contents script faults:
//   #hang      never answer this request (it stays in flight)
//   #err       answer `err` "scripted error"
//   #fail      send `failed` "scripted failure", keep heartbeating (H2: the failure must stay)
//   #exit      exit with status 3 at once
//   #stall     stop heartbeats and answers: the loop blocks (H6)
//   #degraded  heartbeats name "cache server" as degraded;  #recover  they stop
//   #garbage   send a frame that is not MessagePack and an `out` with ill-typed fields, then
//              answer normally
// Heartbeat counters: heartbeats, requests (received `add`s), aborts.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "kvtier/engine/wire.h"

namespace {

bool has(const std::string& text, const char* marker) {
  return text.find(marker) != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7 || std::string(argv[1]) != "engine-core") {
    std::cerr << "usage: kvtier_fake_core engine-core <n> --run-dir <dir> --config <file> ...\n";
    return 2;
  }
  const std::string core = argv[2];
  const std::string run_dir = argv[4];
  int hb_ms = 20;
  bool hello = true;
  std::set<std::string> degraded;
  for (int i = 7; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--hb-ms" && i + 1 < argc)
      hb_ms = std::stoi(argv[++i]);
    else if (flag == "--no-hello")
      hello = false;
    else if (flag == "--degraded" && i + 1 < argc)
      degraded.insert(argv[++i]);
  }
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::routing_id, "core-" + core);
  socket.set(zmq::sockopt::linger, 0);
  socket.connect("ipc://" + run_dir + "/frontend.ipc");
  const int core_number = std::stoi(core);
  if (hello)
    kvtier::send_message(socket, {{"t", "hello"}, {"core", core_number}, {"pid", getpid()}});
  double heartbeats = 0, requests = 0, aborts = 0;
  auto next_hb = std::chrono::steady_clock::now();
  for (;;) {
    if (std::chrono::steady_clock::now() >= next_hb) {
      ++heartbeats;
      kvtier::send_message(
          socket,
          {{"t", "hb"},
           {"core", core_number},
           {"degraded", degraded},
           {"counters", {{"heartbeats", heartbeats}, {"requests", requests}, {"aborts", aborts}}},
           {"kinds", {{"heartbeats", "counter"}, {"requests", "counter"}, {"aborts", "counter"}}}});
      next_hb += std::chrono::milliseconds(hb_ms);
    }
    zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 1, std::chrono::milliseconds(5));
    while (auto received = kvtier::try_receive(socket, false)) {
      if (!*received) continue;
      const nlohmann::json& m = (*received)->body;
      const std::string type = m["t"];
      if (type == "shutdown") return 0;
      if (type == "abort") ++aborts;
      if (type != "add") continue;
      ++requests;
      const std::vector<int> prompt = m["prompt"];
      const std::string text(prompt.begin(), prompt.end());
      const std::string id = m["id"];
      const int max_tokens = m["max_tokens"];
      if (has(text, "#exit")) _exit(3);
      if (has(text, "#stall")) {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // a blocked loop
      }
      if (has(text, "#fail")) {
        kvtier::send_message(
            socket, {{"t", "failed"}, {"core", core_number}, {"reason", "scripted failure"}});
        continue;
      }
      if (has(text, "#degraded")) degraded.insert("cache server");
      if (has(text, "#recover")) degraded.clear();
      if (has(text, "#hang")) continue;
      if (has(text, "#err")) {
        kvtier::send_message(socket, {{"t", "err"}, {"id", id}, {"message", "scripted error"}});
        continue;
      }
      if (has(text, "#garbage")) {
        (void)socket.send(zmq::buffer(std::string("\xc1 not msgpack")), zmq::send_flags::none);
        kvtier::send_message(socket, {{"t", "out"}, {"id", id}, {"tokens", "x"}});
        kvtier::send_message(socket, {{"t", "hb"}, {"degraded", 7}});
      }
      const int size = static_cast<int>(prompt.size());
      for (int i = 0; i < max_tokens; i += 2) {
        std::vector<int> tokens;
        for (int j = i; j < std::min(i + 2, max_tokens); ++j)
          tokens.push_back('a' + (size + j) % 26);
        const bool done = i + 2 >= max_tokens;
        kvtier::send_message(
            socket, {{"t", "out"},
                     {"id", id},
                     {"tokens", tokens},
                     {"done", done},
                     {"finish_reason", done ? nlohmann::json("length") : nlohmann::json(nullptr)},
                     {"prompt_tokens", size},
                     {"cached_tokens", size / 2}});
      }
    }
  }
}
