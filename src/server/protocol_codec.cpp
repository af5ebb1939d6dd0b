// MessagePack decoding of kvtierd frames (encoding: protocol_encode.cpp). Decoding is defensive:
// sizes are checked before allocation (unpack limits, the frame cap), every field's type is
// checked, and nothing throws out of decode_request / decode_reply.
#include <algorithm>
#include <cstring>
#include <limits>
#include <msgpack.hpp>
#include <span>

#include "kvtier/server/protocol.h"

namespace kvtier::server {
namespace {

constexpr std::string_view kOpNames[] = {"REGISTER", "UNREGISTER", "LOOKUP", "STORE",
                                         "RETRIEVE", "RELEASE",    "PING",   "STATS",
                                         "SHUTDOWN", "PIN",        "UNPIN"};
// Indexed by TestHook.
constexpr std::string_view kHookNames[] = {
    "", "throw", "stall", "no_reply", "hang_copies", "fail_copies", "fail_partway", "service"};

// A decode failure: "<code>: <what>".
std::unexpected<Error> bad(std::string_view code, std::string what) {
  return make_error(ErrorCode::kInvalidArgument, std::string(code) + ": " + std::move(what));
}

std::string_view key_name(const msgpack::object& o) {
  return std::string_view(o.via.str.ptr, o.via.str.size);
}

Result<uint64_t> as_uint(const msgpack::object& o, std::string_view field,
                         uint64_t max = UINT64_MAX) {
  if (o.type != msgpack::type::POSITIVE_INTEGER) {
    return bad(codes::kMalformed, "field '" + std::string(field) + "' must be an unsigned integer");
  }
  if (o.via.u64 > max) {
    return bad(codes::kMalformed, "field '" + std::string(field) + "' is out of range");
  }
  return o.via.u64;
}

// A string field, as a view into the frame.
Result<std::string_view> as_str_view(const msgpack::object& o, std::string_view field,
                                     size_t max_len) {
  if (o.type != msgpack::type::STR) {
    return bad(codes::kMalformed, "field '" + std::string(field) + "' must be a string");
  }
  if (o.via.str.size > max_len) {
    return bad(codes::kMalformed, "field '" + std::string(field) + "' is too long");
  }
  return std::string_view(o.via.str.ptr, o.via.str.size);
}

Result<std::string> as_str(const msgpack::object& o, std::string_view field, size_t max_len) {
  auto view = as_str_view(o, field, max_len);
  if (!view) return std::unexpected(view.error());
  return std::string(*view);
}

Result<std::span<const msgpack::object>> as_array(const msgpack::object& o, std::string_view field,
                                                  size_t max_len) {
  if (o.type != msgpack::type::ARRAY) {
    return bad(codes::kMalformed, "field '" + std::string(field) + "' must be an array");
  }
  if (o.via.array.size > max_len) {
    return bad(codes::kMalformed, "field '" + std::string(field) + "' has too many elements");
  }
  return std::span<const msgpack::object>(o.via.array.ptr, o.via.array.size);
}

// Calls on(key, value) for each entry of a map with string keys. A key named twice is
// malformed: list fields would add up (a second "groups" past the bound on the first) and of
// two values one would silently win.
template <class F>
Status for_each_field(const msgpack::object& o, std::string_view what, F&& on) {
  if (o.type != msgpack::type::MAP)
    return bad(codes::kMalformed, std::string(what) + " must be a map");
  std::vector<std::string_view> names;
  names.reserve(o.via.map.size);
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const msgpack::object_kv& kv = o.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR) {
      return bad(codes::kMalformed, std::string(what) + " has a key that is not a string");
    }
    names.push_back(key_name(kv.key));
  }
  std::ranges::sort(names);
  if (auto twice = std::ranges::adjacent_find(names); twice != names.end()) {
    return bad(codes::kMalformed, std::string(what) + " names field '" +
                                      std::string(twice->substr(0, 64)) + "' twice");
  }
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const msgpack::object_kv& kv = o.via.map.ptr[i];
    if (Status st = on(key_name(kv.key), kv.val); !st) return st;
  }
  return {};
}

