// The kvtierd wire protocol, version 1 (docs/protocol.md is the normative description).
//
// Transport: ZeroMQ. The server binds a ROUTER socket, a client connects a DEALER socket. A
// request is ONE frame (the ROUTER adds the client's identity in front); a reply is ONE frame.
// Every frame is one MessagePack map with string keys (or an array of such maps: a batch). Every
// request carries "v" (protocol version), "id" (a client-chosen request id, echoed by the reply)
// and "op". Every reply carries "v", "id" and "ok"; an error reply adds "code" and "msg" (at most
// kMaxErrorMessage bytes). The server also sends unsolicited event frames with "id" 0 and "event".
//
// This header holds the typed form of those frames and the codec. Decoding never throws: any
// malformed, truncated or oversized input is an Error whose message says what was wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/core/chunk_key.h"
#include "kvtier/core/kv_layout.h"
#include "kvtier/core/status.h"

namespace kvtier::server {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kMaxErrorMessage = 256;  // bytes of an error reply's "msg"
inline constexpr size_t kMaxKeysPerRequest = 65536;
inline constexpr size_t kMaxBlocksPerChunk = 65536;
inline constexpr size_t kMaxGroups = 64;
inline constexpr size_t kMaxTensorsPerGroup = 4096;
// Copies one STORE or RETRIEVE may ask for: keys x tensors x blocks per chunk (each copy is a
// descriptor the server holds until the transfer ends).
inline constexpr uint64_t kMaxCopiesPerTransfer = uint64_t{1} << 22;
// Requests in one batch frame (a MessagePack array of request maps; docs/protocol.md).
inline constexpr size_t kMaxBatchRequests = 1024;

enum class Op {
  kRegister,
  kUnregister,
  kLookup,
  kStore,
  kRetrieve,
  kRelease,
  kPing,
  kStats,
  kShutdown,
  kPin,
  kUnpin
};

std::string_view to_string(Op op);
std::optional<Op> parse_op(std::string_view name);

// Test hooks: a request's optional "hook" field, honoured only by a server started with
// --test-hooks. On the wire it is the hook's name; kNone is no field.
enum class TestHook {
  kNone,
  kThrow,        // "throw": the handler raises (an "internal" reply)
  kStall,        // "stall": the handler takes 2 s (the socket loop keeps serving)
  kNoReply,      // "no_reply": no reply at all (breaks F11 on purpose, for client deadlines)
  kHangCopies,   // "hang_copies": the transfer's copies hang until the process ends
  kFailCopies,   // "fail_copies": a device fault before any copy (transfer_failed)
  kFailPartway,  // "fail_partway": a fault after the first copy, which hangs (unprovable)
  kService,      // "service": handled on the service thread also where the socket loop would
                 // answer it itself (LOOKUP), to compare the two
};

std::string_view to_string(TestHook hook);  // "" for kNone
// kNone for "", nullopt for a name that is not a hook.
std::optional<TestHook> parse_test_hook(std::string_view name);

// Error codes of error replies ("code"), as strings on the wire.
namespace codes {
inline constexpr std::string_view kMalformed = "malformed";  // not a valid request frame
inline constexpr std::string_view kTooLarge = "too_large";   // frame over max_frame_bytes
inline constexpr std::string_view kUnsupportedVersion = "unsupported_version";
inline constexpr std::string_view kUnknownOp = "unknown_op";
inline constexpr std::string_view kInvalidArgument = "invalid_argument";
inline constexpr std::string_view kNotRegistered = "not_registered";
inline constexpr std::string_view kAlreadyRegistered = "already_registered";
inline constexpr std::string_view kNotFound = "not_found";
inline constexpr std::string_view kResourceExhausted = "resource_exhausted";
inline constexpr std::string_view kLimitExceeded = "limit_exceeded";
inline constexpr std::string_view kBusy = "busy";  // e.g. UNREGISTER with transfers in flight
inline constexpr std::string_view kTransferFailed = "transfer_failed";  // copies stopped
inline constexpr std::string_view kUnprovable = "unprovable";           // copies may still run (F7)
inline constexpr std::string_view kShuttingDown = "shutting_down";
inline constexpr std::string_view kInternal = "internal";               // a handler raised
inline constexpr std::string_view kUnsealedMemory = "unsealed_memory";  // REGISTER: not sealed
inline constexpr std::string_view kQuotaExceeded = "quota_exceeded";    // over a tenant's quota
// A routing id in use by a client of another tenant.
inline constexpr std::string_view kPermissionDenied = "permission_denied";
}  // namespace codes

// The client's KV cache as the server reaches it: one file holding every tensor of every group
// at the given byte offsets (the host device's stand-in for CUDA IPC). The server maps only
// memory sealed against shrinking (a memfd with F_SEAL_SHRINK, named by the client's pid and
// descriptor; see sealed_memory.h): anything else is refused with "unsealed_memory".
struct GroupTensors {
  std::vector<uint64_t> offsets;  // kPerLayer: one per layer; kCrossLayer: one
  uint32_t num_blocks = 0;
};
struct SharedKvMemory {
  uint32_t pid = 0;      // the registering process, which holds the memfd open...
  uint32_t fd = 0;       // ...as this descriptor; the server opens /proc/<pid>/fd/<fd>
  std::string shm_name;  // instead of pid/fd: a POSIX shm object, "/name" (always refused:
                         // it cannot be sealed; decoded to say so)
  uint64_t bytes = 0;    // size of the object
  std::vector<GroupTensors> groups;
};

struct Request {
  uint64_t id = 0;
  Op op = Op::kPing;
  TestHook hook = TestHook::kNone;  // honoured only by a server started with --test-hooks
  // REGISTER
  uint32_t rank = 0;
  KvLayout layout;
  SharedKvMemory memory;
  // LOOKUP / STORE / RETRIEVE / PIN / UNPIN
  std::vector<ChunkKey> keys;
  uint64_t lock_ms = 0;  // LOOKUP: hold a read lock on the hits this long (0: no lock)
  uint32_t group = 0;    // STORE / RETRIEVE
  std::vector<std::vector<uint32_t>> blocks;  // STORE / RETRIEVE: device blocks per key
  uint64_t lock = 0;    // RETRIEVE (optional, released after pinning) / RELEASE
  uint64_t ttl_ms = 0;  // PIN: how long the keys stay pinned (1 .. server.max_pin_ttl_s)
};

// `text` as an error reply's "msg": valid UTF-8 (each byte of a malformed sequence becomes
// '?'), cut to at most kMaxErrorMessage bytes between characters, never inside one.
std::string utf8_message(std::string_view text);

// A reply's integer fields by name, each once, in the order they were added (decoded: as they
// came). Flat: a LOOKUP reply has three and a client decodes hundreds of thousands a second;
// finding a name is a scan (STATS, the largest reply, has about a hundred).
class ReplyFields {
 public:
  using value_type = std::pair<std::string, uint64_t>;
  using const_iterator = std::vector<value_type>::const_iterator;

