// RESP2, the Redis protocol, as the Redis tier speaks it: commands out, replies in. Private to
// src/tier.
//
// Commands are arrays of bulk strings. A command's last argument may end with a `tail` held by
// the caller (a SET's record header and chunk), which goes to the socket from the caller's
// memory, never copied (redis_connection.h). A reply is parsed from a buffer (parse_reply), except
// a top-level bulk string, which the connection streams: straight into the command's `head` and
// `body` when it has exactly their size (a GET of a chunk record: its header, then its payload into
// the caller's buffer), into `text` otherwise.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::tier_internal {

struct RedisReply {
  enum class Type : uint8_t { kStatus, kError, kInteger, kString, kNil, kArray };
  Type type = Type::kNil;
  std::string text;                  // kStatus, kError, kString (unless in_buffers)
  long long integer = 0;             // kInteger
  bool in_buffers = false;           // kString read into the command's head and body; text empty
  std::vector<RedisReply> elements;  // kArray

  bool is_error() const { return type == Type::kError; }
  // kStatus with this text ("OK", "PONG").
  bool is_status(std::string_view status) const { return type == Type::kStatus && text == status; }
};

struct RedisCommand {
  std::string_view key;                // routes the command (redis_router.h)
  std::vector<std::string_view> args;  // the whole command, key included; not owned
  // Sent as the end of the last argument, in order; not owned.
  std::array<std::string_view, 2> tail = {};
  // Called when the connection lets the command out, before any of its bytes are sent: a SET
  // computes its record's header then, so its chunk is hashed just before the send reads it.
  std::function<void()> on_release = {};
  // A bulk-string reply of exactly head.size() + body.size() bytes is read into these.
  std::span<std::byte> head = {};
  std::span<std::byte> body = {};
  // Called with each reply as soon as it has arrived, on the calling thread, before the rest
  // of the batch is read: a GET's record is verified while it is still in the CPU's cache.
  // A redirected command is called again with its next reply.
  std::function<void(const RedisReply&)> on_reply = {};
};

// The bytes of the tail.
size_t tail_bytes(const RedisCommand& command);
// Bytes of the RESP header of a command with these arguments, the tail counted in the last
// one: "*<argc>\r\n" and "$<len>\r\n" per argument, with the arguments and their "\r\n",
// except the tail and its final "\r\n".
size_t resp_owned_bytes(const RedisCommand& command);
// Appends those bytes to `out` (whose capacity the caller reserved: pointers into it stay
// valid). Returns where they start.
size_t append_resp_command(const RedisCommand& command, std::string& out);

inline constexpr size_t kMaxBulkBytes = size_t{512} << 20;  // Redis's proto-max-bulk-len
inline constexpr int kMaxReplyDepth = 8;

enum class ParseStatus { kDone, kNeedMore, kBad };
// Parses one whole reply at the front of `in`. kDone sets `reply` and `used` (bytes consumed);
// kBad sets `reply.text` to what is wrong.
ParseStatus parse_reply(std::string_view in, RedisReply& reply, size_t& used, int depth = 0);
// The first line of a bulk string at the front of `in` ("$<len>\r\n"): kDone sets `length`
// (-1: nil) and `used`.
ParseStatus parse_bulk_header(std::string_view in, long long& length, size_t& used);

}  // namespace kvtier::tier_internal
