// Helpers shared by the kvtierd integration tests: short client timings, keys, block lists.
#pragma once

#include <chrono>
#include <vector>

#include "kvtier/server/client.h"

namespace kvtier::testing {

using namespace std::chrono_literals;

// Short enough for quick tests, long enough that a loaded machine (sanitizers, parallel
// ctest) answers every PING in time.
inline constexpr auto kHeartbeat = 250ms;

inline server::ClientOptions fast_client(const std::string& endpoint) {
  return server::ClientOptions{.endpoint = endpoint,
                               .heartbeat_interval = kHeartbeat,
                               .request_timeout = 2s,
                               .transfer_deadline = 5s,
                               .connect_timeout = 1s};
}

// Server settings that match fast_client: short heartbeats and client timeout.
inline std::vector<std::string> fast_server_settings() {
  return {"server.heartbeat_interval_s=0.25", "server.client_timeout_s=1",
          "cache.host_bytes=196608", "server.max_frame_bytes=4096"};  // 64 slots of 3 KiB
}

inline std::vector<ChunkKey> test_keys(uint64_t first, size_t n) {
  std::vector<ChunkKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(ChunkKey{.lo = first + i, .hi = 0xC0FFEE});
  return keys;
}

// Chunk i uses blocks [start + i * per_chunk, start + (i + 1) * per_chunk).
inline std::vector<std::vector<uint32_t>> consecutive_blocks(uint32_t start, size_t chunks,
                                                             uint32_t per_chunk) {
  std::vector<std::vector<uint32_t>> out(chunks);
  for (size_t c = 0; c < chunks; ++c) {
    for (uint32_t b = 0; b < per_chunk; ++b)
      out[c].push_back(start + static_cast<uint32_t>(c) * per_chunk + b);
  }
  return out;
}

template <class T>
bool ready_within(std::future<T>& f, std::chrono::milliseconds timeout) {
  return f.wait_for(timeout) == std::future_status::ready;
}

}  // namespace kvtier::testing