Result<std::vector<ChunkKey>> decode_keys(const msgpack::object& o) {
  auto items = as_array(o, "keys", kMaxKeysPerRequest);
  if (!items) return std::unexpected(items.error());
  std::vector<ChunkKey> keys;
  keys.reserve(items->size());
  for (const msgpack::object& k : *items) {
    if (k.type != msgpack::type::BIN || k.via.bin.size != 16) {
      return bad(codes::kMalformed, "each key must be 16 bytes of bin");
    }
    ChunkKey key;
    std::memcpy(&key.lo, k.via.bin.ptr, 8);  // little-endian host (x86-64, aarch64)
    std::memcpy(&key.hi, k.via.bin.ptr + 8, 8);
    keys.push_back(key);
  }
  return keys;
}

Result<std::vector<uint32_t>> decode_u32_list(const msgpack::object& o, std::string_view field,
                                              size_t max_len) {
  auto items = as_array(o, field, max_len);
  if (!items) return std::unexpected(items.error());
  std::vector<uint32_t> out;
  out.reserve(items->size());
  for (const msgpack::object& v : *items) {
    auto n = as_uint(v, field, UINT32_MAX);
    if (!n) return std::unexpected(n.error());
    out.push_back(static_cast<uint32_t>(*n));
  }
  return out;
}

Result<std::vector<std::vector<uint32_t>>> decode_blocks(const msgpack::object& o) {
  auto items = as_array(o, "blocks", kMaxKeysPerRequest);
  if (!items) return std::unexpected(items.error());
  std::vector<std::vector<uint32_t>> out;
  out.reserve(items->size());
  for (const msgpack::object& chunk : *items) {
    auto blocks = decode_u32_list(chunk, "blocks", kMaxBlocksPerChunk);
    if (!blocks) return std::unexpected(blocks.error());
    out.push_back(std::move(*blocks));
  }
  return out;
}

Result<KvGroup> decode_group(const msgpack::object& o) {
  KvGroup g;
  const std::pair<std::string_view, uint32_t KvGroup::*> members[] = {
      {"layers", &KvGroup::layers},         {"kv_heads", &KvGroup::kv_heads},
      {"head_dim", &KvGroup::head_dim},     {"dtype_bytes", &KvGroup::dtype_bytes},
      {"block_size", &KvGroup::block_size}, {"blocks_per_chunk", &KvGroup::blocks_per_chunk}};
  Status st = for_each_field(o, "layout group",
                             [&](std::string_view key, const msgpack::object& v) -> Status {
                               for (const auto& [name, member] : members) {
                                 if (key != name) continue;
                                 auto n = as_uint(v, name, UINT32_MAX);
                                 if (!n) return std::unexpected(n.error());
                                 g.*member = static_cast<uint32_t>(*n);
                               }
                               return {};
                             });
  if (!st) return std::unexpected(st.error());
  return g;
}

Result<TestHook> decode_hook(const msgpack::object& o) {
  auto name = as_str(o, "hook", 64);
  if (!name) return std::unexpected(name.error());
  auto hook = parse_test_hook(*name);
  if (!hook) return bad(codes::kInvalidArgument, "unknown test hook '" + *name + "'");
  return *hook;
}

Result<KvLayout> decode_layout(const msgpack::object& o) {
  KvLayout layout;
  Status st =
      for_each_field(o, "layout", [&](std::string_view key, const msgpack::object& v) -> Status {
        if (key == "device_layout") {
          auto name = as_str(v, key, 32);
          if (!name) return std::unexpected(name.error());
          auto parsed = parse_device_layout(*name);
          if (!parsed) return bad(codes::kMalformed, "unknown device_layout '" + *name + "'");
          layout.device_layout = *parsed;
        } else if (key == "groups") {
          auto groups = as_array(v, key, kMaxGroups);
          if (!groups) return std::unexpected(groups.error());
          for (const msgpack::object& g : *groups) {
            auto group = decode_group(g);
            if (!group) return std::unexpected(group.error());
            layout.groups.push_back(*group);
          }
        }
        return {};
      });
  if (!st) return std::unexpected(st.error());
  return layout;
}

