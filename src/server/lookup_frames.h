// The frames of LOOKUP traffic, read straight from their bytes: a frame of plain LOOKUPs (one
// request or a batch of them) on the server, a frame of LOOKUP success replies on the client.
// A client that checks prompts against kvtierd sends and receives hundreds of thousands of these
// a second, and the general decoder (protocol_codec.cpp) builds a MessagePack object tree and a
// Request or Reply per element, which costs more than the lookup itself.
//
// Contract: each reader accepts only frames whose meaning is plain (every element well formed,
// of the one shape below, each field once) and then reads exactly what the general decoder would
// (same ids, keys, lock_ms; same reply fields in the same order). It returns false, having read
// nothing into its output that matters, for everything else, including every malformed frame:
// the caller then decodes the frame with the general decoder, which is the reference for what a
// frame means and for every error reply.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/server/protocol.h"

namespace kvtier::server {

// One LOOKUP of a frame: its keys are keys[first_key, first_key + num_keys) of the batch.
struct LookupItem {
  uint64_t id = 0;
  uint64_t lock_ms = 0;
  size_t first_key = 0;
  size_t num_keys = 0;
};

// A frame's LOOKUPs, reused from frame to frame (no allocation once it has grown).
struct LookupFrame {
  bool batch = false;  // an array (the replies go back as one), not a single map
  std::vector<LookupItem> items;
  std::vector<ChunkKey> keys;

  std::span<ChunkKey> keys_of(const LookupItem& item) {
    return std::span(keys).subspan(item.first_key, item.num_keys);
  }
};

// A frame within `limits` holding one LOOKUP request map or an array of 1 to kMaxBatchRequests of
// them, each with exactly the fields v (kProtocolVersion), id, op ("LOOKUP"), keys (at most
// kMaxKeysPerRequest, each 16 bytes of bin) and optionally lock_ms, unsigned, in any order, and
// nothing after it. Anything else (another op, a test hook, an unknown field): false.
bool read_lookup_frame(std::span<const std::byte> frame, const DecodeLimits& limits,
                       LookupFrame& out);

// One LOOKUP success reply of a reply frame: its fields, without a Reply's field map.
struct LookupReplyItem {
  uint64_t id = 0;
  uint64_t v = 0;
  uint64_t hits = 0;
  uint64_t pending = 0;
  uint64_t lock = 0;

  Reply to_reply() const;  // as decode_replies gives it
};

// A reply frame holding an array of 1 to kMaxBatchRequests LOOKUP success replies, each with
// exactly the fields v, id, ok (true), hits, pending and lock, unsigned, in any order, and nothing
// after it. On true, `out` holds each reply; to_reply() is what decode_replies gives for it.
// Anything else: false.
bool read_lookup_replies(std::span<const std::byte> frame, std::vector<LookupReplyItem>& out);

}  // namespace kvtier::server