  ReplyFields() = default;
  ReplyFields(std::initializer_list<value_type> fields);
  explicit ReplyFields(const std::map<std::string, uint64_t>& fields);

  // The field's value, added as 0 when absent.
  uint64_t& operator[](std::string_view name);
  const_iterator find(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  void clear() { items_.clear(); }  // keeps the capacity
  void reserve(size_t n) { items_.reserve(n); }
  std::map<std::string, uint64_t> to_map() const { return {begin(), end()}; }
  bool operator==(const ReplyFields& other) const { return to_map() == other.to_map(); }

 private:
  std::vector<value_type> items_;
};

struct Reply {
  uint64_t id = 0;
  bool ok = true;
  std::string code;     // error replies
  std::string message;  // error replies, at most kMaxErrorMessage bytes
  std::string event;    // unsolicited events ("shutdown"), id 0
  ReplyFields fields;   // every other reply field (all unsigned integers)

  uint64_t field(std::string_view name, uint64_t fallback = 0) const;
  static Reply error(uint64_t id, std::string_view code, std::string_view message);
};

// H7, lower tiers: STATS and PING replies carry "tier.<name>.down" (1 while the tier is DOWN;
// STATS also sends 0 for an UP tier). Optional fields: a reply without them names no tier.
std::string tier_down_field(std::string_view tier_name);
// The names of the tiers a reply says are DOWN, in name order.
std::vector<std::string> degraded_tiers_of(const Reply& reply);
// Every tier a reply names, with its fields: "tier.<name>.<field>" becomes
// tiers[name][field] (the name is what lies between "tier." and the last '.'). STATS names every
// configured tier (its "down" and its TierCounters); PING only the DOWN ones.
std::map<std::string, std::map<std::string, uint64_t>> tier_fields_of(const Reply& reply);

struct DecodeLimits {
  size_t max_frame_bytes = size_t{1} << 20;
};

std::string encode_request(const Request& request);
std::string encode_reply(const Reply& reply);
// Append the same bytes to `frame` (to build a batch's body without a copy per message).
void append_request(std::string& frame, const Request& request);
void append_reply(std::string& frame, const Reply& reply);
// A LOOKUP request: the bytes append_request gives for Request{id, kLookup, keys, lock_ms},
// without building that Request (lookup_many sends them by the thousand).
void append_lookup_request(std::string& frame, uint64_t id, std::span<const ChunkKey> keys,
                           uint64_t lock_ms);
// A LOOKUP's success reply: the bytes encode_reply gives for Reply{id, fields {hits, pending,
// lock}} (in that order), appended without building that Reply (the socket loop answers LOOKUPs at
// a rate where its map costs more than the lookup).
void append_lookup_reply(std::string& frame, uint64_t id, uint64_t hits, bool pending,
                         uint64_t lock);

// Errors are kInvalidArgument; the message starts with the protocol error code
// ("too_large: ...", "malformed: ...", "unsupported_version: ...", "unknown_op: ...") and, when
// the frame carried a readable "id", `request_id` is set so the error reply can echo it.
Result<Request> decode_request(std::span<const std::byte> frame, const DecodeLimits& limits,
                               uint64_t* request_id = nullptr);
Result<Reply> decode_reply(std::span<const std::byte> frame);

// Batches (docs/protocol.md): a frame may hold a MessagePack array of 1 to kMaxBatchRequests
// request maps instead of one map. The server handles each as if it came in its own frame and
// sends the replies it gives at once together, as one array frame; the rest come later, each
// in its own frame. A client that never sends an array never receives one.
//
// Whether a frame holds an array (a batch) rather than anything else (one request).
bool is_batch_frame(std::span<const std::byte> frame);
struct BatchItem {
  Result<Request> request;  // as decode_request decodes a frame holding only this element
  uint64_t id = 0;          // the element's "id" whenever it could be read, else 0
};
// Calls on_item with each element, in order, once the whole frame was checked. The error (one
// for the whole frame, as decode_request's, and no call) when the frame is too large, not one
// valid MessagePack value, not an array, or an array of no or too many elements.
Status decode_batch(std::span<const std::byte> frame, const DecodeLimits& limits,
                    const std::function<void(BatchItem)>& on_item);
// One frame holding `count` encoded messages (each as encode_request or encode_reply gives it),
// concatenated in `body`, as one MessagePack array.
std::string encode_batch(size_t count, std::string_view body);
// A frame built in place: messages appended to `bytes` (append_request, append_reply, ...) after
// room for a batch's array header, which batch() writes into that room, so that a batch is sent
// from where it was built, without encode_batch's copy. Reused from frame to frame (clear()).
struct BatchFrame {
  static constexpr size_t kHeaderRoom = 5;             // the largest MessagePack array header
  std::string bytes = std::string(kHeaderRoom, '\0');  // the room, then the messages

  size_t body_size() const { return bytes.size() - kHeaderRoom; }
  // The messages as they are: a frame of its own when there is one.
  std::string_view body() const { return std::string_view(bytes).substr(kHeaderRoom); }
  // The `count` messages as one array frame: the bytes encode_batch(count, body()) gives.
  std::string_view batch(size_t count);
  void clear() { bytes.resize(kHeaderRoom); }  // keeps the capacity
};
// A reply frame: one reply (a map) or a batch of them (an array). Errors as decode_reply's; an
// array element that is not a reply fails the whole frame.
Result<std::vector<Reply>> decode_replies(std::span<const std::byte> frame);

// Splits a decode error message into (code, message) as an error reply carries them.
std::pair<std::string, std::string> split_decode_error(const Error& error);

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace kvtier::server