Result<SharedKvMemory> decode_memory(const msgpack::object& o) {
  SharedKvMemory mem;
  Status st =
      for_each_field(o, "memory", [&](std::string_view key, const msgpack::object& v) -> Status {
        if (key == "shm_name") {
          auto name = as_str(v, key, 255);
          if (!name) return std::unexpected(name.error());
          mem.shm_name = std::move(*name);
        } else if (key == "pid" || key == "fd") {
          auto n = as_uint(v, key, INT32_MAX);
          if (!n) return std::unexpected(n.error());
          (key == "pid" ? mem.pid : mem.fd) = static_cast<uint32_t>(*n);
        } else if (key == "bytes") {
          auto n = as_uint(v, key);
          if (!n) return std::unexpected(n.error());
          mem.bytes = *n;
        } else if (key == "groups") {
          auto groups = as_array(v, key, kMaxGroups);
          if (!groups) return std::unexpected(groups.error());
          for (const msgpack::object& g : *groups) {
            GroupTensors tensors;
            Status gs = for_each_field(
                g, "memory group", [&](std::string_view gk, const msgpack::object& gv) -> Status {
                  if (gk == "num_blocks") {
                    auto n = as_uint(gv, gk, UINT32_MAX);
                    if (!n) return std::unexpected(n.error());
                    tensors.num_blocks = static_cast<uint32_t>(*n);
                  } else if (gk == "offsets") {
                    auto items = as_array(gv, gk, kMaxTensorsPerGroup);
                    if (!items) return std::unexpected(items.error());
                    for (const msgpack::object& off : *items) {
                      auto n = as_uint(off, gk);
                      if (!n) return std::unexpected(n.error());
                      tensors.offsets.push_back(*n);
                    }
                  }
                  return {};
                });
            if (!gs) return std::unexpected(gs.error());
            mem.groups.push_back(std::move(tensors));
          }
        }
        return {};
      });
  if (!st) return std::unexpected(st.error());
  return mem;
}

// Strings and bins stay in the frame (not copied into the object's zone): every decoder copies
// what it keeps before the frame goes away.
bool reference_frame(msgpack::type::object_type, size_t, void*) {
  return true;
}

// Unpacks the MessagePack object at the start of the frame; `used`: the bytes it took. The
// object refers into `frame`.
Result<msgpack::object_handle> unpack_first(std::span<const std::byte> frame, size_t& used) {
  // Element counts are bounded by the frame size (each element takes at least one byte).
  const size_t n = frame.size();
  const msgpack::unpack_limit limit(n, n, n, n, n, /*depth=*/16);
  try {
    used = 0;
    return msgpack::unpack(reinterpret_cast<const char*>(frame.data()), frame.size(), used,
                           reference_frame, nullptr, limit);
  } catch (const msgpack::insufficient_bytes&) {
    return bad(codes::kMalformed, "truncated MessagePack");
  } catch (const std::exception& e) {
    return bad(codes::kMalformed, std::string("not valid MessagePack (") + e.what() + ")");
  }
}

Status no_trailing_bytes(std::span<const std::byte> frame, size_t used) {
  if (used != frame.size()) return bad(codes::kMalformed, "trailing bytes after the message");
  return {};
}

// Unpacks exactly one MessagePack object filling the whole frame.
Result<msgpack::object_handle> unpack_one(std::span<const std::byte> frame) {
  size_t used = 0;
  auto handle = unpack_first(frame, used);
  if (!handle) return handle;
  if (Status st = no_trailing_bytes(frame, used); !st) return std::unexpected(st.error());
  return handle;
}

Status require(bool present, std::string_view field) {
  if (!present) return bad(codes::kMalformed, "missing field '" + std::string(field) + "'");
  return {};
}

// Reads one field into `out` (type-checked: an error names the field).
template <class T>
Status read_value(Result<T> value, T& out) {
  if (!value) return std::unexpected(value.error());
  out = std::move(*value);
  return {};
}

template <class T>
Status read_uint(const msgpack::object& o, std::string_view field, T& out) {
  auto n = as_uint(o, field, std::numeric_limits<T>::max());
  if (!n) return std::unexpected(n.error());
  out = static_cast<T>(*n);
  return {};
}

// The fields every request carries: v, id, op and hook; the other keys are the operation's.
// Sets *request_id as soon as "id" is read, so that an error reply can echo it.
Result<Request> decode_header(const msgpack::object& root, uint64_t* request_id) {
  Request r;
  std::optional<uint64_t> version;
  std::optional<std::string_view> op_name;
  bool has_id = false;
  Status st = for_each_field(root, "request",
                             [&](std::string_view key, const msgpack::object& v) -> Status {
                               if (key == "v")
                                 return read_value(as_uint(v, key), version.emplace());
                               if (key == "op")
                                 return read_value(as_str_view(v, key, 32), op_name.emplace());
                               if (key == "hook") return read_value(decode_hook(v), r.hook);
                               if (key != "id") return {};
                               if (Status s = read_uint(v, key, r.id); !s) return s;
                               has_id = true;
                               if (request_id) *request_id = r.id;
                               return {};
                             });
  if (!st) return std::unexpected(st.error());
  if (!has_id) return bad(codes::kMalformed, "missing field 'id'");
  if (!version) return bad(codes::kMalformed, "missing field 'v'");
  if (*version != kProtocolVersion) {
    return bad(codes::kUnsupportedVersion, "protocol version " + std::to_string(*version) +
                                               " (this server speaks " +
                                               std::to_string(kProtocolVersion) + ")");
  }
  if (!op_name) return bad(codes::kMalformed, "missing field 'op'");
  auto op = parse_op(*op_name);
  if (!op) return bad(codes::kUnknownOp, "unknown op '" + std::string(*op_name) + "'");
  r.op = *op;
  return r;
}

// One decoder per operation: each reads the fields its operation uses and ignores every other
// key, like an unknown one.

// REGISTER: rank, layout (required), memory (required).
Status decode_register(const msgpack::object& root, Request& r) {
  bool has_layout = false, has_memory = false;
  Status st = for_each_field(root, "request",
                             [&](std::string_view key, const msgpack::object& v) -> Status {
                               if (key == "rank") return read_uint(v, key, r.rank);
                               if (key == "layout") {
                                 has_layout = true;
                                 return read_value(decode_layout(v), r.layout);
                               }
                               if (key == "memory") {
                                 has_memory = true;
                                 return read_value(decode_memory(v), r.memory);
                               }
                               return {};
                             });
  if (!st) return st;
  if (Status s = require(has_layout, "layout"); !s) return s;
  return require(has_memory, "memory");
}

// LOOKUP: keys (required), lock_ms.
Status decode_lookup(const msgpack::object& root, Request& r) {
  bool has_keys = false;
  Status st = for_each_field(root, "request",
                             [&](std::string_view key, const msgpack::object& v) -> Status {
                               if (key == "keys") {
                                 has_keys = true;
                                 return read_value(decode_keys(v), r.keys);
                               }
                               if (key == "lock_ms") return read_uint(v, key, r.lock_ms);
                               return {};
                             });
  if (!st) return st;
  return require(has_keys, "keys");
}

// STORE and RETRIEVE: keys and blocks (both required, one block list per key), group; RETRIEVE
// also lock.
Status decode_transfer(const msgpack::object& root, Request& r) {
  bool has_keys = false, has_blocks = false;
  Status st = for_each_field(root, "request",
                             [&](std::string_view key, const msgpack::object& v) -> Status {
                               if (key == "keys") {
                                 has_keys = true;
                                 return read_value(decode_keys(v), r.keys);
                               }
                               if (key == "blocks") {
                                 has_blocks = true;
                                 return read_value(decode_blocks(v), r.blocks);
                               }
                               if (key == "group") return read_uint(v, key, r.group);
                               if (key == "lock" && r.op == Op::kRetrieve) {
                                 return read_uint(v, key, r.lock);
                               }
                               return {};
                             });
  if (!st) return st;
  if (Status s = require(has_keys, "keys"); !s) return s;
  if (Status s = require(has_blocks, "blocks"); !s) return s;
  if (r.keys.size() != r.blocks.size()) {
    return bad(codes::kMalformed, "'keys' and 'blocks' differ in length");
  }
  return {};
}

// PIN: keys and ttl_ms (both required). UNPIN: keys (required).
Status decode_pin(const msgpack::object& root, Request& r) {
  bool has_keys = false, has_ttl = false;
  Status st = for_each_field(root, "request",
                             [&](std::string_view key, const msgpack::object& v) -> Status {
                               if (key == "keys") {
                                 has_keys = true;
                                 return read_value(decode_keys(v), r.keys);
                               }
                               if (key == "ttl_ms" && r.op == Op::kPin) {
                                 has_ttl = true;
                                 return read_uint(v, key, r.ttl_ms);
                               }
                               return {};
                             });
  if (!st) return st;
  if (Status s = require(has_keys, "keys"); !s) return s;
  return r.op == Op::kPin ? require(has_ttl, "ttl_ms") : Status{};
}

// RELEASE: lock (required).
Status decode_release(const msgpack::object& root, Request& r) {
  bool has_lock = false;
  Status st = for_each_field(root, "request",
                             [&](std::string_view key, const msgpack::object& v) -> Status {
                               if (key != "lock") return {};
                               has_lock = true;
                               return read_uint(v, key, r.lock);
                             });
  if (!st) return st;
  return require(has_lock, "lock");
}

Status decode_operation(const msgpack::object& root, Request& r) {
  switch (r.op) {
    case Op::kRegister:
      return decode_register(root, r);
    case Op::kLookup:
      return decode_lookup(root, r);
    case Op::kStore:
    case Op::kRetrieve:
      return decode_transfer(root, r);
    case Op::kRelease:
      return decode_release(root, r);
    case Op::kPin:
    case Op::kUnpin:
      return decode_pin(root, r);
    case Op::kUnregister:
    case Op::kPing:
    case Op::kStats:
    case Op::kShutdown:
      return {};  // no fields of their own
  }
  return {};
}

}  // namespace

std::string_view to_string(Op op) {
  return kOpNames[static_cast<size_t>(op)];
}

std::optional<Op> parse_op(std::string_view name) {
  for (size_t i = 0; i < std::size(kOpNames); ++i) {
    if (kOpNames[i] == name) return static_cast<Op>(i);
  }
  return std::nullopt;
}

std::string_view to_string(TestHook hook) {
  return kHookNames[static_cast<size_t>(hook)];
}

std::optional<TestHook> parse_test_hook(std::string_view name) {
  for (size_t i = 0; i < std::size(kHookNames); ++i) {
    if (kHookNames[i] == name) return static_cast<TestHook>(i);
  }
  return std::nullopt;
}

ReplyFields::ReplyFields(std::initializer_list<value_type> fields) {
  for (const auto& [name, value] : fields) (*this)[name] = value;
}

ReplyFields::ReplyFields(const std::map<std::string, uint64_t>& fields)
    : items_(fields.begin(), fields.end()) {}

uint64_t& ReplyFields::operator[](std::string_view name) {
  for (auto& [n, value] : items_) {
    if (n == name) return value;
  }
  return items_.emplace_back(std::string(name), 0).second;
}

ReplyFields::const_iterator ReplyFields::find(std::string_view name) const {
  return std::ranges::find_if(items_, [&](const value_type& f) { return f.first == name; });
}

uint64_t Reply::field(std::string_view name, uint64_t fallback) const {
  auto it = fields.find(name);
  return it == fields.end() ? fallback : it->second;
}

std::string tier_down_field(std::string_view tier_name) {
  return "tier." + std::string(tier_name) + ".down";
}

std::vector<std::string> degraded_tiers_of(const Reply& reply) {
  std::vector<std::string> names;
  for (const auto& [name, fields] : tier_fields_of(reply)) {
    auto down = fields.find("down");
    if (down != fields.end() && down->second != 0) names.push_back(name);
  }
  return names;
}

std::map<std::string, std::map<std::string, uint64_t>> tier_fields_of(const Reply& reply) {
  constexpr std::string_view kPrefix = "tier.";
  std::map<std::string, std::map<std::string, uint64_t>> tiers;
  for (const auto& [key, value] : reply.fields) {
    if (!key.starts_with(kPrefix)) continue;
    const size_t dot = key.rfind('.');
    // A name and a field, both nonempty.
    if (dot <= kPrefix.size() || dot + 1 == key.size()) continue;
    tiers[key.substr(kPrefix.size(), dot - kPrefix.size())][key.substr(dot + 1)] = value;
  }
  return tiers;
}

std::string utf8_message(std::string_view text) {
  std::string out;
  out.reserve(std::min(text.size(), kMaxErrorMessage));
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    // The length of a well-formed UTF-8 sequence starting at i (RFC 3629: no overlong forms,
    // no surrogates, nothing past U+10FFFF), or 0.
    size_t n = 0;
    if (lead < 0x80) {
      n = 1;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      n = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      n = 3;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      n = 4;
    }
    bool valid = n > 0 && i + n <= text.size();
    for (size_t k = 1; valid && k < n; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      unsigned char lo = 0x80, hi = 0xBF;
      if (k == 1 && lead == 0xE0) lo = 0xA0;
      if (k == 1 && lead == 0xED) hi = 0x9F;
      if (k == 1 && lead == 0xF0) lo = 0x90;
      if (k == 1 && lead == 0xF4) hi = 0x8F;
      valid = c >= lo && c <= hi;
    }
    const std::string_view piece = valid ? text.substr(i, n) : std::string_view("?");
    if (out.size() + piece.size() > kMaxErrorMessage) break;  // never half a character
    out += piece;
    i += valid ? n : 1;
  }
  return out;
}

Reply Reply::error(uint64_t id, std::string_view code, std::string_view message) {
  Reply r;
  r.id = id;
  r.ok = false;
  r.code = std::string(code);
  r.message = utf8_message(message);
  return r;
}

std::pair<std::string, std::string> split_decode_error(const Error& error) {
  const std::string& m = error.message;
  const size_t colon = m.find(": ");
  if (colon == std::string::npos) return {std::string(codes::kMalformed), m};
  return {m.substr(0, colon), utf8_message(std::string_view(m).substr(colon + 2))};
}

namespace {

// The id first, wherever it sits in the map, so that an error in any other field (also one the
// header decoder meets before "id", or bytes after the message) is answered with the request's
// id.
void peek_id(const msgpack::object& root, uint64_t* request_id) {
  if (!request_id || root.type != msgpack::type::MAP) return;
  for (const msgpack::object_kv& kv : std::span(root.via.map.ptr, root.via.map.size)) {
    if (kv.key.type == msgpack::type::STR && key_name(kv.key) == "id" &&
        kv.val.type == msgpack::type::POSITIVE_INTEGER) {
      *request_id = kv.val.via.u64;
      return;
    }
  }
}

Result<Request> decode_request_object(const msgpack::object& root, uint64_t* request_id) {
  auto request = decode_header(root, request_id);
  if (!request) return std::unexpected(request.error());
  if (Status st = decode_operation(root, *request); !st) return std::unexpected(st.error());
  return request;
}

Status check_frame_size(std::span<const std::byte> frame, const DecodeLimits& limits) {
  if (frame.size() <= limits.max_frame_bytes) return {};
  return bad(codes::kTooLarge, "frame of " + std::to_string(frame.size()) +
                                   " bytes exceeds max_frame_bytes " +
                                   std::to_string(limits.max_frame_bytes));
}

Result<Reply> decode_reply_object(const msgpack::object& root) {
  Reply r;
  bool has_ok = false;
  if (root.type == msgpack::type::MAP) r.fields.reserve(root.via.map.size);
  Status st =
      for_each_field(root, "reply", [&](std::string_view key, const msgpack::object& v) -> Status {
        if (key == "ok") {
          if (v.type != msgpack::type::BOOLEAN)
            return bad(codes::kMalformed, "'ok' must be a boolean");
          r.ok = v.via.boolean;
          has_ok = true;
        } else if (key == "code" || key == "msg" || key == "event") {
          auto s = as_str(v, key, kMaxErrorMessage);
          if (!s) return std::unexpected(s.error());
          (key == "code" ? r.code : key == "msg" ? r.message : r.event) = std::move(*s);
        } else if (key == "id") {
          auto n = as_uint(v, key);
          if (!n) return std::unexpected(n.error());
          r.id = *n;
        } else if (v.type == msgpack::type::POSITIVE_INTEGER) {
          r.fields[key] = v.via.u64;
        }
        return {};
      });
  if (!st) return std::unexpected(st.error());
  if (!has_ok) return bad(codes::kMalformed, "reply without 'ok'");
  return r;
}

}  // namespace

Result<Request> decode_request(std::span<const std::byte> frame, const DecodeLimits& limits,
                               uint64_t* request_id) {
  if (Status st = check_frame_size(frame, limits); !st) return std::unexpected(st.error());
  size_t used = 0;
  auto handle = unpack_first(frame, used);
  if (!handle) return std::unexpected(handle.error());
  peek_id(handle->get(), request_id);
  if (Status st = no_trailing_bytes(frame, used); !st) return std::unexpected(st.error());
  return decode_request_object(handle->get(), request_id);
}

bool is_batch_frame(std::span<const std::byte> frame) {
  if (frame.empty()) return false;
  const auto first = static_cast<uint8_t>(frame[0]);
  return (first >= 0x90 && first <= 0x9f) || first == 0xdc || first == 0xdd;  // fixarray, 16, 32
}

Status decode_batch(std::span<const std::byte> frame, const DecodeLimits& limits,
                    const std::function<void(BatchItem)>& on_item) {
  if (Status st = check_frame_size(frame, limits); !st) return st;
  auto handle = unpack_one(frame);
  if (!handle) return std::unexpected(handle.error());
  auto items = as_array(handle->get(), "batch", kMaxBatchRequests);
  if (!items) return std::unexpected(items.error());
  if (items->empty()) return bad(codes::kMalformed, "empty batch");
  for (const msgpack::object& item : *items) {
    uint64_t id = 0;
    peek_id(item, &id);
    auto request = decode_request_object(item, &id);
    on_item(BatchItem{.request = std::move(request), .id = id});
  }
  return {};
}

Result<Reply> decode_reply(std::span<const std::byte> frame) {
  auto handle = unpack_one(frame);
  if (!handle) return std::unexpected(handle.error());
  return decode_reply_object(handle->get());
}

Result<std::vector<Reply>> decode_replies(std::span<const std::byte> frame) {
  auto handle = unpack_one(frame);
  if (!handle) return std::unexpected(handle.error());
  const msgpack::object& root = handle->get();
  std::vector<Reply> replies;
  if (root.type != msgpack::type::ARRAY) {
    auto reply = decode_reply_object(root);
    if (!reply) return std::unexpected(reply.error());
    replies.push_back(std::move(*reply));
    return replies;
  }
  replies.reserve(root.via.array.size);
  for (const msgpack::object& item : std::span(root.via.array.ptr, root.via.array.size)) {
    auto reply = decode_reply_object(item);
    if (!reply) return std::unexpected(reply.error());
    replies.push_back(std::move(*reply));
  }
  return replies;
}

}  // namespace kvtier::server
